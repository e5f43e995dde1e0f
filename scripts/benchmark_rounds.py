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

import json

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

import tasks
from tff_priv import remote
from tff_priv import runtime
from tff_priv import worker
from tff_priv.benchmarks import rounds
from tff_priv.program import mechanisms

_ALL = (
    rounds.FEDAVG, rounds.TFF_DP_FEDAVG
) + mechanisms.MECHANISMS + (rounds.UDP_PER_EXAMPLE,)

# Task and model.
_TASK = flags.DEFINE_string('task', 'mnist5k', 'Task name (tasks.TASK_NAMES).')
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
    'processes', list(_ALL), f'Processes to time, among {", ".join(_ALL)}.'
)
_LEARNING_RATE = flags.DEFINE_float('learning_rate', 0.1, 'Client SGD rate.')
_ROUNDS = flags.DEFINE_integer('rounds', 4, 'Timed rounds per process.')
_WARMUP = flags.DEFINE_integer('warmup', 1, 'Untimed rounds first.')
_LOOPBACK = flags.DEFINE_list(
    'loopback_workers', [],
    'Also time each process over this many TFF workers on this machine '
    '(e.g. 1,2,3); ratios to the local run.',
)

# Output.
_FORMAT = flags.DEFINE_enum('format', 'table', ['table', 'json'], 'Output.')


def _contexts(local, launched):
  """'local' and 'N workers' -> context, over the first N of `launched`."""
  contexts = {'local': local}
  for n in (int(n) for n in _LOOPBACK.value):
    contexts[f'{n} worker' + ('s' if n > 1 else '')] = remote.create_context(
        [w.address for w in launched[:n]]
    )
  return contexts


def main(argv):
  del argv
  local = runtime.set_context()
  launched = [
      worker.Launched() for _ in range(max(map(int, _LOOPBACK.value), default=0))
  ]
  try:
    _benchmark(_contexts(local, launched) if launched else {})
  finally:
    tff.framework.set_default_context(local)
    for w in launched:
      w.stop()


def _benchmark(contexts):
  """Times every K; with `contexts`, each process in each of them."""
  options = {} if _MODEL.value is None else {'model': _MODEL.value}
  task = tasks.get_task(
      _TASK.value,
      train_client_spec=tff.simulation.baselines.ClientSpec(
          num_epochs=_NUM_EPOCHS.value, batch_size=_BATCH_SIZE.value
      ),
      seed=_SEED.value,
      **options,
  )
  train = task.datasets.train_data
  with tf.Graph().as_default():
    d = int(sum(
        np.prod(v.shape) for v in task.model_fn().trainable_variables
    ))
  results = []
  for k in (int(k) for k in _CLIENTS.value):
    client_ids = train.client_ids[:k]
    datasets = [
        task.datasets.train_preprocess_fn(
            train.create_tf_dataset_for_client(c)
        )
        for c in client_ids
    ]
    min_examples = min(
        int(train.create_tf_dataset_for_client(c).reduce(0, lambda n, _: n + 1))
        for c in client_ids
    )
    entries = rounds.build_processes(
        _PROCESSES.value,
        model_fn=task.model_fn,
        num_clients=len(train.client_ids),
        clients_per_round=k,
        learning_rate=_LEARNING_RATE.value,
        min_client_examples=min_examples,
    )
    baseline, where = rounds.FEDAVG, {}
    if contexts:
      entries, where, baseline = rounds.placed(entries, contexts)
    times = rounds.time_rounds(
        entries, datasets, rounds=_ROUNDS.value, warmup=_WARMUP.value,
        contexts=where,
    )
    noise = rounds.noise_draw_seconds(task.model_fn, k)
    rows = rounds.summarize(times, noise, baseline)
    results.append(dict(
        task=_TASK.value, model=options.get('model'), d=d, clients_per_round=k,
        rounds=_ROUNDS.value, noise_draw_seconds=noise, rows=rows,
        seconds={name: ts for name, ts in times.items()},
    ))
    if _FORMAT.value == 'table':
      print(f'\n{_TASK.value}, d = {d:,}, K = {k}, medians of {_ROUNDS.value} '
            f'rounds after {_WARMUP.value} warm-up; K x d normal draws: '
            f'{noise:.3f} s')
      print(rounds.format_table(rows, baseline))
  if _FORMAT.value == 'json':
    print(json.dumps(results, indent=1))


if __name__ == '__main__':
  app.run(main)
