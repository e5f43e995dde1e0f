"""DP-FedAvg, DP-FTRL, BLT and BandMF at equal epsilon, tuned, as grids of runs.

A `Setting` (one task, its rounds, clients per round and clip) becomes
labelled `RunConfig`s of each mechanism at each target epsilon (`configs`);
with a `Tuning` grid, each method's clip and server step are first chosen on
the validation half (`tuning_configs`, `choose`). `tff_priv.program.grid.run`
runs them (each charged by its own ledger); `table` reads them back.
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
class Tuning:
  """The grid each method's clip and server step are chosen from.

  Every tuning run trains on the clients and is evaluated on the validation
  half of the test set (`RunConfig.evaluation_split='validation'`); the
  reported runs are evaluated on the other half, with seeds apart from the
  tuning seeds. The tuning runs are not charged to the reported runs'
  ledgers (as in the literature): the chosen (clip, step) is a function of
  their private outputs, so the reported eps leaves out the selection.

  Attributes:
    clips: the fixed clips tried (methods that clip at the setting's clip).
    server_learning_rates: the server steps tried (every private method).
    seeds: the tuning runs' model seeds, apart from `Setting.seeds`.
  """

  clips: Sequence[float] = (0.1, 0.25, 0.5, 1.0)
  server_learning_rates: Sequence[float] = (0.5, 1.0, 2.0)
  seeds: Sequence[int] = (100,)

  def __post_init__(self):
    for name in ('clips', 'server_learning_rates', 'seeds'):
      if not getattr(self, name):
        raise ValueError(f'tuning {name} must not be empty')
    for clip in self.clips:
      validation.positive('clip', clip)
    for rate in self.server_learning_rates:
      validation.positive('server_learning_rate', rate)


@dataclasses.dataclass(frozen=True)
class Choice:
  """A method's tuned (clip, server step) at one eps, and its score.

  Attributes:
    clip: the chosen fixed clip (None: the method adapts its clip).
    server_learning_rate: the chosen server step.
    score: its mean validation measure over the tuning seeds.
  """

  clip: Optional[float]
  server_learning_rate: float
  score: float


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
    tuning: each method's clip and server step chosen from this grid on the
      validation half (`Tuning`, `tuning_configs`, `choose`), and every run
      evaluated on the test half; None: the setting's clip and step 1, on
      the whole test set (or `test_examples` of it).
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
  tuning: Optional[Tuning] = None

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


def label(
    method: str,
    epsilon: Optional[float],
    seed: int,
    choice: Optional[Choice] = None,
) -> str:
  """The run directory's name (with `choice`: a tuned run's, which names it).

  A tuned run's name holds its clip and server step, so that a choice that
  changes (a tuning seed added) runs anew instead of meeting a directory of
  another configuration.
  """
  if epsilon is None:
    return f'{method}_seed{seed}'
  if choice is None:
    return f'{method}_eps{epsilon:g}_seed{seed}'
  clip = '' if choice.clip is None else f'_clip{choice.clip:g}'
  return (
      f'{method}_eps{epsilon:g}{clip}_slr{choice.server_learning_rate:g}'
      f'_seed{seed}'
  )


def tuning_label(
    method: str,
    epsilon: float,
    clip: Optional[float],
    server_learning_rate: float,
    seed: int,
) -> str:
  """A tuning run's directory name (`clip` None: a method that adapts it)."""
  clip_part = '' if clip is None else f'_clip{clip:g}'
  return (
      f'tune_{method}_eps{epsilon:g}{clip_part}_slr{server_learning_rate:g}'
      f'_seed{seed}'
  )


def _tunes_clip(method: str) -> bool:
  """Whether `method` clips at (a multiple of) the setting's clip."""
  value = METHODS[method][1].get('clip')
  return value is True or isinstance(value, ClipTimes)


def _base(setting: Setting, split: str) -> dict:
  """The fields every run of `setting` shares (`split`: its evaluation)."""
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
  if setting.tuning is not None:
    # The first half of the test set is the validation half: tuning runs
    # are evaluated on it, the reported ones on the other half.
    base.update(holdout_validation=True, evaluation_split=split)
  return base


def _private(
    setting: Setting,
    method: str,
    epsilon: float,
    clip: float,
    server_learning_rate: float,
    seed: int,
    base: dict,
) -> training.RunConfig:
  """`method` at `epsilon`, its clip `clip` (True in METHODS: this clip)."""
  mechanism, extra = METHODS[method]
  params = {'epsilon': epsilon, 'delta': setting.delta}
  for key, value in extra.items():
    if value is True:
      value = clip
    elif isinstance(value, ClipTimes):
      value = clip * value.factor
    params[key] = value
  return training.RunConfig(
      mechanism=mechanism,
      params=params,
      seed=seed,
      server_learning_rate=server_learning_rate,
      **base,
  )


def tuning_configs(setting: Setting) -> dict[str, training.RunConfig]:
  """label -> RunConfig of every tuning run of `setting` (`Setting.tuning`).

  Each method at each target eps, at every (clip, server step) of the grid
  (the server step alone for a method that adapts its clip), for each tuning
  seed, evaluated on the validation half.
  """
  tuning = setting.tuning
  if tuning is None:
    raise ValueError('the setting has no tuning grid')
  base = _base(setting, 'validation')
  out = {}
  for seed in tuning.seeds:
    for epsilon in setting.epsilons:
      for method in setting.methods:
        clips = tuning.clips if _tunes_clip(method) else (None,)
        for clip in clips:
          for rate in tuning.server_learning_rates:
            out[tuning_label(method, epsilon, clip, rate, seed)] = _private(
                setting,
                method,
                epsilon,
                setting.clip if clip is None else clip,
                rate,
                seed,
                base,
            )
  return out


def choose(
    setting: Setting,
    results: Mapping[str, runs_lib.RunResult],
    measure: str = 'accuracy',
) -> dict[tuple[str, float], Choice]:
  """(method, eps) -> its best (clip, server step) on the validation half.

  The best mean over the tuning seeds of the final validation accuracy
  (highest) or loss (lowest, `measure='loss'`); a tie goes to the first in
  the grid's order (smaller clip, then smaller step).

  Raises:
    ValueError: a (method, eps) with no finished tuning run.
  """
  validation.one_of('measure', measure, ('accuracy', 'loss'))
  tuning = setting.tuning
  if tuning is None:
    raise ValueError('the setting has no tuning grid')
  chosen = {}
  for epsilon in setting.epsilons:
    for method in setting.methods:
      best = None
      clips = tuning.clips if _tunes_clip(method) else (None,)
      for clip in clips:
        for rate in tuning.server_learning_rates:
          values = [
              _final(results[label], measure) if label in results else None
              for label in (
                  tuning_label(method, epsilon, clip, rate, seed)
                  for seed in tuning.seeds
              )
          ]
          if any(v is None or not np.isfinite(v) for v in values):
            continue
          score = float(np.mean(values))
          better = best is None or (
              score > best.score
              if measure == 'accuracy'
              else score < best.score
          )
          if better:
            best = Choice(clip, rate, score)
      if best is None:
        raise ValueError(
            f'no tuning run of {method} at eps {epsilon:g} has finished'
        )
      chosen[(method, epsilon)] = best
  return chosen


def configs(
    setting: Setting,
    chosen: Optional[Mapping[tuple[str, float], Choice]] = None,
) -> dict[str, training.RunConfig]:
  """label -> RunConfig of every reported run of `setting`.

  For each target epsilon and seed, TFF's DP-FedAvg with a fixed clip and
  with adaptive clipping (Poisson sampling, amplified), TFF's tree DP-FTRL
  and BLT DP-FTRL one stream per epoch, BLT with one cyclic (k, b) stream
  (each client every N // K rounds), amplified BandMF (b cyclic groups,
  Poisson-sampled inside), and the non-private run once per seed. With
  `chosen` (`choose`), each method at its tuned clip and server step.
  """
  if chosen is not None and setting.tuning is None:
    raise ValueError('chosen parameters need a setting with a tuning grid')
  base = _base(setting, 'test')
  out = {}
  for seed in setting.seeds:
    out[label(NONE, None, seed)] = training.RunConfig(
        mechanism='none', seed=seed, **base
    )
    for epsilon in setting.epsilons:
      for method in setting.methods:
        clip, rate, choice = setting.clip, 1.0, None
        if chosen is not None:
          choice = chosen[(method, epsilon)]
          rate = choice.server_learning_rate
          if choice.clip is not None:
            clip = choice.clip
        out[label(method, epsilon, seed, choice)] = _private(
            setting, method, epsilon, clip, rate, seed, base
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
    chosen: Optional[Mapping[tuple[str, float], Choice]] = None,
) -> str:
  """A Markdown table: each method's final test accuracy (or loss) by seed.

  Rows: the non-private run, then each method at each target eps, with its
  seeds' values, their mean and standard deviation, and the largest eps its
  ledgers charged; with `chosen`, each method's tuned clip and server step.
  """
  validation.one_of('measure', measure, ('accuracy', 'loss'))
  tuned = chosen is not None
  lines = [
      '| method | eps | '
      + ('clip | server lr | ' if tuned else '')
      + f'{" | ".join(f"seed {s}" for s in setting.seeds)} '
      '| mean | std | charged eps (max) |',
      '|---|---|'
      + ('---|---|' if tuned else '')
      + '---|' * len(setting.seeds)
      + '---|---|---|',
  ]

  def row(method, epsilon):
    values, charged = [], []
    for seed in setting.seeds:
      choice = None if chosen is None else chosen.get((method, epsilon))
      result = results.get(label(method, epsilon, seed, choice))
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
    params = ''
    if tuned:
      choice = chosen.get((method, epsilon))
      if choice is None:
        params = f'{setting.clip:g} | 1 | ' if epsilon is None else '- | - | '
      else:
        clip = 'adaptive' if choice.clip is None else f'{choice.clip:g}'
        params = f'{clip} | {choice.server_learning_rate:g} | '
    lines.append(
        f'| {method} | {"-" if epsilon is None else f"{epsilon:g}"} '
        f'| {params}{cells} | {mean} | {std} | {eps_cell} |'
    )

  row(NONE, None)
  for epsilon in setting.epsilons:
    for method in setting.methods:
      row(method, epsilon)
  return '\n'.join(lines)


def tuning_table(
    setting: Setting,
    results: Mapping[str, runs_lib.RunResult],
    measure: str = 'accuracy',
) -> str:
  """A Markdown table of the tuning grid: the validation measure of each cell.

  One row per (method, eps, clip), one column per server step: the mean over
  the tuning seeds ('-': not finished), the chosen cell in bold.
  """
  tuning = setting.tuning
  if tuning is None:
    raise ValueError('the setting has no tuning grid')
  try:
    chosen = choose(setting, results, measure)
  except ValueError:
    chosen = {}
  rates = tuning.server_learning_rates
  lines = [
      '| method | eps | clip | '
      + ' | '.join(f'server lr {r:g}' for r in rates)
      + ' |',
      '|---|---|---|' + '---|' * len(rates),
  ]
  for epsilon in setting.epsilons:
    for method in setting.methods:
      choice = chosen.get((method, epsilon))
      for clip in tuning.clips if _tunes_clip(method) else (None,):
        cells = []
        for rate in rates:
          values = [
              _final(results[k], measure) if k in results else None
              for k in (
                  tuning_label(method, epsilon, clip, rate, seed)
                  for seed in tuning.seeds
              )
          ]
          if any(v is None for v in values):
            cells.append('-')
            continue
          cell = f'{np.mean(values):.3f}'
          if choice == Choice(clip, rate, float(np.mean(values))):
            cell = f'**{cell}**'
          cells.append(cell)
        clip_cell = 'adaptive' if clip is None else f'{clip:g}'
        lines.append(
            f'| {method} | {epsilon:g} | {clip_cell} | {" | ".join(cells)} |'
        )
  return '\n'.join(lines)
