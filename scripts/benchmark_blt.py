r"""The error of DP-FTRL's prefix sums at equal privacy: BLT vs TFF's tree.

Exact (no sampling): for each T and k participations, the RMSE and max error
of the released prefix sums, in units of clip / mu at equal (eps, delta), of
independent noise, TFF's tree as dp_ftrl runs it, the square-root Toeplitz
factorization and the BLTs `--mechanism=blt` and the optimiser give
(`tff_priv.benchmarks.blt_error`; docs/blt.md).

    .venv/bin/python scripts/benchmark_blt.py --rounds=100,500,2000 \
        --participations=1,4
"""

import sys

from tff_priv import cli

cli.quiet(sys.argv)  # Before TensorFlow is imported.

# pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import app
from absl import flags

from tff_priv.benchmarks import blt_error

# pylint: enable=g-import-not-at-top,g-bad-import-order

_VERBOSE = cli.define_verbose()
_ROUNDS = flags.DEFINE_string(
    'rounds', blt_error.Options.rounds, 'Comma-separated T values.'
)
_PARTICIPATIONS = flags.DEFINE_string(
    'participations',
    blt_error.Options.participations,
    'Comma-separated k values (each dividing every T).',
)
_FORMAT = flags.DEFINE_enum('format', 'table', ['table', 'json'], 'Output.')


def main(argv):
  del argv
  blt_error.run(
      blt_error.Options(
          rounds=_ROUNDS.value,
          participations=_PARTICIPATIONS.value,
          format=_FORMAT.value,
      )
  )


if __name__ == '__main__':
  app.run(main)
