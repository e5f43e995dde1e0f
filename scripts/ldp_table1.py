"""Reproduces LDP-FL Table 1's MNIST row (Sun, Qian, Chen) on offline data.

For every mode in --modes ('weights' = the paper: clients encode their full
local weights and the server's model is their mean; 'deltas' = FedAvg on
encoded deltas) and every eps in --epsilons plus the noise-free baseline, runs
`tff_priv.learning.ldp_fl.build_ldp_fl_process` for --rounds rounds and
records the final test accuracy. Prints the measured table beside the paper's
(97.26 / 13.84 / 95.36 / 96.24 / 96.34 / 96.39 for noise-free / eps 0.1, 0.5,
1, 5, 10) and the privacy report of every eps (`ldp_fl.ldp_privacy_report`:
per value, plain composition d T eps, accountant, shuffle bound; per round and
cumulative).

Outputs in --output_dir: results.jsonl (one line per finished config, written
as it finishes; a rerun skips configs already there), table.md and
accuracy_vs_eps.png.

Paper setting (the defaults): 100 IID clients, 10 rounds, client SGD lr 0.03,
McMahan CNN. The data differ: the offline mnist5k task has 5,000 MNIST digits
(4,000 train = 40 per client, 1,000 test) instead of 60,000/10,000.
"""

import collections
import os
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

import tasks
from tff_priv import runtime
from tff_priv.learning import ldp_fl
from tff_priv.program import results_log

# LDP-FL Table 1, MNIST row (accuracy %).
PAPER_MNIST = collections.OrderedDict(
    [('none', 97.26), (0.1, 13.84), (0.5, 95.36), (1.0, 96.24), (5.0, 96.34),
     (10.0, 96.39)]
)

# Task.
_TASK = flags.DEFINE_string('task', 'mnist5k', 'Task name (tasks.get_task).')
_MODEL = flags.DEFINE_string('model', 'cnn', 'Model of the task (cnn | mlp).')
_CLIENTS = flags.DEFINE_integer('clients', 100, 'Number of IID clients.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the split and sampling.')
# Training.
_ROUNDS = flags.DEFINE_integer('rounds', 10, 'Communication rounds.')
_LR = flags.DEFINE_float('client_learning_rate', 0.03, 'Client SGD lr.')
_BATCH = flags.DEFINE_integer('batch_size', 10, 'Client batch size.')
_EPOCHS = flags.DEFINE_integer('local_epochs', 1, 'Local epochs per round.')
_PER_ROUND = flags.DEFINE_integer(
    'max_clients_per_round', None, 'Clients sampled per round (default all).'
)
_RUNS = flags.DEFINE_integer('runs', 1, 'Runs per config (the paper: 10).')
# Mechanism.
_EPSILONS = flags.DEFINE_list(
    'epsilons', ['0.1', '0.5', '1', '5', '10'], 'eps values.'
)
_NOISE_FREE = flags.DEFINE_bool('noise_free', True, 'Also run noise-free.')
_MODES = flags.DEFINE_list('modes', ['weights', 'deltas'], 'Modes to run.')
_WEIGHTS_RADIUS = flags.DEFINE_float(
    'weights_radius', ldp_fl.DEFAULT_WEIGHTS_RADIUS, 'r in weights mode.'
)
_DELTAS_RADIUS = flags.DEFINE_float(
    'deltas_radius', ldp_fl.DEFAULT_DELTAS_RADIUS, 'r in deltas mode.'
)
_DELTA = flags.DEFINE_float('delta', 1e-5, 'delta of the privacy report.')
# Output.
_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', 'results/ldp_table1', 'Output folder.'
)


def _key(mode, eps, run):
  return f'{mode}/eps={eps if eps is not None else "none"}/run={run}'


def _data():
  task = tasks.get_task(
      _TASK.value,
      train_client_spec=tff.simulation.baselines.ClientSpec(
          num_epochs=_EPOCHS.value, batch_size=_BATCH.value
      ),
      seed=_SEED.value,
      model=_MODEL.value,
      num_clients=_CLIENTS.value,
      partition='iid',
  )
  train = task.datasets.train_data
  clients = [
      task.datasets.train_preprocess_fn(train.create_tf_dataset_for_client(c))
      for c in train.client_ids
  ]
  return task, clients


def _accuracy(task, weights):
  model = task.model_fn()
  weights.assign_weights_to(model)
  correct = total = 0
  for x, y in task.datasets.get_centralized_test_data():
    pred = model.predict_on_batch(x, training=False)
    correct += int(np.sum(np.argmax(pred, -1) == np.reshape(y, [-1])))
    total += int(np.size(y))
  return correct / total


def _run_config(task, clients, mode, eps, run, num_values):
  radius = _WEIGHTS_RADIUS.value if mode == 'weights' else _DELTAS_RADIUS.value
  process = ldp_fl.build_ldp_fl_process(
      task.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(_LR.value),
      epsilon=eps,
      mode=mode,
      radius=radius,
  )
  per_round = min(_PER_ROUND.value or len(clients), len(clients))
  rng = np.random.default_rng([_SEED.value, run])
  state = process.initialize()
  history = []
  start = time.time()
  for t in range(1, _ROUNDS.value + 1):
    chosen = rng.choice(len(clients), size=per_round, replace=False)
    output = process.next(state, [clients[i] for i in chosen])
    state = output.state
    entry = {
        'round': t,
        'train_loss': float(output.metrics['client_work']['train']['loss']),
    }
    if eps is not None:
      report = ldp_fl.ldp_privacy_report(
          eps, num_values=num_values, rounds=t, num_clients=per_round,
          delta=_DELTA.value,
      )
      entry['cumulative_plain_composition_epsilon'] = report['cumulative'][
          'plain_composition_epsilon'
      ]
      entry['cumulative_rdp_epsilon'] = report['cumulative']['rdp_epsilon']
    history.append(entry)
  seconds = time.time() - start
  record = {
      'key': _key(mode, eps, run),
      'mode': mode,
      'epsilon': eps,
      'run': run,
      'radius': radius if eps is not None else None,
      'rounds': _ROUNDS.value,
      'clients_per_round': per_round,
      'num_values': num_values,
      'test_accuracy': _accuracy(task, process.get_model_weights(state)),
      'seconds': seconds,
      'history': history,
  }
  if eps is not None:
    record['privacy'] = ldp_fl.ldp_privacy_report(
        eps, num_values=num_values, rounds=_ROUNDS.value,
        num_clients=per_round, delta=_DELTA.value,
    )
  return record


def _column(eps):
  return 'noise-free' if eps is None else f'eps={eps:g}'


def _table(results, modes, epsilons):
  cols = [None] + epsilons if _NOISE_FREE.value else list(epsilons)
  lines = [
      '| setting | ' + ' | '.join(_column(e) for e in cols) + ' |',
      '|---' * (len(cols) + 1) + '|',
  ]
  paper = []
  for e in cols:
    v = PAPER_MNIST.get('none' if e is None else e)
    paper.append('-' if v is None else f'{v:.2f}')
  lines.append('| paper (MNIST, 60k, 10 runs) | ' + ' | '.join(paper) + ' |')
  for mode in modes:
    cells = []
    for e in cols:
      accs = [
          r['test_accuracy'] for r in results.values()
          if r['mode'] == mode and r['epsilon'] == e
      ]
      cells.append(f'{100 * np.mean(accs):.2f}' if accs else '-')
    lines.append(f'| measured, {mode} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def _plot(results, modes, epsilons, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, ax = plt.subplots(figsize=(6, 4))
  xs = [e for e in PAPER_MNIST if e != 'none']
  ax.plot(xs, [PAPER_MNIST[e] for e in xs], 'k--o', label='paper (MNIST)')
  ax.axhline(PAPER_MNIST['none'], color='k', ls=':', lw=1)
  for mode in modes:
    pts = []
    for e in epsilons:
      accs = [r['test_accuracy'] for r in results.values()
              if r['mode'] == mode and r['epsilon'] == e]
      if accs:
        pts.append((e, 100 * np.mean(accs)))
    if pts:
      line = ax.plot(*zip(*pts), '-o', label=f'measured, {mode}')[0]
      free = [r['test_accuracy'] for r in results.values()
              if r['mode'] == mode and r['epsilon'] is None]
      if free:
        ax.axhline(100 * np.mean(free), color=line.get_color(), ls=':', lw=1)
  ax.set_xscale('log')
  ax.set_xlabel('eps per value')
  ax.set_ylabel('test accuracy (%)')
  ax.set_title('LDP-FL Table 1 (dotted: noise-free)')
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def _privacy_lines(results, epsilons):
  lines = []
  for e in epsilons:
    r = next(
        (r for r in results.values() if r['epsilon'] == e and 'privacy' in r),
        None,
    )
    if r is None:
      continue
    p = r['privacy']
    one, cum = p['per_round'], p['cumulative']
    shuffle = (
        f"{cum['shuffle_epsilon']:.4g}" if cum.get('shuffle_applicable')
        else 'n/a (' + cum.get('shuffle_reason', '') + ')'
    )
    lines.append(
        f"eps={e:g} ({r['mode']}, d={r['num_values']}, T={cum['rounds']}, "
        f"delta={cum['delta']:g}): per value {one['paper_epsilon_per_value']:g}"
        f" (paper's claim); plain composition {one['plain_composition_epsilon']:.4g}"
        f" per round, {cum['plain_composition_epsilon']:.4g} cumulative (pure "
        f"DP, guarantee); RDP {cum['rdp_epsilon']:.4g} cumulative (guarantee); "
        f'shuffle {shuffle}'
    )
  return lines


def main(argv):
  del argv
  runtime.set_context()
  modes = list(_MODES.value)
  bad = sorted(set(modes) - set(ldp_fl.MODES))
  if bad:
    raise app.UsageError(f'--modes: unknown {bad}; choose from {ldp_fl.MODES}')
  epsilons = [float(e) for e in _EPSILONS.value]
  os.makedirs(_OUTPUT_DIR.value, exist_ok=True)
  path = os.path.join(_OUTPUT_DIR.value, 'results.jsonl')
  results = results_log.load(path)
  task, clients = _data()
  with tf.Graph().as_default():
    weights_type = tff.learning.models.weights_type_from_model(task.model_fn())
  num_values = sum(
      int(np.prod(t.shape)) for t in tff.structure.flatten(weights_type.trainable)
  )
  configs = [
      (mode, eps, run)
      for mode in modes
      for eps in ([None] if _NOISE_FREE.value else []) + epsilons
      for run in range(_RUNS.value)
  ]
  for mode, eps, run in configs:
    key = _key(mode, eps, run)
    if key in results:
      print(f'{key}: done already (accuracy {results[key]["test_accuracy"]:.4f})')
      continue
    record = _run_config(task, clients, mode, eps, run, num_values)
    results[key] = record
    results_log.append(path, record)
    print(
        f"{key}: accuracy {record['test_accuracy']:.4f} "
        f"({record['seconds']:.0f} s)", flush=True,
    )

  table = _table(results, modes, epsilons)
  privacy = _privacy_lines(results, epsilons)
  setting = (
      f'task {_TASK.value} ({_MODEL.value}), {_CLIENTS.value} IID clients, '
      f'{_ROUNDS.value} rounds, client lr {_LR.value:g}, batch {_BATCH.value}, '
      f'{_EPOCHS.value} local epoch(s), {_RUNS.value} run(s); radius '
      f'{_WEIGHTS_RADIUS.value:g} (weights), {_DELTAS_RADIUS.value:g} (deltas)'
  )
  with open(os.path.join(_OUTPUT_DIR.value, 'table.md'), 'w') as f:
    f.write(f'Setting: {setting}\n\n{table}\n\nPrivacy:\n\n')
    f.write(''.join(f'- {line}\n' for line in privacy))
  _plot(results, modes, epsilons,
        os.path.join(_OUTPUT_DIR.value, 'accuracy_vs_eps.png'))
  print(f'\nSetting: {setting}\n{table}\n')
  print('\n'.join(privacy))


if __name__ == '__main__':
  app.run(main)
