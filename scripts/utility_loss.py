r"""Utility loss of parameter distortion with data generation, measured.

Zhang, Chen, Yang ("near-optimal utility" paper) bound a client's utility loss

    L = E||W~ - W*||^2 - E||W - W*||^2

where W* is the optimal parameter, W the parameter learned on the original
data and W~ the released one, learned with "data generation" (Bernoulli(rho)
mini-batches) and "parameter distortion" (N(0, sigma_e^2 I) on the upload).
Their claim is that the sampling term can be negative (variance reduction) and
offset the distortion term. This script measures both. With W_rho the run that
samples but does not distort (same mini-batch seeds as W~: common random
numbers), L splits exactly:

    L = [E||W_rho - W*||^2 - E||W - W*||^2]      sampling part
      + [E||W~ - W*||^2 - E||W_rho - W*||^2]     distortion part.

Definitions used here (the paper has no experiments; these are our choices):

* Every run is FedAvg (`tff.learning.algorithms.build_unweighted_fed_avg`
  through `tff_priv.program.mechanisms.build('distortion', ...)`, i.e.
  `DistortionFactory` with the upload clipped to L2 norm --clip) over all U
  clients every round, --local_steps SGD steps per client per round, from one
  fixed initialisation.
* W* = the endpoint of a long (--reference_steps) noise-free full-batch
  gradient descent on the federated objective, from the same initialisation.
  With the default model (softmax regression with an L2 penalty: a strongly
  convex objective) W* is the unique optimum; the script reports the gradient
  norm where it stopped, so a W* that has not converged shows.
* W = the noise-free full-batch run of --rounds rounds (rho = 1: every example
  in every step; deterministic).
* W_rho: the same with each local step on a Bernoulli(rho) mini-batch
  (`tff_priv.mechanisms.bernoulli_sampling`), the same number of steps.
* W~: W_rho plus distortion, at each noise level: 'tv<t>' calibrates sigma_e
  to total variation <= t at the given --parameter_variance (the library
  takes it given: estimating it from the clients would release an exact
  client statistic); 'eps<e>' takes the sigma_e that makes each clipped
  upload an (e, --delta)-DP Gaussian mechanism over the run (the ledger's
  calibration), with the TV bounds computed at --parameter_variance.

For every run each round is charged to a `PrivacyLedger` from the factory's
DpEvent, a Gaussian mechanism on a clipped upload (sensitivity 2C, every
client in every round, no amplification): the DP reading of the same noise, so TV-calibrated
and DP-calibrated distortion sit on one axis. Expectations are means over
--seeds seeds; the standard errors are over seeds (paired differences for the
distortion part).

Results go to --output_dir: reference.npz (W* and the initialisation), results.jsonl (one line per
run, appended as it ends: an interrupted sweep resumes), summary.md (tables)
and utility_loss.png.

    .venv/bin/python scripts/utility_loss.py --output_dir=results/utility_loss
"""

import os
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tasks import offline_images
from tff_priv import cli
from tff_priv import runtime
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.mechanisms import bernoulli_sampling
from tff_priv.program import mechanisms
from tff_priv.program import sampling as sampling_lib
from tff_priv.program import results_log

_TASKS = ('mnist5k', 'digits')
_MODELS = ('softmax', 'mlp')

_TASK = flags.DEFINE_enum('task', 'mnist5k', _TASKS, 'Offline task.')
_MODEL = flags.DEFINE_enum(
    'model', 'softmax', _MODELS,
    'softmax: softmax regression with an L2 penalty (unique W*); mlp: one '
    'hidden layer of 256 (W* = the reference run from the same init).',
)
_L2 = flags.DEFINE_float('l2', 0.01, 'L2 penalty of the softmax model.')
_CLIENTS = flags.DEFINE_integer('clients', 10, 'U clients, all in every round.')
_SAMPLES = flags.DEFINE_integer('samples_per_client', 200, '|D_i|.')
_TEST_EXAMPLES = flags.DEFINE_integer('test_examples', 1000, 'Held-out examples.')
_LOCAL_STEPS = flags.DEFINE_integer('local_steps', 5, 'SGD steps per round.')
_LEARNING_RATE = flags.DEFINE_float('learning_rate', 0.1, 'Client SGD rate.')
_ROUNDS = flags.DEFINE_integer('rounds', 20, 'T of W, W_rho and W~.')
_REFERENCE_STEPS = flags.DEFINE_integer(
    'reference_steps', 20000,
    'Full-batch gradient steps of the noise-free run that gives W*.',
)
_RHOS = flags.DEFINE_list('rhos', ['1.0', '0.5', '0.2', '0.05'], 'rho values.')
_TARGET_TVS = flags.DEFINE_list('target_tvs', ['0.5', '0.9'], 'TV targets.')
_EPSILONS = flags.DEFINE_list('epsilons', ['8', '1000'], 'DP-calibrated levels.')
_CLIP = flags.DEFINE_float('clip', 1.0, 'L2 clip C of each upload.')
_PARAMETER_VARIANCE = flags.DEFINE_float(
    'parameter_variance', 3.24e-6,
    'sigma^2 per coordinate for the TV calibration and bounds (default: the '
    'across-client variance measured in the noise-free mnist5k run with the '
    'default flags, 3.2402e-6: a statistic of the same data, fine for this '
    'utility study, not for a private release).')
_DELTA = flags.DEFINE_float('delta', 1e-5, 'delta of the DP reading.')
_SEEDS = flags.DEFINE_integer('seeds', 3, 'Seeds per (rho, noise level).')
_SPLIT_SEED = flags.DEFINE_integer('split_seed', 0, 'Seed of the data split.')
_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', 'results/utility_loss', 'Output folder.'
)

_NOISE_FREE = 'none'


def _float_list(name, values, low, high, low_open):
  out = []
  for text in values:
    try:
      v = float(text)
    except ValueError:
      raise ValueError(f'--{name}: not a number: {text!r}') from None
    if not (low < v if low_open else low <= v) or not v <= high:
      interval = f'{"(" if low_open else "["}{low:g}, {high:g}]'
      raise ValueError(f'--{name}: {v:g} is outside {interval}')
    out.append(v)
  return out


def _check_flags():
  """Validates the flags; returns (rhos, target_tvs, epsilons)."""
  for name, flag in (
      ('clients', _CLIENTS), ('samples_per_client', _SAMPLES),
      ('test_examples', _TEST_EXAMPLES), ('local_steps', _LOCAL_STEPS),
      ('rounds', _ROUNDS), ('reference_steps', _REFERENCE_STEPS),
      ('seeds', _SEEDS),
  ):
    if flag.value < 1:
      raise ValueError(f'--{name} must be >= 1, got {flag.value}')
  for name, flag in (
      ('learning_rate', _LEARNING_RATE), ('clip', _CLIP), ('l2', _L2)
  ):
    if not flag.value > 0:
      raise ValueError(f'--{name} must be > 0, got {flag.value}')
  if not 0 < _DELTA.value < 1:
    raise ValueError(f'--delta must be in (0, 1), got {_DELTA.value}')
  rhos = _float_list('rhos', _RHOS.value, 0.0, 1.0, True)
  if 1.0 not in rhos:
    rhos = [1.0] + rhos  # W (rho = 1, noise-free) is the baseline of L.
  tvs = _float_list('target_tvs', _TARGET_TVS.value, 0.0, 1.0, True)
  if 1.0 in tvs:
    raise ValueError('--target_tvs must be < 1')
  epsilons = _float_list('epsilons', _EPSILONS.value, 0.0, float('inf'), True)
  return rhos, tvs, epsilons


def _data():
  """(client arrays, test arrays, input shape)."""
  if _TASK.value == 'mnist5k':
    images, labels = offline_images.load_mnist5k()
  else:
    images, labels = offline_images.load_digits()
  need = _CLIENTS.value * _SAMPLES.value + _TEST_EXAMPLES.value
  if need > len(labels):
    raise ValueError(
        f'--clients x --samples_per_client + --test_examples = {need} exceeds '
        f'the {len(labels)} examples of {_TASK.value}'
    )
  order = np.random.default_rng(_SPLIT_SEED.value).permutation(len(labels))
  n = _SAMPLES.value
  clients = [
      (images[order[i * n:(i + 1) * n]], labels[order[i * n:(i + 1) * n]])
      for i in range(_CLIENTS.value)
  ]
  test = order[len(labels) - _TEST_EXAMPLES.value:]
  return clients, (images[test], labels[test]), images.shape[1:]


def _keras_model(input_shape):
  if _MODEL.value == 'softmax':
    layers = [
        tf.keras.layers.Dense(
            10,
            activation='softmax',
            kernel_regularizer=tf.keras.regularizers.l2(_L2.value),
        )
    ]
  else:
    layers = [
        tf.keras.layers.Dense(256, activation='relu'),
        tf.keras.layers.Dense(10, activation='softmax'),
    ]
  return tf.keras.Sequential(
      [tf.keras.layers.InputLayer(input_shape=input_shape),
       tf.keras.layers.Flatten()] + layers
  )


def _model_fn(input_shape):
  spec = (
      tf.TensorSpec([None, *input_shape], tf.float32),
      tf.TensorSpec([None], tf.int32),
  )

  def model_fn():
    # from_keras_model adds the Keras regularisation losses to the loss.
    return tff.learning.models.from_keras_model(
        _keras_model(input_shape),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        input_spec=spec,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
    )

  return model_fn


class _Experiment:
  """Builds each noise level's process once and runs it."""

  def __init__(self, clients, test, input_shape, noise_free):
    self.clients = [
        tf.data.Dataset.from_tensor_slices((x, y)) for x, y in clients
    ]
    self.test = test
    self.input_shape = input_shape
    self.model_fn = _model_fn(input_shape)
    self.sampling = sampling_lib.ClientSampling(
        'fixed', _CLIENTS.value, _CLIENTS.value  # Everyone, always.
    )
    self._built = {}
    self.init_weights = None
    self._full_batches = None
    self._noise_free = noise_free

  def mechanism(self, level, params):
    if level not in self._built:
      self._built[level] = mechanisms.build(
          'distortion',
          params,
          model_fn=self.model_fn,
          sampling=self.sampling,
          total_rounds=_ROUNDS.value,
          client_optimizer_fn=tff.learning.optimizers.build_sgdm(
              _LEARNING_RATE.value
          ),
          server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
          client_learning_rate=_LEARNING_RATE.value,
      )
    return self._built[level]

  def _round_data(self, rho, seed, round_num):
    if rho == 1.0:
      # Full batches: the same every round, whatever the seed; build once.
      if self._full_batches is None:
        full = bernoulli_sampling.bernoulli_batches(
            1.0, num_batches=_LOCAL_STEPS.value, seed=0
        )
        self._full_batches = [full(d) for d in self.clients]
      return self._full_batches
    out = []
    for i, dataset in enumerate(self.clients):
      batches = bernoulli_sampling.bernoulli_batches(
          rho,
          num_batches=_LOCAL_STEPS.value,
          # Distinct, reproducible batches per (seed, round, client).
          seed=int(np.random.default_rng([seed, round_num, i]).integers(2**31)),
      )
      out.append(batches(dataset))
    return out

  def initialize(self):
    """Draws the initial weights every run starts from."""
    if self.init_weights is None:
      mech = self.mechanism(_NOISE_FREE, self._noise_free)
      self.init_weights = mech.process.get_model_weights(
          mech.process.initialize()
      )

  def train(self, mech, rho, seed, rounds):
    """Returns (flat weights, per-round measurements, ledger, weights)."""
    process = mech.process
    state = process.initialize()
    state = process.set_model_weights(state, self.init_weights)
    ledger = ledger_lib.PrivacyLedger()
    history = []
    for t in range(1, rounds + 1):
      output = process.next(state, self._round_data(rho, seed, t))
      state = output.state
      ledger.record_round(state.aggregator)  # Every client, every round.
      noise = output.metrics['aggregator']['noise']
      history.append(dict(
          noise_stddev=float(noise['noise_stddev']),
          tv_upper=float(noise['tv_upper']),
          tv_lower=float(noise['tv_lower']),
      ))
    weights = process.get_model_weights(state)
    return _flat(weights), history, ledger, weights

  def evaluate(self, weights):
    keras_model = _keras_model(self.input_shape)
    weights.assign_weights_to(keras_model)
    probs = keras_model(self.test[0], training=False).numpy()
    return float(np.mean(np.argmax(probs, 1) == self.test[1]))


def _reference(clients, input_shape, init_weights, steps):
  """W*: noise-free full-batch gradient descent on the federated objective.

  With equal client sizes, FedAvg's objective (1/U) sum_i [mean loss on D_i +
  penalty] is the mean loss over the union of the data plus the penalty, so
  W* is computed centrally, from the runs' initialisation, with the clients'
  learning rate. (Centrally because it is the same objective and thousands of
  TFF rounds would cost hours here; FedAvg with several local steps can stop
  short of this optimum -- client drift -- and that gap is part of
  ||W - W*||^2.)

  Returns:
    (flat W*, final gradient norm, final objective).
  """
  model = _keras_model(input_shape)
  init_weights.assign_weights_to(model)
  x = tf.constant(np.concatenate([c[0] for c in clients]))
  y = tf.constant(np.concatenate([c[1] for c in clients]))
  loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
  variables = model.trainable_variables

  @tf.function
  def step(apply):
    with tf.GradientTape() as tape:
      objective = loss_fn(y, model(x)) + tf.add_n([0.0] + model.losses)
    grads = tape.gradient(objective, variables)
    if apply:
      for v, g in zip(variables, grads):
        v.assign_sub(_LEARNING_RATE.value * g)
    return objective, tf.linalg.global_norm(grads)

  for i in range(steps):
    objective, norm = step(True)
    if (i + 1) % max(1, steps // 10) == 0:
      print(f'  W* step {i + 1}/{steps}: objective {float(objective):.5f}, '
            f'gradient norm {float(norm):.2e}', flush=True)
  objective, norm = step(False)
  w_star = np.concatenate(
      [np.asarray(v.numpy(), np.float64).ravel() for v in variables]
  )
  return w_star, float(norm), float(objective)


def _flat(weights):
  return np.concatenate(
      [np.asarray(w, np.float64).ravel() for w in weights.trainable]
  )


def main(argv):
  cli_ = cli.Cli('utility_loss.py')
  if len(argv) > 1:
    cli_.fail(f'unexpected arguments: {" ".join(argv[1:])}')
  try:
    rhos, tvs, epsilons = _check_flags()
    clients, test, input_shape = _data()
  except ValueError as e:
    cli_.fail(str(e))
  runtime.set_context()
  out_dir = _OUTPUT_DIR.value
  os.makedirs(out_dir, exist_ok=True)
  results_path = os.path.join(out_dir, 'results.jsonl')
  done = results_log.load(results_path)
  clip = _CLIP.value
  noise_free = mechanisms.MechanismParams(noise_stddev=0.0, clip=clip)
  exp = _Experiment(clients, test, input_shape, noise_free)

  # W*: the long noise-free full-batch run (centralised: see _reference).
  reference_path = os.path.join(out_dir, 'reference.npz')
  if os.path.exists(reference_path):
    ref = np.load(reference_path)
    exp.init_weights = tff.learning.models.ModelWeights(
        trainable=[ref[f'init_{i}'] for i in range(int(ref['num_init']))],
        non_trainable=[],
    )
  else:
    start = time.time()
    exp.initialize()
    w_star, grad_norm, objective = _reference(
        clients, input_shape, exp.init_weights, _REFERENCE_STEPS.value
    )
    # Every later run (and a resumed sweep) starts from the same init.
    init = {f'init_{i}': np.asarray(w)
            for i, w in enumerate(exp.init_weights.trainable)}
    np.savez(reference_path, w_star=w_star, grad_norm=grad_norm,
             objective=objective, num_init=len(init), **init)
    print(f'W*: {_REFERENCE_STEPS.value} full-batch steps in '
          f'{time.time() - start:.0f}s; objective {objective:.5f}, gradient '
          f'norm {grad_norm:.2e}', flush=True)
    ref = np.load(reference_path)
  w_star = ref['w_star']
  reference = dict(grad_norm=float(ref['grad_norm']),
                   objective=float(ref['objective']))

  def run(level, params, rho, seed):
    key = f'{level}/rho={rho:g}/seed={seed}'
    if key in done:
      return done[key]
    start = time.time()
    w, history, ledger, weights = exp.train(
        exp.mechanism(level, params), rho, seed, _ROUNDS.value
    )
    record = dict(
        key=key, level=level, rho=rho, seed=seed, rounds=_ROUNDS.value,
        sq_distance=float(np.sum((w - w_star) ** 2)),
        test_accuracy=exp.evaluate(weights),
        noise_stddev=float(np.mean([h['noise_stddev'] for h in history])),
        tv_upper=float(np.mean([h['tv_upper'] for h in history])),
        tv_lower=float(np.mean([h['tv_lower'] for h in history])),
        parameter_variance=_PARAMETER_VARIANCE.value,
        rdp_epsilon=ledger.epsilon(_DELTA.value),
        delta=_DELTA.value,
        seconds=time.time() - start,
    )
    results_log.append(results_path, record)
    done[key] = record
    print(f'{key:28s} ||W-W*||^2 {record["sq_distance"]:.4g}  acc '
          f'{record["test_accuracy"]:.3f}  sigma_e {record["noise_stddev"]:.3g}'
          f'  eps {record["rdp_epsilon"]:.3g}  {record["seconds"]:.0f}s',
          flush=True)
    return record

  # W (deterministic: rho = 1, noise-free).
  baseline = run(_NOISE_FREE, noise_free, 1.0, 0)
  levels = [(_NOISE_FREE, noise_free)]
  levels += [
      (f'tv{t:g}', mechanisms.MechanismParams(
          target_tv=t, clip=clip,
          parameter_variance=_PARAMETER_VARIANCE.value))
      for t in tvs
  ]
  levels += [
      (f'eps{e:g}', mechanisms.MechanismParams(
          epsilon=e, delta=_DELTA.value, clip=clip,
          parameter_variance=_PARAMETER_VARIANCE.value))
      for e in epsilons
  ]
  for rho in rhos:
    for seed in range(_SEEDS.value):
      for level, params in levels:
        if rho == 1.0 and level == _NOISE_FREE:
          continue  # W itself, deterministic: run once above.
        run(level, params, rho, seed)
  _summarise(done, baseline, reference, rhos, [l for l, _ in levels], out_dir)


def _mean_se(values):
  values = np.asarray(values, np.float64)
  se = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else 0.0
  return float(values.mean()), float(se)


def _summarise(records, baseline, reference, rhos, levels, out_dir):
  # pylint: disable=g-import-not-at-top
  import matplotlib

  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  # pylint: enable=g-import-not-at-top

  base = baseline['sq_distance']

  def runs(level, rho):
    if level == _NOISE_FREE and rho == 1.0:
      return {0: baseline}
    return {
        r['seed']: r for r in records.values()
        if r['level'] == level and r['rho'] == rho
    }

  lines = [
      f'W = noise-free full-batch run: ||W - W*||^2 = {base:.4g}, test acc '
      f'{baseline["test_accuracy"]:.3f}. W*: objective '
      f'{reference["objective"]:.5f}, gradient norm '
      f'{reference["grad_norm"]:.2e} (how far from the optimum it stopped).',
      '',
      '| rho | noise | sigma_e (mean) | TV bounds (DMR, rebuilt) | eps at delta '
      '(DP reading) | E||W~ - W*||^2 | sampling part | distortion part | '
      'utility loss L | test acc | seeds |',
      '|---|---|---|---|---|---|---|---|---|---|---|',
  ]
  curves = {}
  for rho in rhos:
    sampled = runs(_NOISE_FREE, rho)
    for level in levels:
      distorted = runs(level, rho)
      seeds = sorted(set(distorted) if rho == 1.0 else set(sampled) & set(distorted))
      if not seeds:
        continue
      # At rho = 1, W_rho = W (deterministic).
      d_sampled = [
          base if rho == 1.0 else sampled[s]['sq_distance'] for s in seeds
      ]
      d_distorted = [distorted[s]['sq_distance'] for s in seeds]
      sampling_part = _mean_se(np.asarray(d_sampled) - base)
      distortion_part = _mean_se(np.asarray(d_distorted) - np.asarray(d_sampled))
      total = _mean_se(np.asarray(d_distorted) - base)
      ex = distorted[seeds[0]]
      sig = float(np.mean([distorted[s]['noise_stddev'] for s in seeds]))
      acc = float(np.mean([distorted[s]['test_accuracy'] for s in seeds]))
      eps = ex['rdp_epsilon']
      eps_text = 'inf' if not np.isfinite(eps) else f'{eps:.3g}'
      tv_text = f'[{ex["tv_lower"]:.2g}, {ex["tv_upper"]:.2g}]'
      lines.append(
          f'| {rho:g} | {level} | {sig:.3g} | {tv_text} | {eps_text} | '
          f'{np.mean(d_distorted):.4g} | {sampling_part[0]:+.3g} '
          f'± {sampling_part[1]:.2g} | {distortion_part[0]:+.3g} ± '
          f'{distortion_part[1]:.2g} | {total[0]:+.3g} ± {total[1]:.2g} | '
          f'{acc:.3f} | {len(seeds)} |'
      )
      curves.setdefault(level, []).append((rho, total, sampling_part))
  lines.append('')
  lines.append(
      '± = one standard error over seeds (the distortion part from paired '
      'differences: the same mini-batch seeds with and without distortion). '
      'eps: RDP eps at the stated delta of each clipped upload read as a '
      'Gaussian mechanism (sensitivity 2C, every round, no amplification).'
  )
  text = '\n'.join(lines) + '\n'
  with open(os.path.join(out_dir, 'summary.md'), 'w') as f:
    f.write(text)
  print(text)

  fig, ax = plt.subplots(figsize=(6.5, 4))
  for level, points in curves.items():
    points.sort()
    x = [p[0] for p in points]
    y = [p[1][0] for p in points]
    e = [p[1][1] for p in points]
    ax.errorbar(x, y, yerr=e, marker='o', capsize=3, label=level)
  ax.axhline(0.0, color='grey', lw=0.8)
  ax.set_xscale('log')
  # Losses span from ~1e-3 (negative too) to ~1e6: linear within 1e-3.
  ax.set_yscale('symlog', linthresh=1e-3)
  ax.set_xlabel('rho (Bernoulli mini-batch rate)')
  ax.set_ylabel('utility loss E||W~-W*||^2 - ||W-W*||^2')
  ax.set_title('Distortion + data generation: measured utility loss')
  ax.legend(title='noise', fontsize=8)
  fig.tight_layout()
  fig.savefig(os.path.join(out_dir, 'utility_loss.png'), dpi=120)


if __name__ == '__main__':
  app.run(main)
