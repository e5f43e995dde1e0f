r"""Times the per-client ledger and budget filter at a production population.

    .venv/bin/python scripts/benchmark_ledger.py --num_clients=342477 \
        --per_round=1000 --rounds=1000

(`tff_priv.benchmarks.ledger_scale`: each round draws, filters, charges and
reads the worst eps, as the training program does; a checkpoint's JSON every
--checkpoint_every rounds.) Prints one JSON object.
"""

import json

from absl import app
from absl import flags

from tff_priv.benchmarks import ledger_scale

_NUM_CLIENTS = flags.DEFINE_integer('num_clients', 342_477, 'Population.')
_PER_ROUND = flags.DEFINE_integer('per_round', 1000, 'Clients drawn a round.')
_ROUNDS = flags.DEFINE_integer('rounds', 1000, 'Rounds.')
_NOISE = flags.DEFINE_float(
    'noise_multiplier', 2.0, "A participation's server-view Gaussian z."
)
_BUDGET = flags.DEFINE_float(
    'budget_epsilon', 8.0, "A client's budget (the filter's bound)."
)
_CHECKPOINT_EVERY = flags.DEFINE_integer(
    'checkpoint_every', 100, 'Serialise the ledger every N rounds.'
)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments {argv[1:]}')
  print(
      json.dumps(
          ledger_scale.run(
              _NUM_CLIENTS.value,
              _PER_ROUND.value,
              _ROUNDS.value,
              noise_multiplier=_NOISE.value,
              budget_epsilon=_BUDGET.value,
              checkpoint_every=_CHECKPOINT_EVERY.value,
          ),
          indent=1,
      )
  )


if __name__ == '__main__':
  app.run(main)
