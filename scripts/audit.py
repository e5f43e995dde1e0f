"""Prints the empirical privacy audit of every tff_priv factory.

  .venv/bin/python scripts/audit.py --trials=1000 [--format=json]

One round of each mechanism at settings near the README quickstart, audited
by `tff_priv.auditing.aggregator_audit.audit_aggregator` (see
docs/auditing.md); the logic lives in `tff_priv.auditing.catalogue`.
"""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

from tff_priv import runtime
from tff_priv.auditing import catalogue

_TRIALS = flags.DEFINE_integer('trials', 1000, 'Runs of each process per client set.')
_DIMENSION = flags.DEFINE_integer('dimension', 200, 'Values per client.')
_DELTA = flags.DEFINE_float('delta', catalogue.QUICKSTART_DELTA, 'delta of both eps.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the canaries and the split.')
_FORMAT = flags.DEFINE_enum('format', 'text', ['text', 'json'], 'Output format.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  runtime.set_context('simulation')
  rows = catalogue.audit_table(
      catalogue.quickstart_settings(_DIMENSION.value),
      trials=_TRIALS.value, delta=_DELTA.value, seed=_SEED.value,
      warn=False)
  print(catalogue.format_table(rows, _FORMAT.value))
  if not all(result.passed for _, result in rows):
    return 1
  return 0


if __name__ == '__main__':
  app.run(main)
