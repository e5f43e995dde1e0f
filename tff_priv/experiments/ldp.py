"""LDP-FL Table 1 (Sun, Qian, Chen, IJCAI 2021) as a grid of training runs.

`configs(setting)` gives one `RunConfig` per (mode, eps0, run) of mechanism
'ldp' (`ldp_mode` 'weights': the paper's Algorithm 1, the server's model is
the mean of the encoded local weights; 'deltas': FedAvg on encoded deltas)
and, for the noise-free column, mechanism 'none' (FedAvg: with server
learning rate 1 and equal client sizes both modes' noise-free process is the
mean of the local models). `table`, `privacy_lines` and `plot` read the
finished runs (`tff_priv.program.runs.RunResult`).
"""

import collections
import dataclasses
from typing import Mapping, Optional, Sequence

import numpy as np

from tff_priv import validation
from tff_priv.learning import ldp as ldp_learning
from tff_priv.program import runs
from tff_priv.program import training

# LDP-FL Table 1, MNIST row (accuracy %): noise-free, then eps0.
PAPER_MNIST = collections.OrderedDict(
    [
        (None, 97.26),
        (0.1, 13.84),
        (0.5, 95.36),
        (1.0, 96.24),
        (5.0, 96.34),
        (10.0, 96.39),
    ]
)


@dataclasses.dataclass(frozen=True)
class Setting:
  """The grid (defaults: the paper's MNIST setting on offline mnist5k).

  Attributes:
    task: a task of `tasks` (an image classifier).
    model: its model.
    clients: IID clients of the split.
    clients_per_round: K (None: every client every round).
    rounds: T.
    client_learning_rate: the clients' SGD rate (the paper: 0.03).
    batch_size: client batch size.
    local_epochs: local epochs per round.
    epsilons: eps0 of every reported value, one column each.
    noise_free: also the noise-free column.
    modes: 'weights' and/or 'deltas'.
    weights_radius: the range radius r in weights mode (center 0).
    deltas_radius: the range radius r in deltas mode (center 0).
    runs: runs per cell (the paper: 10); run r samples with seed r.
    delta: the delta of the accountants' eps.
    seed: the data split and the initial model of every run.
  """

  task: str = 'mnist5k'
  model: str = 'cnn'
  clients: int = 100
  clients_per_round: Optional[int] = None
  rounds: int = 10
  client_learning_rate: float = 0.03
  batch_size: int = 10
  local_epochs: int = 1
  epsilons: Sequence[float] = (0.1, 0.5, 1.0, 5.0, 10.0)
  noise_free: bool = True
  modes: Sequence[str] = ('weights', 'deltas')
  weights_radius: float = ldp_learning.DEFAULT_WEIGHTS_RADIUS
  deltas_radius: float = ldp_learning.DEFAULT_DELTAS_RADIUS
  runs: int = 1
  delta: float = 1e-5
  seed: int = 0

  def __post_init__(self):
    for mode in self.modes:
      validation.one_of('mode', mode, ldp_learning.MODES)
    for eps in self.epsilons:
      validation.positive('epsilon', eps)
    validation.int_at_least('runs', self.runs, 1)


def _label(mode: Optional[str], eps: Optional[float], run: int) -> str:
  if mode is None:
    return f'noise_free_run{run}'
  return f'{mode}_eps{eps:g}_run{run}'


def configs(setting: Setting) -> dict[str, training.RunConfig]:
  """The labelled runs of `setting` (see the module docstring)."""
  common = dict(
      task=setting.task,
      task_options={
          'model': setting.model,
          'num_clients': setting.clients,
          'partition': 'iid',
      },
      batch_size=setting.batch_size,
      num_epochs=setting.local_epochs,
      clients_per_round=setting.clients_per_round or setting.clients,
      total_rounds=setting.rounds,
      client_learning_rate=setting.client_learning_rate,
      eval_every=setting.rounds,
      seed=setting.seed,
  )
  out = {}
  for run in range(setting.runs):
    if setting.noise_free:
      out[_label(None, None, run)] = training.RunConfig(
          mechanism='none',
          params={'delta': setting.delta},
          sampling_seed=run,
          **common,
      )
    for mode in setting.modes:
      radius = (
          setting.weights_radius if mode == 'weights' else setting.deltas_radius
      )
      for eps in setting.epsilons:
        out[_label(mode, eps, run)] = training.RunConfig(
            mechanism='ldp',
            params={
                'ldp_epsilon': eps,
                'ldp_mode': mode,
                'ldp_radius': radius,
                'delta': setting.delta,
            },
            sampling_seed=run,
            **common,
        )
  return out


def _accuracies(setting, results, mode, eps):
  return [
      results[_label(mode, eps, run)].summary['final_test_accuracy']
      for run in range(setting.runs)
      if _label(mode, eps, run) in results
  ]


def table(setting: Setting, results: Mapping[str, runs.RunResult]) -> str:
  """Markdown: the paper's MNIST row, then the measured accuracy (%) by mode."""
  columns = ([None] if setting.noise_free else []) + list(setting.epsilons)
  names = ['noise-free' if e is None else f'eps={e:g}' for e in columns]
  lines = [
      '| setting | ' + ' | '.join(names) + ' |',
      '|---' * (len(columns) + 1) + '|',
      '| paper (MNIST, 60k, 10 runs) | '
      + ' | '.join(
          f'{PAPER_MNIST[e]:.2f}' if e in PAPER_MNIST else '-' for e in columns
      )
      + ' |',
  ]
  for mode in setting.modes:
    cells = []
    for eps in columns:
      accs = _accuracies(setting, results, None if eps is None else mode, eps)
      cells.append(f'{100 * np.mean(accs):.2f}' if accs else '-')
    lines.append(f'| measured, {mode} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def privacy_lines(
    setting: Setting, results: Mapping[str, runs.RunResult]
) -> list[str]:
  """Per eps0: the paper's per-value claim beside what the ledger charged."""
  lines = []
  for eps in setting.epsilons:
    found = [
        results[_label(mode, eps, 0)]
        for mode in setting.modes
        if _label(mode, eps, 0) in results
    ]
    if not found:
      continue
    summary = found[0].summary
    closed = summary['privacy']['closed_form']
    analyst = summary['privacy']['guarantees'][0]
    shuffle = (
        f"{closed['shuffle_epsilon']:.4g}"
        if closed.get('shuffle_applicable')
        else f"n/a ({closed.get('shuffle_reason', '')})"
    )
    lines.append(
        f"eps0={eps:g} (d={closed['num_values']}, T={closed['rounds']}, "
        f"delta={closed['delta']:g}): per value "
        f"{closed['paper_epsilon_per_value']:g} (the paper's claim); plain "
        f"composition {closed['plain_composition_epsilon']:.4g} for a client "
        f"in every round (pure DP); the run's ledger: "
        f"{analyst['epsilon']:.4g} ({analyst['adversary']}, "
        f"{analyst['accountant']}); shuffle {shuffle}"
    )
  return lines


def plot(
    setting: Setting, results: Mapping[str, runs.RunResult], path: str
) -> None:
  """Accuracy vs eps0 per mode, the paper's MNIST row beside (PNG)."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, ax = plt.subplots(figsize=(6, 4))
  xs = [e for e in PAPER_MNIST if e is not None]
  ax.plot(xs, [PAPER_MNIST[e] for e in xs], 'k--o', label='paper (MNIST)')
  ax.axhline(PAPER_MNIST[None], color='k', ls=':', lw=1)
  for mode in setting.modes:
    points = [
        (eps, 100 * np.mean(accs))
        for eps in setting.epsilons
        if (accs := _accuracies(setting, results, mode, eps))
    ]
    if points:
      ax.plot(*zip(*points), '-o', label=f'measured, {mode}')
  free = _accuracies(setting, results, None, None)
  if free:
    ax.axhline(
        100 * np.mean(free),
        color='C2',
        ls=':',
        lw=1,
        label='measured, noise-free',
    )
  ax.set_xscale('log')
  ax.set_xlabel('eps0 per value')
  ax.set_ylabel('test accuracy (%)')
  ax.set_title('LDP-FL Table 1 (dotted: noise-free)')
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
