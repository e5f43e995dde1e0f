r"""Measures plain FedAvg (no privacy) on a task: test accuracy, seconds/round.

A baseline for the private runs (`tff_priv.benchmarks.fedavg`): TFF's
`build_weighted_fed_avg` with client SGD and server SGD(1.0) on
`tff_priv_tasks.get_task(--task)`, test accuracy from TFF's federated
evaluation of the task's own model and metrics on the whole test set (one
evaluation client holding it). Run from the repository root:

  .venv/bin/python scripts/measure_fedavg.py --task=mnist5k --rounds=10 \
      --clients_per_round=100 --client_learning_rate=0.05 --batch_size=10
  .venv/bin/python scripts/measure_fedavg.py --task=shakespeare_offline \
      --rounds=5 --clients_per_round=10 --client_learning_rate=1.0 \
      --batch_size=4

The first round includes TFF's tracing and compilation; it is reported apart
from the mean of the others (the last line, `RESULT ...`).
"""

import sys

from tff_priv import cli

cli.quiet(sys.argv)  # Before TensorFlow is imported.

# pylint: disable=g-import-not-at-top,g-bad-import-order
import functools

from absl import app
from absl import flags

from tff_priv.benchmarks import fedavg

# pylint: enable=g-import-not-at-top,g-bad-import-order

_VERBOSE = cli.define_verbose()
_TASK = flags.DEFINE_enum('task', 'mnist5k', fedavg.TASK_NAMES, 'Task name.')
_NUM_CLIENTS = flags.DEFINE_integer(
    'num_clients', None, 'Clients of a synthetic split (task default if unset).'
)
_CACHE_DIR = flags.DEFINE_string('cache_dir', None, 'Data set cache folder.')

_ROUNDS = flags.DEFINE_integer('rounds', 10, 'Training rounds.')
_CLIENTS_PER_ROUND = flags.DEFINE_integer(
    'clients_per_round',
    100,
    'Clients sampled uniformly without replacement per round.',
)
_CLIENT_LR = flags.DEFINE_float(
    'client_learning_rate', 0.05, 'Client SGD rate.'
)
_SERVER_LR = flags.DEFINE_float('server_learning_rate', 1.0, 'Server SGD rate.')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 10, 'Client batch size.')
_NUM_EPOCHS = flags.DEFINE_integer('num_epochs', 1, 'Local epochs per round.')
_SEED = flags.DEFINE_integer(
    'seed', 0, 'Seed of the split, client sampling and model init.'
)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  fedavg.measure(
      fedavg.Options(
          task=_TASK.value,
          num_clients=_NUM_CLIENTS.value,
          cache_dir=_CACHE_DIR.value,
          rounds=_ROUNDS.value,
          clients_per_round=_CLIENTS_PER_ROUND.value,
          client_learning_rate=_CLIENT_LR.value,
          server_learning_rate=_SERVER_LR.value,
          batch_size=_BATCH_SIZE.value,
          num_epochs=_NUM_EPOCHS.value,
          seed=_SEED.value,
      ),
      out=functools.partial(print, flush=True),
  )


if __name__ == '__main__':
  app.run(main)
