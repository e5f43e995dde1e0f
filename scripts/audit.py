r"""Prints the empirical privacy audit of every tff_priv factory.

  .venv/bin/python scripts/audit.py --trials=1000 [--format=json] \
      [--plot=audit.png] [--one_run]
  .venv/bin/python scripts/audit.py --power_plot=docs/images/audit_power.png \
      --calibration_plot=docs/images/audit_calibration.png

One round of each mechanism at settings near the README quickstart, audited
by `tff_priv.auditing.aggregator_audit.audit_aggregator` (see
docs/auditing.md); the logic lives in `tff_priv.auditing.catalogue`. Per
factory it prints the claim, the (eps, delta) bound, the Gaussian-DP mu bound
and the largest eps its trials can show. `--power_plot` and
`--calibration_plot` replay audits of Gaussian factories
(`tff_priv.auditing.power`) instead.
`--one_run` adds a row for a tiny udp training run audited by Steinke et al.'s
one-run bound and the f-DP one of Mahloujifar et al.
(`tff_priv.experiments.one_run_audit`); `--one_run_sweep=1,0.5,0.1,0` repeats
that run at fractions of its noise instead. Exit
status 1 when an audit fails (a lower bound above its claim).
"""

import sys
import tempfile

from tff_priv import cli

cli.quiet(sys.argv)  # Before TensorFlow is imported.

# pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import flags

from tff_priv import remote
from tff_priv.auditing import catalogue
from tff_priv.auditing import power
from tff_priv.experiments import one_run_audit
from tff_priv.program import command
from tff_priv.program import training

# pylint: enable=g-import-not-at-top,g-bad-import-order

_VERBOSE = cli.define_verbose()

_TRIALS = flags.DEFINE_integer(
    'trials',
    1000,
    'Runs per client set of a factory audited run by run (smp, distortion, '
    'ldp with d > 1 values...).',
)
_VECTORIZED_TRIALS = flags.DEFINE_integer(
    'vectorized_trials',
    100_000,
    'Trials per client set of a factory whose trials are vectorised (TFF '
    'gaussian_fixed, udp, ldp with one value): about 10-30 s each.',
)
_ALPHA = flags.DEFINE_float(
    'alpha', 1e-3, 'A true claim fails with probability <= alpha.'
)
_POWER_PLOT = flags.DEFINE_string(
    'power_plot',
    None,
    'Instead of the table: replay audits of Gaussian factories and write the '
    'power curves here (PNG; a few minutes), printing the power table.',
)
_CALIBRATION_PLOT = flags.DEFINE_string(
    'calibration_plot',
    None,
    'Instead of the table: bounds vs trials against the true eps of honest '
    'Gaussians (PNG), printing the rows.',
)
_SEEDS = flags.DEFINE_integer(
    'seeds', 100, 'Replayed audits per cell of --power_plot.'
)
_DIMENSION = flags.DEFINE_integer('dimension', 200, 'Values per client.')
_DELTA = flags.DEFINE_float(
    'delta', catalogue.QUICKSTART_DELTA, 'delta of both eps.'
)
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the canaries and the split.')
_FORMAT = flags.DEFINE_enum(
    'format', 'text', ['text', 'json'], 'Output format.'
)
_PLOT = flags.DEFINE_string(
    'plot', None, 'Also write the lower bound vs accounted eps plot here.'
)
_ONE_RUN = flags.DEFINE_bool(
    'one_run',
    False,
    'Also audit a udp training run with canary examples (about 20 s).',
)
_ONE_RUN_CANARIES = flags.DEFINE_integer(
    'one_run_canaries', 200, 'Canary examples of the --one_run run.'
)
_ONE_RUN_ROUNDS = flags.DEFINE_integer(
    'one_run_rounds', 30, 'Rounds of the --one_run run.'
)
_ONE_RUN_EPSILON = flags.DEFINE_float(
    'one_run_epsilon',
    1.0,
    'Accounted eps of the --one_run run (whole run, delta 1e-5); keep it '
    'below what its canaries can show (3.80 for 200), or the row cannot fail.',
)
_ONE_RUN_SWEEP = flags.DEFINE_list(
    'one_run_sweep',
    None,
    'Instead of the table: noise fractions (e.g. 1,0.5,0.2,0.1,0.05,0.02,0,'
    ' of the noise --one_run_epsilon needs) at which the --one_run run is '
    "repeated, printing Steinke et al.'s and the f-DP bound for each "
    '(a few minutes).',
)
_ONE_RUN_CANARY_TASK = flags.DEFINE_enum(
    'one_run_canary_task',
    'digits',
    ['digits', 'mnist5k_softmax'],
    "The --one_run run's task: digits (64 inputs: 200 canaries interfere) or "
    "mnist5k's softmax regression over 10 clients (784 inputs).",
)
_CLI = cli.Cli('audit.py', doc=__doc__, key_modules=(__name__,))


def _one_run_task():
  if _ONE_RUN_CANARY_TASK.value == 'digits':
    return {}
  return dict(one_run_audit.LOW_INTERFERENCE)


def _print_sweep():
  """The --one_run_sweep table (Markdown)."""
  print(
      '| noise fraction | z | Steinke eps lower bound | f-DP mu lower bound '
      '(its eps) |'
  )
  print('|---|---|---|---|')
  with tempfile.TemporaryDirectory() as tmp:
    rows = one_run_audit.noise_sweep(
        [float(f) for f in _ONE_RUN_SWEEP.value],
        tmp,
        canaries=_ONE_RUN_CANARIES.value,
        rounds=_ONE_RUN_ROUNDS.value,
        epsilon=_ONE_RUN_EPSILON.value,
        **_one_run_task(),
        progress=lambda r: print(
            f"| {r['fraction']:g} | {r['noise_multiplier']:.4g} | "
            f"{r['steinke_epsilon_lower_bound']:.3f} | "
            f"{r['fdp_mu_lower_bound']:.3f} "
            f"({r['fdp_epsilon_lower_bound']:.3f}) |",
            flush=True,
        ),
    )
  for key in ('steinke_epsilon_lower_bound', 'fdp_epsilon_lower_bound'):
    print(
        f'{key}: refutes eps {_ONE_RUN_EPSILON.value:g} up to noise '
        f'fraction {one_run_audit.largest_refuted(rows, key)}'
    )


def main(argv):
  if len(argv) > 1:
    _CLI.fail(f'unexpected arguments: {argv[1:]}')
  if _ONE_RUN_SWEEP.value:
    try:
      command.set_context()
      _print_sweep()
    except ValueError as e:
      _CLI.fail(str(e))
    return
  if _POWER_PLOT.value or _CALIBRATION_PLOT.value:
    if _POWER_PLOT.value:
      table = power.plot_power(
          _POWER_PLOT.value,
          seeds=_SEEDS.value,
          ratios=(1.0, 1.2, 1.4, 1.5, 2.0, 10.0),
      )
      print(power.format_power_table(table))
    if _CALIBRATION_PLOT.value:
      for row in power.plot_calibration(_CALIBRATION_PLOT.value):
        print(row)
    return
  try:
    command.set_context()
    rows = catalogue.audit_table(
        catalogue.quickstart_settings(_DIMENSION.value),
        trials=_TRIALS.value,
        vectorized_trials=_VECTORIZED_TRIALS.value,
        delta=_DELTA.value,
        seed=_SEED.value,
        alpha=_ALPHA.value,
        warn=False,
    )
    extra = []
    if _ONE_RUN.value:
      config = one_run_audit.config(
          _ONE_RUN_CANARIES.value,
          _ONE_RUN_ROUNDS.value,
          _ONE_RUN_EPSILON.value,
          **_one_run_task(),
      )
      with tempfile.TemporaryDirectory() as tmp:
        summary = training.run(config, f'{tmp}/run', progress=False)
      extra.append(one_run_audit.row(config, summary))
  except ValueError as e:
    _CLI.fail(str(e))
  except remote.WorkerLostError as e:  # A --workers worker lost.
    print(f'audit.py: error: {e}', file=sys.stderr)
    cli.exit_now(1)
  print(catalogue.format_table(rows, _FORMAT.value, extra))
  if _PLOT.value:
    catalogue.plot(rows, _PLOT.value, extra)
  if not all(result.passed for _, result in rows) or any(
      r['verdict'] != 'pass' for r in extra
  ):
    sys.exit(1)


def entry():
  """The `tff-priv-audit` console command (pyproject.toml)."""
  _CLI.run(main)


if __name__ == '__main__':
  entry()
