r"""Times whole rounds of FedAvg, TFF's DP-FedAvg and every tff_priv mechanism.

All processes run on the same K clients of one task, round-robin
(`tff_priv.benchmarks.rounds`); prints, per K, the median seconds of a round,
the spread, the ratio to plain FedAvg and, for client-noise mechanisms, the
floor that K x d normal draws alone give.

    .venv/bin/python scripts/benchmark_rounds.py --task=mnist5k \
        --clients_per_round=20,100 --rounds=4

With --loopback_workers=1,2,3 each process is also timed over 1, 2 and 3 TFF
workers started on this machine (`python -m tff_priv.worker`, through
`runtime.set_context('remote')`), the ratios to the local run: the cost of
the remote path.
"""

import sys

from tff_priv import cli

cli.quiet(sys.argv)  # Before TensorFlow is imported.

# pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import app
from absl import flags

from tff_priv.benchmarks import rounds

# pylint: enable=g-import-not-at-top,g-bad-import-order

_VERBOSE = cli.define_verbose()

# Task and model.
_TASK = flags.DEFINE_string(
    'task', 'mnist5k', 'Task name (tff_priv_tasks.TASK_NAMES).'
)
_MODEL = flags.DEFINE_string(
    'model', None, "The task's model option (e.g. cnn, mlp); None: its default."
)
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 10, 'Client batch size.')
_NUM_EPOCHS = flags.DEFINE_integer('num_epochs', 1, 'Client epochs.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the client split.')

# What to time.
_CLIENTS = flags.DEFINE_list(
    'clients_per_round', ['20'], 'K values, each timed in its own table.'
)
_PROCESSES = flags.DEFINE_list(
    'processes',
    list(rounds.PROCESSES),
    f'Processes to time, among {", ".join(rounds.PROCESSES)}.',
)
_LEARNING_RATE = flags.DEFINE_float('learning_rate', 0.1, 'Client SGD rate.')
_ROUNDS = flags.DEFINE_integer('rounds', 4, 'Timed rounds per process.')
_WARMUP = flags.DEFINE_integer('warmup', 1, 'Untimed rounds first.')
_LOOPBACK = flags.DEFINE_list(
    'loopback_workers',
    [],
    'Also time each process over this many TFF workers on this machine '
    '(e.g. 1,2,3); ratios to the local run.',
)

# Output.
_FORMAT = flags.DEFINE_enum('format', 'table', ['table', 'json'], 'Output.')


def main(argv):
  del argv
  rounds.run(
      rounds.Options(
          task=_TASK.value,
          model=_MODEL.value,
          batch_size=_BATCH_SIZE.value,
          num_epochs=_NUM_EPOCHS.value,
          seed=_SEED.value,
          clients_per_round=tuple(int(k) for k in _CLIENTS.value),
          processes=tuple(_PROCESSES.value),
          learning_rate=_LEARNING_RATE.value,
          rounds=_ROUNDS.value,
          warmup=_WARMUP.value,
          loopback_workers=tuple(int(n) for n in _LOOPBACK.value),
          format=_FORMAT.value,
      )
  )


if __name__ == '__main__':
  app.run(main)
