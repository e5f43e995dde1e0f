"""UDP and CRD (Wei et al., Sec. VI) as a grid of training runs.

For every target eps, clients per round K and calibration ('tight': the RDP
accountant; 'paper': eq. (10) / Theorem 4), `configs` gives fixed-T UDP runs
for every T of the grid (the U-shape of the test loss in T, Theorem 3; the
grid-optimal T is the best of them, and its compute is the sum of the grid's
rounds) and a CRD run (Algorithm 2) from T_0 with beta and zeta. `table`
and `plot` read the finished runs.
"""

import dataclasses
from typing import Mapping, Sequence

from tff_priv import validation
from tff_priv.accounting import target_noise
from tff_priv.program import runs
from tff_priv.program import training


@dataclasses.dataclass(frozen=True)
class Setting:
  """The grid (defaults: offline mnist5k, UDP's MLP, U = 50 x 80 digits).

  Attributes:
    task: an image classifier task with a synthetic split.
    model: its model (UDP's MLP 784-256-10).
    clients: U.
    samples_per_client: |D_i| (sets Delta = 2 eta C / |D_i|).
    epsilons: target eps values.
    delta: target delta.
    clients_per_round: K values (fixed-size sampling).
    calibrations: 'tight' and/or 'paper'.
    learning_rate: the client step eta.
    clip: the per-example gradient clip C.
    rounds_grid: the T values of fixed-T UDP.
    crd: also run CRD.
    initial_rounds: CRD's T_0.
    beta: CRD's discount factor.
    zeta: CRD's improvement threshold.
    seed: the data split and initial model; sampling_seed of every run.
  """

  task: str = 'mnist5k'
  model: str = 'mlp'
  clients: int = 50
  samples_per_client: int = 80
  epsilons: Sequence[float] = (4.0, 8.0, 16.0)
  delta: float = 1e-3
  clients_per_round: Sequence[int] = (50, 30)
  calibrations: Sequence[str] = ('tight', 'paper')
  learning_rate: float = 2.0
  clip: float = 1.0
  rounds_grid: Sequence[int] = (5, 10, 20, 40)
  crd: bool = True
  initial_rounds: int = 40
  beta: float = 0.9
  zeta: float = 0.001
  seed: int = 0

  def __post_init__(self):
    for calibration in self.calibrations:
      validation.one_of('calibration', calibration, target_noise.CALIBRATIONS)
    for rounds in tuple(self.rounds_grid) + (self.initial_rounds,):
      validation.int_at_least('rounds', rounds, 1)


def group_label(eps: float, k: int, calibration: str) -> str:
  """The label of a group of runs: its target eps, K and calibration."""
  return f'eps{eps:g}_K{k}_{calibration}'


def configs(setting: Setting) -> dict[str, training.RunConfig]:
  """The labelled runs: `<group>_T<T>` (fixed T) and `<group>_crd`.

  Every run holds out the first half of the test set as the server's
  validation data (CRD's trigger reads it) and is tested on the second half,
  so all runs are compared on the same examples.
  """
  common = dict(
      task=setting.task,
      task_options={
          'model': setting.model,
          'num_clients': setting.clients,
          'samples_per_client': setting.samples_per_client,
          'partition': 'iid',
      },
      batch_size=20,
      mechanism='udp',
      client_learning_rate=setting.learning_rate,
      holdout_validation=True,
      seed=setting.seed,
      sampling_seed=setting.seed,
  )
  out = {}
  for eps in setting.epsilons:
    for k in setting.clients_per_round:
      for calibration in setting.calibrations:
        group = group_label(eps, k, calibration)
        params = dict(
            epsilon=eps,
            delta=setting.delta,
            clip=setting.clip,
            udp_calibration=calibration,
        )
        for rounds in setting.rounds_grid:
          out[f'{group}_T{rounds}'] = training.RunConfig(
              params=params,
              clients_per_round=k,
              total_rounds=rounds,
              eval_every=rounds,
              **common,
          )
        if setting.crd:
          out[f'{group}_crd'] = training.RunConfig(
              params=dict(params, crd_beta=setting.beta, crd_zeta=setting.zeta),
              clients_per_round=k,
              total_rounds=setting.initial_rounds,
              eval_every=setting.initial_rounds,
              **common,
          )
  return out


def _cell(result: runs.RunResult) -> str:
  s = result.summary
  analyst, server = s['privacy']['guarantees'][:2]
  return (
      f"{s['final_test_metrics']['loss']:.3f}, {s['final_test_accuracy']:.3f}"
      f", {analyst['epsilon']:.2f}, {server['epsilon']:.2f}"
  )


def _groups(setting, results):
  for eps in setting.epsilons:
    for k in setting.clients_per_round:
      for calibration in setting.calibrations:
        group = group_label(eps, k, calibration)
        fixed = [
            (t, results[f'{group}_T{t}'])
            for t in sorted(setting.rounds_grid)
            if f'{group}_T{t}' in results
        ]
        yield (eps, k, calibration), fixed, results.get(f'{group}_crd')


def table(setting: Setting, results: Mapping[str, runs.RunResult]) -> str:
  """Markdown: test loss by T, the grid-optimal T, CRD, each with its eps."""
  lines = [
      '| eps | K | calibration | test loss by T | grid-optimal T (loss, acc, '
      'eps analyst, eps server) | grid compute (rounds) | CRD rounds (loss, '
      'acc, eps analyst, eps server) |',
      '|---|---|---|---|---|---|---|',
  ]
  for (eps, k, calibration), fixed, crd_run in _groups(setting, results):
    by_t = best = '-'
    if fixed:
      by_t = ', '.join(
          f"{t}: {r.summary['final_test_metrics']['loss']:.2f}"
          for t, r in fixed
      )
      t, r = min(
          fixed, key=lambda tr: tr[1].summary['final_test_metrics']['loss']
      )
      best = f'T={t} ({_cell(r)})'
    crd_cell = '-'
    if crd_run is not None:
      crd_cell = f"{crd_run.summary['rounds_run']} ({_cell(crd_run)})"
    lines.append(
        f'| {eps:g} | {k} | {calibration} | {by_t} | {best} | '
        f'{sum(t for t, _ in fixed)} | {crd_cell} |'
    )
  return '\n'.join(lines)


def plot(
    setting: Setting, results: Mapping[str, runs.RunResult], path: str
) -> None:
  """Test loss vs T per group (one panel per calibration), CRD as a star."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  calibrations = list(setting.calibrations)
  fig, axes = plt.subplots(
      1,
      len(calibrations),
      figsize=(5.5 * len(calibrations), 4),
      sharey=True,
      squeeze=False,
  )
  for (eps, k, calibration), fixed, crd_run in _groups(setting, results):
    ax = axes[0][calibrations.index(calibration)]
    if fixed:
      line = ax.plot(
          [t for t, _ in fixed],
          [r.summary['final_test_metrics']['loss'] for _, r in fixed],
          marker='o',
          label=f'eps {eps:g}, K {k}',
      )[0]
      if crd_run is not None:
        ax.scatter(
            [crd_run.summary['rounds_run']],
            [crd_run.summary['final_test_metrics']['loss']],
            marker='*',
            s=120,
            color=line.get_color(),
        )
  for ax, calibration in zip(axes[0], calibrations):
    ax.set_xscale('log')
    ax.set_xlabel('T (rounds); * = CRD (rounds it ran)')
    ax.set_title(f'{calibration} calibration')
    ax.legend(fontsize=7)
  axes[0][0].set_ylabel('test loss')
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
