r"""Trains a task with a tff_priv privacy mechanism, on TFF's program layer.

Flags -> `tff_priv.program.training.RunConfig` -> `training.run`: the task,
the mechanism's learning process, the privacy ledger in the checkpointed
program state, CSV / TensorBoard releases, the summary. Every field of
`RunConfig` and every mechanism parameter is a flag (`--helpfull` lists
them); a parameter the chosen mechanism does not take is refused. Run from the
repository root:

  .venv/bin/python scripts/train.py                  # dp_fedavg on mnist5k
  .venv/bin/python scripts/train.py --mechanism=smp --epsilon=8 \
      --compression=0.1 --root_output_dir=output/smp
  .venv/bin/python scripts/train.py --mechanism=smp --mask=top_k \
      --public_clients=20 --compression=0.1 --root_output_dir=output/smp_top_k
  .venv/bin/python scripts/train.py --mechanism=udp --epsilon=8 --clip=1 \
      --client_learning_rate=0.5 --root_output_dir=output/udp

Started again with the same --root_output_dir, a run resumes at its last
checkpoint with its privacy ledger; a different configuration there is
refused. Writes <root_output_dir>/summary.json at the end and prints its path.
Exit status 2 with one line on stderr for bad flags or a refused directory
(another configuration, another run using it); SIGINT/SIGTERM end the run
with one line saying how to resume (exit 128 + the signal); an unwritable
directory ends it with one line (exit 1). Quiet by default: a line per phase
as it starts (loading, tracing, the first round, each evaluation: public
values only), then a progress bar on a terminal, one line per round
otherwise; --verbose shows TF's and the program's logs.
"""

import sys

from tff_priv.program import command

_VERBOSE_ARGV = command.quiet_environment(sys.argv)
command.refuse_busy_directory('train.py', sys.argv)
command.probe_workers('train.py', sys.argv)
# The first phase line, in a second: TF and TFF then load for several.
from tff_priv.program import progress  # pylint: disable=g-import-not-at-top

progress.phase(progress.shows_progress(sys.argv), 'loading TensorFlow and TFF')

# pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import flags

from tff_priv import cli
from tff_priv.program import layout
from tff_priv.program import run_flags
from tff_priv.program import summary as summary_lib
from tff_priv.program import training

# pylint: enable=g-import-not-at-top,g-bad-import-order

run_flags.define_flags()
flags.adopt_module_key_flags(run_flags)
_CACHE_DIR = flags.DEFINE_string(
    'cache_dir', None, 'Where cached data sets are read (online tasks).'
)
_ROOT_OUTPUT_DIR = flags.DEFINE_string(
    'root_output_dir',
    None,
    'Run directory (default output/<task>_<mechanism>).',
)
_CHECKPOINT_EVERY = flags.DEFINE_integer(
    'checkpoint_every', 1, 'Save the program state every N rounds.'
)
_KEEP_CHECKPOINTS = flags.DEFINE_integer(
    'keep_checkpoints', 3, 'Program states kept on disk.'
)
_PROGRESS = flags.DEFINE_bool(
    'progress',
    True,
    'Progress on stderr: a bar on a terminal, one line per round otherwise.',
)
_RESTART_MODEL = flags.DEFINE_bool(
    'restart_model',
    False,
    'Train a new model from round 0 in a run directory whose privacy ledger '
    'holds charges (needed when no checkpoint there is readable; readable '
    'ones are set aside): every earlier charge stays, and --epsilon '
    'calibrates the new rounds to the budget left.',
)
_VERBOSE = flags.DEFINE_bool(
    'verbose', False, "TF's and the program's logs (quiet by default)."
)

_CLI = cli.Cli(
    'train.py', doc=__doc__, key_modules=(__name__, run_flags, command)
)


def _short(value):
  """A float in 4 significant digits (the summary keeps every digit)."""
  return f'{value:.4g}' if isinstance(value, float) else value


def main(argv):
  if len(argv) > 1:
    _CLI.fail(f'unexpected arguments {argv[1:]}')
  try:
    config = run_flags.run_config().validate()
    for name, flag in (
        ('checkpoint_every', _CHECKPOINT_EVERY),
        ('keep_checkpoints', _KEEP_CHECKPOINTS),
    ):
      if flag.value < 1:
        raise ValueError(f'{name} must be >= 1, got {flag.value}')
  except (ValueError, TypeError) as e:
    _CLI.fail(str(e))
  root = _ROOT_OUTPUT_DIR.value or f'output/{config.task}_{config.mechanism}'
  verbose = _VERBOSE.value or flags.FLAGS['verbosity'].present
  summary = command.main(
      'train.py',
      lambda: training.run(
          config,
          root,
          checkpoint_every=_CHECKPOINT_EVERY.value,
          keep_checkpoints=_KEEP_CHECKPOINTS.value,
          progress=_PROGRESS.value,
          cache_dir=_CACHE_DIR.value,
          restart_model=_RESTART_MODEL.value,
      ),
      root,
      verbose,
  )
  privacy = summary['privacy']
  guarantees = ' '.join(
      f"{g['adversary']}_epsilon={_short(g['epsilon'])}"
      for g in privacy['guarantees']
  )
  print(
      f"{layout.path(root, layout.SUMMARY)}: {summary['task']} "
      f"{summary['mechanism']} rounds={summary['rounds_run']} "
      f'{summary_lib.accuracy_line(summary)} '
      f"{guarantees} at delta={privacy['delta']}"
      + (
          f" (target epsilon={privacy['target_epsilon']})"
          if privacy.get('target_epsilon') is not None
          else ''
      )
      + (
          f" {privacy['empirical']['headline']}"
          if 'empirical' in privacy
          else ''
      )
  )


def entry():
  """The `tff-priv-train` console command (pyproject.toml)."""
  _CLI.run(main)


if __name__ == '__main__':
  entry()
