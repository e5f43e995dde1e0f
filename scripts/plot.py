r"""PNG plots of tff_priv training runs: accuracy vs round, accuracy vs eps.

Reads the run directories scripts/train.py wrote (their eval_metrics.csv,
config.json and summary.json; see `tff_priv.program.plotting`):

  .venv/bin/python scripts/plot.py \
      --run_dirs=output/none,output/dp_fedavg,output/smp --output_dir=output

writes <output_dir>/accuracy_vs_round.png and accuracy_vs_epsilon.png and
prints their paths. The eps axis is logarithmic; a run whose eps is more than
100 times every other run's (LDP-FL's eps of millions) is a marker on its right
edge, its eps written beside it. Where a run's server-view eps
(`server_epsilon`: smp's, udp's) differs from the analyst's, it is a dashed
line of the run's colour. Runs of one configuration (seeds, repeats) get legend
entries that end with their directories ('smp eps=8 (seed2)'). Exit status 2
with one line on stderr for bad flags or a directory that is not a run
directory.
"""

import os
import sys

from tff_priv import cli

# A run without summary.json is read through TensorFlow: its C++ logs off.
cli.quiet_environment(sys.argv)

# pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import flags

from tff_priv.program import plotting

# pylint: enable=g-import-not-at-top,g-bad-import-order

_RUN_DIRS = flags.DEFINE_list(
    'run_dirs', None, 'Comma-separated run directories of scripts/train.py.'
)
_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', 'output', 'Where the PNG files are written.'
)

_JOIN_RUNS = flags.DEFINE_bool(
    'join_runs',
    False,
    'Join the last points of the runs of each mechanism into a curve (for '
    'runs that differ only in their target eps).',
)

ROUND_PNG = 'accuracy_vs_round.png'
EPSILON_PNG = 'accuracy_vs_epsilon.png'


_CLI = cli.Cli('plot.py', doc=__doc__, key_modules=(__name__,))
_fail = _CLI.fail
_parse_flags = _CLI.parse_flags


def main(argv):
  if len(argv) > 1:
    _fail(f'unexpected arguments {argv[1:]}')
  if not _RUN_DIRS.value:
    _fail('--run_dirs is required')
  try:
    runs = [plotting.load_run(d) for d in _RUN_DIRS.value]
  except ValueError as e:
    _fail(str(e))
  outputs = (
      (plotting.plot_accuracy_vs_round, ROUND_PNG),
      (
          lambda r, p: plotting.plot_accuracy_vs_epsilon(
              r, p, join_runs=_JOIN_RUNS.value
          ),
          EPSILON_PNG,
      ),
  )
  for plot, name in outputs:
    path = os.path.join(_OUTPUT_DIR.value, name)
    plot(runs, path)
    print(path)


def entry():
  """The `tff-priv-plot` console command (pyproject.toml)."""
  _CLI.run(main)


if __name__ == '__main__':
  entry()
