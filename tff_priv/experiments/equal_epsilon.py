"""DP-FedAvg, DP-FTRL and BLT at equal epsilon, as grids of training runs.

A `Setting` (one task, its rounds, clients per round and clip) becomes
labelled `RunConfig`s (`configs`) of each mechanism at each target epsilon.
`tff_priv.program.grid.run` runs them (each charged by its own ledger: every
private run's eps is at most its target); `table` reads them back.
docs/blt.md gives the results and commands.
"""

import dataclasses
from typing import Mapping, Optional, Sequence

import numpy as np

from tff_priv import validation
from tff_priv.program import runs as runs_lib
from tff_priv.program import training


@dataclasses.dataclass(frozen=True)
class ClipTimes:
  """A parameter equal to the setting's clip times `factor`."""

  factor: float


# Method label -> (mechanism, its parameters beside epsilon and delta; True:
# the setting's clip). What a grid runs unless told.
_DEFAULT = {
    'dp_fedavg': ('dp_fedavg', {'clip': True}),
    'dp_fedavg_adaptive': ('dp_fedavg', {'adaptive_clip_quantile': 0.5}),
    # Adaptive clipping from the fixed clip's value (TFF's first clip, 0.1,
    # takes about 23 rounds to reach 1 at its learning rate).
    'dp_fedavg_adaptive_c1': (
        'dp_fedavg',
        {'adaptive_clip_quantile': 0.5, 'adaptive_clip_initial': True},
    ),
    'dp_ftrl': ('dp_ftrl', {'clip': True}),
    'blt_epoch': ('blt', {'clip': True, 'participation': 'epoch'}),
    'blt_cyclic': ('blt', {'clip': True, 'participation': 'cyclic'}),
    # Amplified BandMF, its bands chosen for each target (b = 1: DP-FedAvg).
    'bandmf': ('bandmf', {'clip': True}),
}
# The clip sweep, run when asked for: the fixed clip a quarter of and 4 times
# the setting's (what a clip chosen without tuning costs, against which
# adaptive clipping is measured), adaptive clipping at the 0.9 quantile (few
# updates cut) and at the 0.1 quantile (most updates cut, as the best fixed
# clip on mnist5k does), and the other methods at a quarter of the clip (the
# clip at which mnist5k's CNN trains at all).
_CLIP_SWEEP = {
    'dp_fedavg_clip_x0.25': ('dp_fedavg', {'clip': ClipTimes(0.25)}),
    'dp_fedavg_clip_x4': ('dp_fedavg', {'clip': ClipTimes(4.0)}),
    'dp_fedavg_adaptive_q90': (
        'dp_fedavg',
        {'adaptive_clip_quantile': 0.9, 'adaptive_clip_initial': True},
    ),
    'dp_fedavg_adaptive_q10': (
        'dp_fedavg',
        {'adaptive_clip_quantile': 0.1, 'adaptive_clip_initial': True},
    ),
    'blt_cyclic_clip_x0.25': (
        'blt',
        {'clip': ClipTimes(0.25), 'participation': 'cyclic'},
    ),
    'blt_epoch_clip_x0.25': (
        'blt',
        {'clip': ClipTimes(0.25), 'participation': 'epoch'},
    ),
    'dp_ftrl_clip_x0.25': ('dp_ftrl', {'clip': ClipTimes(0.25)}),
    'bandmf_clip_x0.25': ('bandmf', {'clip': ClipTimes(0.25)}),
}
METHODS = {**_DEFAULT, **_CLIP_SWEEP}
DEFAULT_METHODS = tuple(_DEFAULT)
NONE = 'none'


@dataclasses.dataclass(frozen=True)
class Setting:
  """The runs of one task (defaults: mnist5k's MLP, K = 20 of 100, 50 rounds).

  Attributes:
    task: the task.
    model: task option of an image task (None: the task's default).
    num_clients: task option of a synthetic split (None: the task's
      default, 100 for mnist5k).
    rounds: T.
    clients_per_round: K.
    batch_size: client batch size.
    learning_rate: client SGD learning rate.
    clip: the fixed L2 clip (dp_fedavg fixed, dp_ftrl, blt).
    max_client_examples: at most this many examples per client and round.
    test_examples: a fixed random test subset (None: all).
    eval_every: evaluate every this many rounds (and the last).
    epsilons: the targets, each at `delta`.
    delta: delta of every target.
    seeds: model-initialisation seeds (sampling is secret in every run).
    methods: the private methods run (keys of METHODS; DEFAULT_METHODS).
  """

  task: str = 'mnist5k'
  model: Optional[str] = 'mlp'
  num_clients: Optional[int] = None
  rounds: int = 50
  clients_per_round: int = 20
  batch_size: int = 10
  learning_rate: float = 0.1
  clip: float = 1.0
  max_client_examples: Optional[int] = None
  test_examples: Optional[int] = None
  eval_every: int = 10
  epsilons: Sequence[float] = (2.0, 8.0)
  delta: float = 1e-5
  seeds: Sequence[int] = (0, 1, 2)
  methods: Sequence[str] = DEFAULT_METHODS

  def __post_init__(self):
    for method in self.methods:
      validation.one_of('method', method, tuple(METHODS))
    validation.int_at_least('rounds', self.rounds, 1)


# A larger population: 1,000 clients of mnist5k's 4,000 training digits, K =
# 20 (b = 50 groups), 200 rounds: each client 4 times, 50 rounds apart.
N1000 = Setting(num_clients=1000, rounds=200, eval_every=50)

SHAKESPEARE = Setting(
    task='shakespeare_offline',
    model=None,
    rounds=40,
    clients_per_round=20,
    batch_size=4,
    learning_rate=1.0,
    clip=0.5,
    max_client_examples=5,
    test_examples=1000,
    eval_every=10,
)


def label(method: str, epsilon: Optional[float], seed: int) -> str:
  """The run directory's name."""
  if epsilon is None:
    return f'{method}_seed{seed}'
  return f'{method}_eps{epsilon:g}_seed{seed}'


def configs(setting: Setting) -> dict[str, training.RunConfig]:
  """label -> RunConfig of every run of `setting`.

  For each target epsilon and seed, TFF's DP-FedAvg with a fixed clip and
  with adaptive clipping (Poisson sampling, amplified), TFF's tree DP-FTRL
  and BLT DP-FTRL one stream per epoch, BLT with one cyclic (k, b) stream
  (each client every N // K rounds), amplified BandMF (b cyclic groups,
  Poisson-sampled inside), and the non-private run once per seed.
  """
  task_options = {}
  if setting.model:
    task_options['model'] = setting.model
  if setting.num_clients:
    task_options['num_clients'] = setting.num_clients
  base = dict(
      task=setting.task,
      task_options=task_options,
      total_rounds=setting.rounds,
      clients_per_round=setting.clients_per_round,
      batch_size=setting.batch_size,
      client_learning_rate=setting.learning_rate,
      max_client_examples=setting.max_client_examples,
      test_examples=setting.test_examples,
      eval_every=setting.eval_every,
  )
  out = {}
  for seed in setting.seeds:
    out[label(NONE, None, seed)] = training.RunConfig(
        mechanism='none', seed=seed, **base
    )
    for epsilon in setting.epsilons:
      for method in setting.methods:
        mechanism, extra = METHODS[method]
        params = {'epsilon': epsilon, 'delta': setting.delta}
        for key, value in extra.items():
          if value is True:
            value = setting.clip
          elif isinstance(value, ClipTimes):
            value = setting.clip * value.factor
          params[key] = value
        out[label(method, epsilon, seed)] = training.RunConfig(
            mechanism=mechanism, params=params, seed=seed, **base
        )
  return out


def _final(result: runs_lib.RunResult, key: str) -> Optional[float]:
  summary = result.summary or {}
  if key == 'accuracy':
    return summary.get('final_test_accuracy')
  metrics = summary.get('final_test_metrics') or {}
  return metrics.get('loss')


def table(
    setting: Setting,
    results: Mapping[str, runs_lib.RunResult],
    measure: str = 'accuracy',
) -> str:
  """A Markdown table: each method's final test accuracy (or loss) by seed.

  Rows: the non-private run, then each method at each target eps, with its
  seeds' values, their mean and standard deviation, and the largest eps its
  ledgers charged.
  """
  validation.one_of('measure', measure, ('accuracy', 'loss'))
  lines = [
      f'| method | eps | {" | ".join(f"seed {s}" for s in setting.seeds)} '
      '| mean | std | charged eps (max) |',
      '|---|---|' + '---|' * len(setting.seeds) + '---|---|---|',
  ]

  def row(method, epsilon):
    values, charged = [], []
    for seed in setting.seeds:
      result = results.get(label(method, epsilon, seed))
      value = None if result is None else _final(result, measure)
      values.append(value)
      if result is not None and result.summary is not None:
        eps = result.summary['privacy']['rdp_epsilon']
        if isinstance(eps, (int, float)):
          charged.append(eps)
    done = [v for v in values if v is not None]
    cells = ' | '.join('-' if v is None else f'{v:.3f}' for v in values)
    mean = f'{np.mean(done):.3f}' if done else '-'
    std = f'{np.std(done):.3f}' if len(done) > 1 else '-'
    eps_cell = f'{max(charged):.3f}' if charged else '-'
    lines.append(
        f'| {method} | {"-" if epsilon is None else f"{epsilon:g}"} '
        f'| {cells} | {mean} | {std} | {eps_cell} |'
    )

  row(NONE, None)
  for epsilon in setting.epsilons:
    for method in setting.methods:
      row(method, epsilon)
  return '\n'.join(lines)
