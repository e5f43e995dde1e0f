"""Prints the empirical privacy audit of every tff_priv factory.

  .venv/bin/python scripts/audit.py --trials=1000 [--format=json] [--plot=audit.png] [--one_run]

One round of each mechanism at settings near the README quickstart, audited
by `tff_priv.auditing.aggregator_audit.audit_aggregator` (see
docs/auditing.md); the logic lives in `tff_priv.auditing.catalogue`.
`--one_run` adds a row for a tiny udp training run audited by Steinke et al.'s
one-run bound (`tff_priv.experiments.one_run_audit`). Exit
status 1 when an audit fails (a lower bound above its claim).
"""

import sys
import tempfile

from tff_priv.program import command

_VERBOSE_ARGV = command.quiet_environment(sys.argv)

# pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import flags

from tff_priv import cli
from tff_priv import remote
from tff_priv.auditing import catalogue
from tff_priv.experiments import one_run_audit
from tff_priv.program import training
# pylint: enable=g-import-not-at-top,g-bad-import-order

_TRIALS = flags.DEFINE_integer(
    'trials', 1000, 'Runs of each process per client set.'
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
    'one_run', False,
    'Also audit a udp training run with canary examples (about 20 s).',
)
_ONE_RUN_CANARIES = flags.DEFINE_integer(
    'one_run_canaries', 200, 'Canary examples of the --one_run run.'
)
_ONE_RUN_ROUNDS = flags.DEFINE_integer(
    'one_run_rounds', 30, 'Rounds of the --one_run run.'
)
_ONE_RUN_EPSILON = flags.DEFINE_float(
    'one_run_epsilon', 1.0,
    'Accounted eps of the --one_run run (whole run, delta 1e-5); keep it '
    'below what its canaries can show (3.80 for 200), or the row cannot fail.',
)
_CLI = cli.Cli('audit.py')


def main(argv):
  if len(argv) > 1:
    _CLI.fail(f'unexpected arguments: {argv[1:]}')
  try:
    command.set_context()
    rows = catalogue.audit_table(
        catalogue.quickstart_settings(_DIMENSION.value),
        trials=_TRIALS.value, delta=_DELTA.value, seed=_SEED.value,
        warn=False)
    extra = []
    if _ONE_RUN.value:
      config = one_run_audit.config(
          _ONE_RUN_CANARIES.value, _ONE_RUN_ROUNDS.value,
          _ONE_RUN_EPSILON.value,
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
    catalogue.plot(rows, _PLOT.value)
  if not all(result.passed for _, result in rows) or any(
      r['verdict'] != 'pass' for r in extra
  ):
    sys.exit(1)


if __name__ == '__main__':
  _CLI.run(main)
