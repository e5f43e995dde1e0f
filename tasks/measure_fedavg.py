r"""Measures plain FedAvg (no privacy) on a task: test accuracy, seconds/round.

A baseline for the private runs: TFF's `build_weighted_fed_avg` with client
SGD and server SGD(1.0) on `tasks.get_task(--task)`, test accuracy from TFF's
federated evaluation of the task's own model and metrics on the whole test
set (one evaluation client holding it). Run from the repository root:

  .venv/bin/python -m tasks.measure_fedavg --task=mnist5k --rounds=10 \
      --clients_per_round=100 --client_learning_rate=0.05 --batch_size=10
  .venv/bin/python -m tasks.measure_fedavg --task=shakespeare_offline \
      --rounds=5 --clients_per_round=10 --client_learning_rate=1.0 \
      --batch_size=4

The first round includes TFF's tracing and compilation; it is reported apart
from the mean of the others.
"""

import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

import tasks
from tff_priv import runtime

_TASK = flags.DEFINE_enum('task', 'mnist5k', tasks.TASK_NAMES, 'Task name.')
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


def _evaluate(task, learning_process, state) -> dict[str, float]:
  evaluation = tff.learning.algorithms.build_fed_eval(task.model_fn)
  eval_state = evaluation.set_model_weights(
      evaluation.initialize(), learning_process.get_model_weights(state)
  )
  output = evaluation.next(
      eval_state, [task.datasets.get_centralized_test_data()]
  )
  metrics = output.metrics['client_work']['eval']['current_round_metrics']
  return {k: float(v) for k, v in metrics.items()}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  runtime.set_context()
  tf.keras.utils.set_random_seed(_SEED.value)
  options = {}
  if _NUM_CLIENTS.value is not None:
    options['num_clients'] = _NUM_CLIENTS.value
  task = tasks.get_task(
      _TASK.value,
      train_client_spec=tff.simulation.baselines.ClientSpec(
          num_epochs=_NUM_EPOCHS.value, batch_size=_BATCH_SIZE.value
      ),
      seed=_SEED.value,
      cache_dir=_CACHE_DIR.value,
      **options,
  )
  num_train_clients = len(task.datasets.train_data.client_ids)
  learning_process = tff.learning.algorithms.build_weighted_fed_avg(
      task.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=_CLIENT_LR.value
      ),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(
          learning_rate=_SERVER_LR.value
      ),
  )
  state = learning_process.initialize()
  print(
      f'task={_TASK.value} train_clients={num_train_clients} '
      f'clients_per_round={_CLIENTS_PER_ROUND.value} rounds={_ROUNDS.value} '
      f'client_lr={_CLIENT_LR.value} batch={_BATCH_SIZE.value} '
      f'epochs={_NUM_EPOCHS.value}',
      flush=True,
  )
  seconds = []
  for round_num in range(_ROUNDS.value):
    clients = task.datasets.sample_train_clients(
        min(_CLIENTS_PER_ROUND.value, num_train_clients),
        random_seed=_SEED.value * 100_003 + round_num,
    )
    start = time.monotonic()
    output = learning_process.next(state, clients)
    seconds.append(time.monotonic() - start)
    state = output.state
    train = output.metrics['client_work']['train']
    print(
        f'round {round_num + 1}: {seconds[-1]:.2f} s, train loss '
        f'{float(train["loss"]):.4f}',
        flush=True,
    )
  start = time.monotonic()
  metrics = _evaluate(task, learning_process, state)
  eval_seconds = time.monotonic() - start
  later = np.mean(seconds[1:]) if len(seconds) > 1 else float('nan')
  print(
      f'RESULT task={_TASK.value} test_metrics={metrics} '
      f'first_round_s={seconds[0]:.2f} mean_later_round_s={later:.2f} '
      f'eval_s={eval_seconds:.1f}',
      flush=True,
  )


if __name__ == '__main__':
  app.run(main)
