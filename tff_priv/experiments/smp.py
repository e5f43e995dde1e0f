"""Fed-SMP's experiments (Hu, Guo, Gong, Sec. 6) as grids of training runs.

A `Setting` (one task) becomes labelled `RunConfig`s (`configs`), which
`tff_priv.program.grid.run` runs; `summary_markdown` and `plot` read the
finished runs back. docs/smp.md describes the setup and the results.
"""

import dataclasses
from typing import Mapping, Optional, Sequence

import numpy as np

from tff_priv import validation
from tff_priv.program import layout
from tff_priv.program import runs as runs_lib
from tff_priv.program import training
from tff_priv.program.registry import dp_fedavg as dp_fedavg_mechanism
from tff_priv.program.registry import smp

MB = 1e6  # The paper's MB: 1,663,370 float32 values x 3 uploads = 19.96 MB.
# With one seed a run's accuracy moves from round to round: the tables also
# give its mean over the last evaluations.
TAIL_EVALUATIONS = 5
P1_NAME = 'Fed-SMP, p = 1 (client noise, secure sum)'
NOISE_FREE_NAME = 'no noise (clip C, p = 1)'
DP_FEDAVG_NAME = "DP-FedAvg (TFF's central noise, fixed clip C)"
# The methods a setting runs (each a `Run`; its label names its directory).
FED_SMP = 'fed_smp'  # Fed-SMP at p < 1.
P1 = 'p1'  # Fed-SMP at p = 1.
NOISE_FREE = 'noise_free'  # Fed-SMP's process without noise.
DP_FEDAVG = dp_fedavg_mechanism.Config.NAME  # The baseline: TFF's DP-FedAvg.


@dataclasses.dataclass(frozen=True)
class Setting:
  """The runs of one task; the defaults are the mnist5k setting.

  Attributes:
    task: the task (`tasks.TASK_NAMES`).
    model: task option: the model of an image task.
    num_clients: task option: clients of an image split (public included).
    samples_per_client: task option: examples per image client.
    partition: task option: how the image split is made.
    max_clients: task option: keep only the first clients (Shakespeare).
    public_clients: top_k's public set D_pub: the first clients of the split,
      never sampled by the top_k runs.
    rounds: rounds T of every run.
    clients_per_round: K, expected clients per round (Poisson).
    local_epochs: local epochs E.
    batch_size: client batch size.
    learning_rate: client learning rate of round 1.
    momentum: client momentum, reset every round (0: plain SGD).
    lr_decay: the client learning rate is multiplied by this every round.
    clip: C, the L2 clip of an upload (every mechanism).
    epsilon: target eps of every noised run at `delta`.
    delta: delta of every target and report.
    compressions: Fed-SMP's p = k / d values, each in (0, 1).
    masks: Fed-SMP's masks run at each p ('rand_k', 'top_k').
    noise_free: also run the ceiling: smp with noise multiplier 0 at p = 1.
    dp_fedavg: also run TFF's DP-FedAvg (mechanism 'dp_fedavg', fixed clip).
    max_client_examples: at most this many examples per client and round.
    test_examples: a fixed random subset of the test set (None: all).
    target_accuracy: the test accuracy whose uplink MB are reported.
    eval_every: evaluate every this many rounds (and the last).
    seed: seeds the split, model init and rand_k masks.
    sampling_seed: seeds who is sampled; None: each run draws its own
      secret seed. Given: every run draws the same clients per round (a
      paired comparison), and config.json tells who was sampled.
  """

  task: str = 'mnist5k'
  model: Optional[str] = 'cnn'
  num_clients: Optional[int] = 400
  samples_per_client: Optional[int] = 10
  partition: Optional[str] = 'iid'
  max_clients: Optional[int] = None
  public_clients: int = 20
  rounds: int = 20
  clients_per_round: int = 50
  local_epochs: int = 2
  batch_size: int = 10
  learning_rate: float = 0.1
  momentum: float = 0.5
  lr_decay: float = 0.99
  clip: float = 0.3
  epsilon: float = 1.0
  delta: float = 1e-5
  compressions: tuple[float, ...] = (0.01, 0.1, 0.4, 0.005, 0.05, 0.2, 0.8)
  masks: tuple[str, ...] = ('rand_k', 'top_k')
  noise_free: bool = True
  dp_fedavg: bool = True
  max_client_examples: Optional[int] = None
  test_examples: Optional[int] = None
  target_accuracy: float = 0.8
  eval_every: int = 1
  seed: int = 0
  sampling_seed: Optional[int] = None

  def validate(self) -> 'Setting':
    """Checks the fields; ValueError starting with the field's name."""
    for name in ('public_clients', 'seed'):
      validation.int_at_least(name, getattr(self, name), 0)
    for name in (
        'rounds',
        'clients_per_round',
        'local_epochs',
        'batch_size',
        'eval_every',
    ):
      validation.int_at_least(name, getattr(self, name), 1)
    for name in ('learning_rate', 'clip', 'epsilon'):
      validation.positive(name, getattr(self, name))
    validation.non_negative('momentum', self.momentum)
    validation.half_open_unit('lr_decay', self.lr_decay)
    validation.open_unit('delta', self.delta)
    validation.non_negative('target_accuracy', self.target_accuracy)
    for p in self.compressions:
      if not 0 < p < 1:
        raise ValueError(
            f'compressions must be in (0, 1) (p = 1 is always run), got {p}'
        )
    for mask in self.masks:
      validation.one_of('masks', mask, smp.MASKS)
    if 'top_k' in self.masks and self.compressions:
      validation.int_at_least('public_clients', self.public_clients, 1)
    return self


SHAKESPEARE = Setting(
    task='shakespeare_offline',
    model=None,
    num_clients=None,
    samples_per_client=None,
    partition=None,
    public_clients=20,
    rounds=40,
    clients_per_round=50,
    local_epochs=1,
    batch_size=4,
    learning_rate=1.0,
    momentum=0.0,
    clip=0.5,
    epsilon=8.0,
    compressions=(0.1,),
    masks=('top_k',),
    dp_fedavg=False,
    max_client_examples=5,
    test_examples=1000,
    target_accuracy=0.2,
)


@dataclasses.dataclass(frozen=True)
class Run:
  """One run of a setting: FED_SMP (at p < 1), P1, NOISE_FREE or DP_FEDAVG."""

  task: str
  method: str
  mask: Optional[str] = None
  compression: float = 1.0

  @property
  def label(self) -> str:
    """Its run directory's name."""
    if self.method == FED_SMP:
      return f'{self.task}-fed_smp-{self.mask}-p{self.compression:g}'
    return f'{self.task}-{self.method}'

  @property
  def name(self) -> str:
    """Its name in tables and legends."""
    if self.method == FED_SMP:
      return f'Fed-SMP {self.mask} p={self.compression:g}'
    return {
        P1: P1_NAME,
        NOISE_FREE: NOISE_FREE_NAME,
        DP_FEDAVG: DP_FEDAVG_NAME,
    }[self.method]

  @property
  def mechanism(self) -> str:
    """The registry's mechanism it runs: DP-FedAvg's, else Fed-SMP's."""
    return (
        dp_fedavg_mechanism.Config.NAME
        if self.method == DP_FEDAVG
        else smp.Config.NAME
    )


def runs(setting: Setting) -> list[Run]:
  """The setting's runs: p = 1, the ceiling, DP-FedAvg, then each p x mask."""
  out = [Run(setting.task, P1)]
  if setting.noise_free:
    out.append(Run(setting.task, NOISE_FREE))
  if setting.dp_fedavg:
    out.append(Run(setting.task, DP_FEDAVG))
  out += [
      Run(setting.task, FED_SMP, mask, p)
      for p in setting.compressions
      for mask in setting.masks
  ]
  return out


def _params(s: Setting, run: Run) -> dict[str, object]:
  """The mechanism's parameters of `run`.

  Every noised run gets the target eps and calibrates its own noise
  multiplier under its own Poisson rate (`BuildContext.noise_multiplier`):
  K / (N - public_clients) for top_k, whose public clients are never sampled,
  K / N for the others; so equal eps, not equal sigma.
  """
  if run.method == DP_FEDAVG:
    return {'epsilon': s.epsilon, 'delta': s.delta, 'clip': s.clip}
  params = {
      'delta': s.delta,
      'clip': s.clip,
      'compression': run.compression,
      'mask': run.mask or 'rand_k',
  }
  if run.method == NOISE_FREE:
    return {**params, 'noise_multiplier': 0.0}
  if run.mask == 'top_k':
    params['public_clients'] = s.public_clients
  return {**params, 'epsilon': s.epsilon}


def configs(setting: Setting) -> dict[str, training.RunConfig]:
  """label -> validated `RunConfig` of every run of `setting`.

  Raises:
    ValueError: a bad setting (the message starts with the field's name) or
      a configuration the program refuses.
  """
  s = setting.validate()
  options = {
      k: getattr(s, k)
      for k in training.TASK_OPTION_NAMES
      if getattr(s, k, None) is not None
  }
  out = {}
  for run in runs(s):
    out[run.label] = training.RunConfig(
        task=s.task,
        task_options=options,
        batch_size=s.batch_size,
        num_epochs=s.local_epochs,
        mechanism=run.mechanism,
        params=_params(s, run),
        clients_per_round=s.clients_per_round,
        total_rounds=s.rounds,
        client_learning_rate=s.learning_rate,
        client_momentum=s.momentum or None,
        client_lr_decay=s.lr_decay,
        max_client_examples=s.max_client_examples,
        eval_every=s.eval_every,
        test_examples=s.test_examples,
        seed=s.seed,
        sampling_seed=s.sampling_seed,
    ).validate()
  return out


def cumulative_uplink_mb(result: runs_lib.RunResult) -> dict[int, float]:
  """round -> MB uploaded by all clients up to it.

  From the train rows' public `uplink_bytes` column: the configured K x the
  nominal bytes per client (smp: 32 bits per kept value through secure
  aggregation; dp_fedavg: 32 d). The number of clients a round realised
  depends on who was sampled and is not covered by the ledger, so the
  program no longer releases it: these MB are the expected uplink, not the
  realised one (the old script's results counted the realised clients).
  """
  total, out = 0.0, {}
  for row in sorted(result.train_rows, key=lambda r: r[layout.ROUND]):
    total += row['uplink_bytes']
    out[int(row[layout.ROUND])] = total / MB
  return out


def mb_to_target(result: runs_lib.RunResult, target: float) -> Optional[float]:
  """Uplink MB when the test accuracy first reached `target` (None: never)."""
  uplink = cumulative_uplink_mb(result)
  for row in sorted(result.eval_rows, key=lambda r: r[layout.ROUND]):
    if row.get(layout.TEST_ACCURACY, -1.0) >= target:
      return uplink[int(row[layout.ROUND])]
  return None


def tail_accuracy(result: runs_lib.RunResult) -> float:
  """Mean test accuracy over the last TAIL_EVALUATIONS evaluations."""
  accuracies = [r[layout.TEST_ACCURACY] for r in result.eval_rows]
  return float(np.mean(accuracies[-TAIL_EVALUATIONS:]))


def epsilon(result: runs_lib.RunResult) -> float:
  """The analyst's eps the run's ledger spent (inf: not noised)."""
  return float(result.summary['privacy']['rdp_epsilon'])


def _resolved(result: runs_lib.RunResult, key: str):
  return result.summary['parameters']['resolved'].get(key)


def _kept(result: runs_lib.RunResult) -> int:
  kept = _resolved(result, 'kept_coordinates')
  return (
      kept
      if kept is not None
      else result.summary['parameters']['num_parameters']
  )


def _acc(result: Optional[runs_lib.RunResult]) -> str:
  if result is None:
    return '-'
  s = result.summary
  return f"{s['final_test_accuracy']:.3f} ({s['best_test_accuracy']:.3f})"


def task_markdown(
    setting: Setting, results: Mapping[str, runs_lib.RunResult]
) -> list[str]:
  """summary.md's section of one task: accuracy vs p, then every run."""
  s = setting
  done = [(run, results[run.label]) for run in runs(s) if run.label in results]
  if not done:
    return [f'## {s.task}', '', 'No finished runs.', '']
  first = done[0][1].summary
  lines = [
      f'## {s.task}',
      '',
      f"d = {first['parameters']['num_parameters']:,}, K = "
      f'{s.clients_per_round} expected per round (Poisson), T = {s.rounds}, '
      f'{s.local_epochs} local epoch(s), batch {s.batch_size}, lr '
      f'{s.learning_rate:g} (x{s.lr_decay:g}/round), momentum {s.momentum:g},'
      f' C = {s.clip:g}, target eps {s.epsilon:g} at delta {s.delta:g} '
      f'(each run calibrates sigma at its own sampling rate; top_k samples '
      f'none of its {s.public_clients} public clients), seed {s.seed}.',
      '',
  ]
  by_run = dict(done)
  p1 = by_run.get(Run(s.task, P1))
  if s.compressions:
    ps = list(dict.fromkeys(sorted(s.compressions)))
    lines += [
        'Test accuracy, final (best over rounds), vs p; p = 1 is '
        f'{P1_NAME}:',
        '',
        '| mask | ' + ' | '.join(f'p={p:g}' for p in ps) + ' | p=1 |',
        '|---' * (len(ps) + 2) + '|',
    ]
    for mask in s.masks:
      cells = [_acc(by_run.get(Run(s.task, FED_SMP, mask, p))) for p in ps]
      lines.append(
          f'| Fed-SMP {mask} | ' + ' | '.join(cells) + f' | {_acc(p1)} |'
      )
    lines.append('')
  lines += [
      'Every run (eps: what its ledger spent; uplink: MB of all clients at '
      f'the configured K; target accuracy {s.target_accuracy:g}):',
      '',
      f'| run | k | sigma | final acc. | best acc. | mean acc. last '
      f'{TAIL_EVALUATIONS} evals | final loss | eps | uplink B/client/round |'
      ' uplink MB | MB to target |',
      '|---|---|---|---|---|---|---|---|---|---|---|',
  ]
  for run, r in done:
    mb = mb_to_target(r, s.target_accuracy)
    sigma = _resolved(r, 'noise_multiplier')
    lines.append(
        f'| {run.name} | {_kept(r):,} | {sigma:.4f} | '
        f"{r.summary['final_test_accuracy']:.4f} | "
        f"{r.summary['best_test_accuracy']:.4f} | {tail_accuracy(r):.4f} | "
        f'{r.eval_rows[-1][layout.TEST_LOSS]:.3f} | {epsilon(r):.4f} | '
        f"{r.summary['uplink_bytes']['per_client_per_round']:,} | "
        f"{r.summary['uplink_bytes']['total'] / MB:.4g} | "
        + ('not reached' if mb is None else f'{mb:.4g}')
        + ' |'
    )
  return lines + ['']


def summary_markdown(
    settings: Sequence[Setting], results: Mapping[str, runs_lib.RunResult]
) -> str:
  """summary.md: one section per setting (`task_markdown`)."""
  return (
      '\n'.join(line for s in settings for line in task_markdown(s, results))
      + '\n'
  )


def plot(
    settings: Sequence[Setting],
    results: Mapping[str, runs_lib.RunResult],
    path: str,
) -> None:
  """accuracy_vs_p.png: accuracy vs p per image task, vs uplink per task.

  The p panel joins each mask's runs over p (and p = 1) into a curve, as the
  paper's figure does; DP-FedAvg and the ceiling are horizontal lines. The
  uplink panel shows p = 1, the ceiling, DP-FedAvg and each mask's most
  accurate p, against cumulative MB; Shakespeare's shows the test loss (its
  first rounds predict padding, which the accuracy leaves out).
  """
  # pylint: disable=g-import-not-at-top
  from matplotlib import figure
  from matplotlib.backends import backend_agg
  # pylint: enable=g-import-not-at-top

  panels = [
      (s, 'p')
      for s in settings
      if not s.task.startswith('shakespeare') and s.compressions
  ]
  panels += [(s, 'mb') for s in settings]
  fig = figure.Figure(figsize=(5.2 * len(panels), 4))
  backend_agg.FigureCanvasAgg(fig)
  for i, (s, kind) in enumerate(panels):
    ax = fig.add_subplot(1, len(panels), i + 1)
    done = {run: results[run.label] for run in runs(s) if run.label in results}
    final = lambda r: r.summary['final_test_accuracy']  # pylint: disable=cell-var-from-loop
    if kind == 'p':
      p1 = done.get(Run(s.task, P1))
      for mask, marker in zip(s.masks, 'os'):
        pts = sorted(
            (run.compression, final(r))
            for run, r in done.items()
            if run.mask == mask
        )
        pts += [(1.0, final(p1))] if p1 else []
        if pts:
          ax.plot(*zip(*pts), f'-{marker}', label=f'Fed-SMP {mask}')
      for method, style in ((DP_FEDAVG, '--'), (NOISE_FREE, ':')):
        run = Run(s.task, method)
        if run in done:
          ax.axhline(
              final(done[run]), color='k', ls=style, lw=1, label=run.name
          )
      ax.set_xscale('log')
      ax.set_xlabel('compression p = k/d')
      ax.set_ylabel('final test accuracy')
      ax.set_title(f'{s.task}: accuracy vs p, eps {s.epsilon:g}')
    else:
      shown = [run for run in done if run.method != FED_SMP]
      for mask in s.masks:
        own = [run for run in done if run.mask == mask]
        shown += [max(own, key=lambda run: final(done[run]))] if own else []
      text = s.task.startswith('shakespeare')
      metric = layout.TEST_LOSS if text else layout.TEST_ACCURACY
      for run in shown:
        uplink = cumulative_uplink_mb(done[run])
        pts = [
            (uplink[int(row[layout.ROUND])], row[metric])
            for row in done[run].eval_rows
        ]
        ax.plot(*zip(*pts), '-', label=run.name)
      if not text:
        ax.axhline(
            s.target_accuracy,
            color='r',
            ls=':',
            lw=1,
            label=f'target {s.target_accuracy:g}',
        )
      ax.set_xscale('log')
      ax.set_xlabel('cumulative uplink, MB (all clients, configured K)')
      ax.set_ylabel(metric.replace('_', ' '))
      ax.set_title(f"{s.task}: {'loss' if text else 'accuracy'} vs uplink")
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
