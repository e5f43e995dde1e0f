"""Parameter distortion with data generation: utility loss (Zhang, Chen, Yang).

The paper bounds a client's utility loss L = E||W~ - W*||^2 - E||W - W*||^2,
where W* is the optimal parameter, W the one learned on the original data and
W~ the released one, learned with "data generation" (Bernoulli(rho)
mini-batches) and "parameter distortion" (N(0, sigma_e^2 I) on the upload).
`run_configs` gives the runs, `w_star` gives W* and `utility_loss` splits L
into its sampling and distortion parts.
"""

import dataclasses
import os
from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.program import grid
from tff_priv.program import layout
from tff_priv.program import runs
from tff_priv.program import training
import tff_priv_tasks as tasks
from tff_priv_tasks import models

NOISE_FREE = 'noise_free'
W_LABEL = f'rho1_{NOISE_FREE}'
REFERENCE = 'reference.npz'
TABLE = 'summary.md'
PLOT = 'utility_loss.png'
TASKS = ('mnist5k', 'digits')


@dataclasses.dataclass(frozen=True)
class Settings:
  """The experiment's settings (the script's flags, by the same names)."""

  task: str = 'mnist5k'
  num_clients: int = 10
  samples_per_client: int = 200
  test_examples: int = 1000
  local_steps: int = 5
  learning_rate: float = 0.1
  rounds: int = 20
  reference_steps: int = 20000
  rhos: Sequence[float] = (1.0, 0.5, 0.2, 0.05)
  target_tvs: Sequence[float] = (0.5, 0.9)
  epsilons: Sequence[float] = (8.0, 1000.0)
  clip: float = 1.0
  parameter_variance: float = 3.24e-6
  delta: float = 1e-5
  seeds: int = 3
  seed: int = 0

  def validate(self) -> 'Settings':
    """Checks every setting; rho = 1 (W's) is added first if missing.

    Raises:
      ValueError: naming the bad setting.
    """
    validation.one_of('task', self.task, TASKS)
    for name in (
        'num_clients',
        'samples_per_client',
        'test_examples',
        'local_steps',
        'rounds',
        'reference_steps',
        'seeds',
    ):
      validation.int_at_least(name, getattr(self, name), 1)
    validation.int_at_least('seed', self.seed, 0)
    for name in ('learning_rate', 'clip', 'parameter_variance'):
      validation.positive(name, getattr(self, name))
    validation.open_unit('delta', self.delta)
    rhos = [validation.half_open_unit('rhos', r) for r in self.rhos]
    tvs = [validation.open_unit('target_tvs', t) for t in self.target_tvs]
    epsilons = [validation.positive('epsilons', e) for e in self.epsilons]
    return dataclasses.replace(
        self,
        rhos=tuple(dict.fromkeys([1.0] + rhos)),
        target_tvs=tuple(dict.fromkeys(tvs)),
        epsilons=tuple(dict.fromkeys(epsilons)),
    )


def noise_levels(settings: Settings) -> dict[str, dict[str, Any]]:
  """Noise level name -> distortion's noise parameters."""
  levels = {NOISE_FREE: {'noise_stddev': 0.0}}
  for t in settings.target_tvs:
    levels[f'tv{t:g}'] = {
        'target_tv': t,
        'parameter_variance': settings.parameter_variance,
    }
  for e in settings.epsilons:
    levels[f'eps{e:g}'] = {
        'epsilon': e,
        'parameter_variance': settings.parameter_variance,
    }
  return levels


def label(rho: float, level: str, seed: int) -> str:
  """A run's label (its directory); W has no seed."""
  if rho == 1.0 and level == NOISE_FREE:
    return W_LABEL
  return f'rho{rho:g}_{level}_seed{seed}'


def run_configs(settings: Settings) -> dict[str, training.RunConfig]:
  """Label -> `RunConfig` of every run: W, then rho x noise level x seed.

  Every run is the training program (`tff_priv.program.training`) with
  mechanism 'distortion' on `task` (mnist5k or digits) with model 'softmax'
  (softmax regression with an L2 penalty of `tasks.models.SOFTMAX_L2`: a
  strongly convex objective, so W* is unique), the task's iid split into
  `num_clients` clients of `samples_per_client` examples (`seed` fixes the
  split, the initial model and the test subset: the same for every run), all
  clients in every round, `local_steps` SGD steps per round on Bernoulli(rho)
  batches, uploads clipped to L2 norm `clip`. The labels:

  * W: rho = 1, noise-free (full batches; deterministic, run once);
  * W_rho: rho < 1, noise-free, one run per seed;
  * W~: per rho, noise level ('tv<t>': sigma_e calibrated to TV <= t at the
    given `parameter_variance`; 'eps<e>': the sigma_e that makes the run
    (e, delta)-DP by the ledger, every client every round, no amplification)
    and seed. A seed is distortion's `batch_seed`: round t's batches of
    client i are seeded by (seed, t, i), so W_rho and W~ of a seed see the
    same batches; the noise is fresh in every run.
  """
  settings = settings.validate()
  configs = {}
  for rho in settings.rhos:
    for level, noise in noise_levels(settings).items():
      for seed in range(settings.seeds):
        params = dict(
            noise,
            clip=settings.clip,
            delta=settings.delta,
            rho=rho,
            local_steps=settings.local_steps,
            batch_seed=seed,
        )
        configs.setdefault(
            label(rho, level, seed),
            training.RunConfig(
                task=settings.task,
                task_options=dict(
                    model='softmax',
                    num_clients=settings.num_clients,
                    samples_per_client=settings.samples_per_client,
                ),
                num_epochs=1,  # The Bernoulli batches draw from one copy.
                mechanism='distortion',
                params=params,
                # Everyone, every round.
                clients_per_round=settings.num_clients,
                total_rounds=settings.rounds,
                client_learning_rate=settings.learning_rate,
                eval_every=settings.rounds,
                test_examples=settings.test_examples,
                seed=settings.seed,
                # Everyone is drawn every round: this seed reveals nothing;
                # fixed, the clients' order (and float sums) is the same in
                # every run.
                sampling_seed=0,
            ),
        )
  return configs


def training_data(settings: Settings) -> tuple[np.ndarray, np.ndarray]:
  """The union of the clients' examples, as the runs' task splits them."""
  task = tasks.get_task(
      settings.task,
      # One pass in large batches: the order does not matter here.
      train_client_spec=tff.simulation.baselines.ClientSpec(
          num_epochs=1, batch_size=1024
      ),
      seed=settings.seed,
      model='softmax',
      num_clients=settings.num_clients,
      samples_per_client=settings.samples_per_client,
  )
  train = task.datasets.train_data
  batches = [
      b
      for c in train.client_ids
      for b in task.datasets.train_preprocess_fn(
          train.create_tf_dataset_for_client(c)
      ).as_numpy_iterator()
  ]
  x, y = (np.concatenate(parts) for parts in zip(*batches))
  return x, y


def reference(
    model: tf.keras.Model,
    x: np.ndarray,
    y: np.ndarray,
    steps: int,
    learning_rate: float,
) -> tuple[np.ndarray, float, float]:
  """W*: full-batch gradient descent on mean cross-entropy + `model.losses`.

  Args:
    model: a Keras classifier holding the starting weights (changed here).
    x: inputs of all the examples.
    y: their integer labels.
    steps: gradient steps.
    learning_rate: the step size.

  Returns:
    (flat W*, gradient norm at W*, objective at W*).
  """
  x, y = tf.constant(x), tf.constant(y)
  loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
  variables = model.trainable_variables

  @tf.function
  def step(apply):
    with tf.GradientTape() as tape:
      objective = loss_fn(y, model(x)) + tf.add_n([0.0] + model.losses)
    grads = tape.gradient(objective, variables)
    if apply:
      for v, g in zip(variables, grads):
        v.assign_sub(learning_rate * g)
    return objective, tf.linalg.global_norm(grads)

  for _ in range(steps):
    step(True)
  objective, norm = step(False)
  return flat([v.numpy() for v in variables]), float(norm), float(objective)


def flat(weights: Sequence[np.ndarray]) -> np.ndarray:
  """The weights as one float64 vector."""
  return np.concatenate([np.asarray(w, np.float64).ravel() for w in weights])


def mean_se(values) -> tuple[float, float]:
  """Mean and its standard error (0 for one value)."""
  values = np.asarray(values, np.float64)
  se = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else 0.0
  return float(values.mean()), float(se)


def utility_loss(
    w_star: np.ndarray,
    w: np.ndarray,
    sampled: Mapping[int, np.ndarray],
    distorted: Mapping[int, np.ndarray],
) -> dict[str, Any]:
  """The split of L over the seeds both runs have.

  With W_rho the run that samples but does not distort, on the same batches
  as W~ (common random numbers), L splits exactly:

      L = [E||W_rho - W*||^2 - ||W - W*||^2]      sampling part
        + [E||W~ - W*||^2 - E||W_rho - W*||^2]    distortion part.

  Args:
    w_star: W*.
    w: W.
    sampled: seed -> W_rho (at rho = 1: W).
    distorted: seed -> W~ (the same batch seeds).

  Returns:
    {'sampling', 'distortion', 'total'}: (mean, standard error) over seeds,
    the distortion part from paired differences; 'sq_distance': the mean
    ||W~ - W*||^2; 'seeds': how many.
  """
  seeds = sorted(set(sampled) & set(distorted))
  if not seeds:
    raise ValueError('no seed has both a sampled and a distorted run')
  d = lambda v: float(np.sum((v - w_star) ** 2))
  base = d(w)
  d_sampled = np.array([d(sampled[s]) for s in seeds])
  d_distorted = np.array([d(distorted[s]) for s in seeds])
  return {
      'sampling': mean_se(d_sampled - base),
      'distortion': mean_se(d_distorted - d_sampled),
      'total': mean_se(d_distorted - base),
      'sq_distance': float(d_distorted.mean()),
      'seeds': len(seeds),
  }


def w_star(results: Mapping[str, runs.RunResult], settings: Settings, root_dir):
  """(W*, gradient norm, objective), from the runs' initial model; cached.

  W* is not a run of a mechanism but a reference optimisation (`reference`):
  `reference_steps` noise-free full-batch gradient steps on the federated
  objective from the runs' initial model (equal client sizes: the mean loss
  over the union of the clients' data plus the penalty), computed centrally.

  Raises:
    ValueError: the runs did not all start from the same model.
  """
  initial = flat(results[W_LABEL].model(layout.INITIAL_MODEL))
  for name, result in results.items():
    if not np.array_equal(flat(result.model(layout.INITIAL_MODEL)), initial):
      raise ValueError(f'run {name} started from another initial model')
  path = os.path.join(root_dir, REFERENCE)
  key = repr(
      (
          settings.task,
          settings.num_clients,
          settings.samples_per_client,
          settings.seed,
          settings.reference_steps,
          settings.learning_rate,
      )
  )
  if os.path.exists(path):
    with np.load(path) as saved:
      if str(saved['key']) == key and np.array_equal(saved['initial'], initial):
        return (
            saved['w_star'],
            float(saved['grad_norm']),
            float(saved['objective']),
        )
  x, y = training_data(settings)
  model = models.softmax_regression(x.shape[1:], 10)
  model.set_weights(results[W_LABEL].model(layout.INITIAL_MODEL))
  found = reference(
      model, x, y, settings.reference_steps, settings.learning_rate
  )
  np.savez(
      path,
      key=key,
      initial=initial,
      w_star=found[0],
      grad_norm=found[1],
      objective=found[2],
  )
  return found


def table(results, settings: Settings, reference_point) -> list[dict[str, Any]]:
  """One row per (rho, noise level): the split of L, sigma_e, TV, eps, acc."""
  settings = settings.validate()
  star, _, _ = reference_point
  model = lambda name: flat(results[name].model())
  w = model(W_LABEL)
  rows = []
  for rho in settings.rhos:
    sampled = {
        s: w if rho == 1.0 else model(label(rho, NOISE_FREE, s))
        for s in range(settings.seeds)
    }
    for level in noise_levels(settings):
      names = {s: label(rho, level, s) for s in range(settings.seeds)}
      if rho == 1.0 and level == NOISE_FREE:
        names = {0: W_LABEL}
      split = utility_loss(
          star, w, sampled, {s: model(n) for s, n in names.items()}
      )
      summaries = [results[n].summary for n in names.values()]
      resolved = summaries[0]['parameters']['resolved']
      rows.append(
          dict(
              rho=rho,
              level=level,
              noise_stddev=resolved['noise_stddev'],
              tv_lower=resolved['tv_lower'],
              tv_upper=resolved['tv_upper'],
              epsilon=float(summaries[0]['privacy']['rdp_epsilon']),
              test_accuracy=float(
                  np.mean([s['final_test_accuracy'] for s in summaries])
              ),
              **split,
          )
      )
  return rows


def markdown(rows, results, reference_point) -> str:
  """The table of `table`'s rows, with W and W* above it."""
  _, grad_norm, objective = reference_point
  w = rows[0]
  pm = lambda p: f'{p[0]:+.3g} ± {p[1]:.2g}'
  lines = [
      f'W = noise-free full-batch run: ||W - W*||^2 = {w["sq_distance"]:.4g}, '
      f'test acc {results[W_LABEL].summary["final_test_accuracy"]:.3f}. W*: '
      f'objective {objective:.5f}, gradient norm {grad_norm:.2e} (how far '
      'from the optimum it stopped).',
      '',
      '| rho | noise | sigma_e | TV bounds (DMR, rebuilt) | eps at delta '
      '(ledger) | E\\|\\|W~ - W*\\|\\|^2 | sampling part | distortion part | '
      'utility loss L | test acc | seeds |',
      '|---|---|---|---|---|---|---|---|---|---|---|',
  ]
  for r in rows:
    eps = f'{r["epsilon"]:.3g}' if np.isfinite(r['epsilon']) else 'inf'
    lines.append(
        f'| {r["rho"]:g} | {r["level"]} | {r["noise_stddev"]:.3g} | '
        f'[{r["tv_lower"]:.2g}, {r["tv_upper"]:.2g}] | {eps} | '
        f'{r["sq_distance"]:.4g} | {pm(r["sampling"])} | '
        f'{pm(r["distortion"])} | {pm(r["total"])} | '
        f'{r["test_accuracy"]:.3f} | {r["seeds"]} |'
    )
  lines += [
      '',
      '± = one standard error over seeds (the distortion part from '
      'paired differences: the same batch seeds with and without '
      "distortion). eps: the analyst's RDP eps at delta from each "
      "run's summary (every client every round: no amplification).",
  ]
  return '\n'.join(lines) + '\n'


def plot(rows, path: str) -> None:
  """L against rho, one line per noise level (the runs of one level)."""
  # pylint: disable=g-import-not-at-top
  import matplotlib

  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  # pylint: enable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(6.5, 4))
  for level in dict.fromkeys(r['level'] for r in rows):
    points = sorted((r['rho'], r['total']) for r in rows if r['level'] == level)
    ax.errorbar(
        [p[0] for p in points],
        [p[1][0] for p in points],
        yerr=[p[1][1] for p in points],
        marker='o',
        capsize=3,
        label=level,
    )
  ax.axhline(0.0, color='grey', lw=0.8)
  ax.set_xscale('log')
  ax.set_yscale('symlog', linthresh=1e-3)  # L spans ~1e-3 (or < 0) to ~1e6.
  ax.set_xlabel('rho (Bernoulli mini-batch rate)')
  ax.set_ylabel('utility loss E||W~-W*||^2 - ||W-W*||^2')
  ax.set_title('Distortion + data generation: measured utility loss')
  ax.legend(title='noise', fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def run(settings: Settings, root_dir: str, progress: bool = False):
  """Runs (or resumes) the grid, then writes W*, the table and the plot.

  Args:
    settings: the experiment's settings.
    root_dir: where the run directories and the outputs go.
    progress: each run's per-round progress.

  Returns:
    {'runs', 'reference', 'table', 'plot'}: where they are.
  """
  settings = settings.validate()
  results = grid.run(run_configs(settings), root_dir, progress=progress)
  reference_point = w_star(results, settings, root_dir)
  rows = table(results, settings, reference_point)
  text = markdown(rows, results, reference_point)
  with open(os.path.join(root_dir, TABLE), 'w') as f:
    f.write(text)
  print(text)
  plot(rows, os.path.join(root_dir, PLOT))
  return {
      'runs': root_dir,
      'reference': os.path.join(root_dir, REFERENCE),
      'table': os.path.join(root_dir, TABLE),
      'plot': os.path.join(root_dir, PLOT),
  }
