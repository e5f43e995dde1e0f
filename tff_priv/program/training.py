"""The training program: a task, a mechanism, the ledger, on TFF's program layer.

`run(config, root_output_dir)` trains `config.mechanism` on `config.task` for
`config.total_rounds` rounds and writes the run directory described in
`layout.py`. Each round:

1. draws its clients (`sampling.ClientSampling`, seeded by (sampling seed,
   round): the sampling seed is drawn from the operating system at the first
   start and kept in the checkpoints only, so the released outputs do not
   tell who was sampled, and a resumed run draws what the uninterrupted run
   would have; with smp's top_k
   mask the first `public_clients` clients are the server's public set D_pub
   and are never drawn);
2. runs the mechanism's `LearningProcess.next` (skipped when Poisson sampling
   drew nobody: nothing is released, and the ledger is still charged, which
   over-counts);
3. charges the round from the DpEvent its aggregation factory keeps in the
   state (`tff_priv.program.privacy.RunPrivacy`: the analyst's ledger under
   the round's sampling, and, for mechanisms private against the server, each
   participating client's server-view ledger, whose optional budget filter
   `server_budget` leaves out of the round any client it would take over the
   budget), and releases the round's metrics with the eps spent so far (the
   analyst's and the worst client's against the server, at the run's delta;
   with `client_metrics='dp'`, the round's event is composed with the noised
   client metrics' Gaussian, `DpClientMetrics.dp_event`)
   to `tff.program.CSVFileReleaseManager`,
   `tff.program.TensorBoardReleaseManager` and the log;
4. every `eval_every` rounds and at the last round, evaluates the global model
   on the task's centralized test set (`tff.learning.algorithms.build_fed_eval`);
5. every `checkpoint_every` rounds and at the last round, saves the program
   state with `tff.program.FileProgramStateManager`.

With `audit_canaries` = N > 0, canary clients whose model delta is a secret
random direction at the clip join each round that runs, drawn on top of the
real clients at their rate (`tff_priv.auditing.canaries`; the process is built
with `tff_priv.learning.canary_clients`); they never count as clients in the
sampling, the ledger, the budget filter, the uplink bytes or the CSV, and
evaluation is on the test set only. After each round the cosines of its model
delta with the 2N canaries update each canary's maximum (kept in the program
state with the canary seed); at the end summary.json's privacy['empirical']
holds the one-shot estimates (final model, all iterates) beside the
accounted eps. For a record-level mechanism (udp) N means N canary examples
instead (`tff_priv.auditing.canary_examples`, Steinke et al. 2023): each in
a fixed slot of one client's data, holding the canary with probability 1/2
(secret) and a blank record otherwise; at the end the canaries' loss drops
from the initial to the final model give privacy['empirical']'s lower bound
on the record-level eps.

The program state is (learning process state, round number, the ledgers as
JSON, best test accuracy and its round, uplink bytes, wall time, the start
round of every session). A run killed at any point and started again with the
same output directory loads the latest checkpoint and continues from its round
with its ledger: eps is never reset, and the rounds after the checkpoint are
run (and charged) again from the checkpointed ledger, so nothing is counted
twice. CSV rows of those rounds are replaced: a CSV release of round r first
removes the rows of rounds >= r.

Why not `tff.learning.programs.train_model`: its program state is fixed
(`ProgramState(state, round_number, next_evaluation_timestamp_seconds,
data_iterator)`) and cannot carry the ledger; its data source draws a fixed
number of clients uniformly, not Poisson sampling; it saves every round and
releases only `client_work/train` metrics; and it requires a
`LearningAlgorithmState`. This loop uses the same parts (program state
manager, release managers, a federated evaluation) around those needs.

Configuration and resume: `config.json` holds everything that determines the
run's result (`RunConfig.to_dict`). A restart whose configuration differs is
refused (`ConfigError`), as is an existing non-empty directory that is not a
run directory. Only `checkpoint_every`, `keep_checkpoints`, `progress` and
`cache_dir` (where data is read) may change between sessions; `total_rounds`
may not (with `epsilon` it sets the calibrated noise).
"""

import asyncio
import collections
import dataclasses
import fcntl
import json
import os
import secrets
import sys
import time
from typing import Any, Optional

from absl import logging
from dp_accounting import dp_event
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tqdm

import tasks
from tff_priv import runtime
from tff_priv import validation
from tff_priv.accounting import guarantees
from tff_priv.auditing import canaries as canaries_lib
from tff_priv.auditing import canary_examples as canary_examples_lib
from tff_priv.learning import canary_clients
from tff_priv.learning import client_metrics as client_metrics_lib
from tff_priv.program import files
from tff_priv.program import layout
from tff_priv.program import mechanisms
from tff_priv.program import privacy as privacy_lib
from tff_priv.program import sampling as sampling_lib

OPTIMIZERS = mechanisms.base.OPTIMIZERS
# Task options a run may set (the synthetic-split ones exist only for the
# tasks that have them; `tasks.get_task` rejects the others).
TASK_OPTION_NAMES = (
    'model', 'num_clients', 'partition', 'samples_per_client', 'max_clients',
    'test_fraction',
)
CLIENT_METRICS = ('none', 'dp')
_NO_ACCURACY = -1.0
_EVAL_BATCH = 256


class ConfigError(ValueError):
  """The run cannot start as configured (a usage error, not a failure)."""


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """Everything that determines a run's result.

  Attributes:
    task: one of `tasks.TASK_NAMES`.
    task_options: options of `tasks.get_task` (among TASK_OPTION_NAMES).
    batch_size: client batch size.
    num_epochs: local epochs per round.
    mechanism: one of `mechanisms.MECHANISMS`.
    params: the mechanism's parameters: a dict (None values are "not
      given") or its `Config`; `validate` makes the `Config`.
    clients_per_round: K: expected (Poisson) or exact (fixed) clients/round.
    total_rounds: T (CRD: the initial plan T_0).
    client_optimizer: 'sgd' or 'adam'.
    client_learning_rate: the clients' learning rate (UDP's eta).
    client_momentum: momentum of the clients' SGD (reset every round).
    client_lr_decay: round t's client learning rate is client_learning_rate
      x client_lr_decay^(t - 1) (a public schedule).
    max_client_examples: at most this many examples of each client
      (`ClientSpec.max_elements`).
    server_optimizer: 'sgd' or 'adam'.
    server_learning_rate: the server's learning rate.
    eval_every: evaluate the test set every this many rounds (and at the end).
    test_examples: evaluate on a fixed random subset (seeded by `seed`) of
      this many test examples; None: the whole test set.
    holdout_validation: the first half of the (subset of the) test set is
      the server's validation data (public to the server: CRD's trigger
      reads it), and the run is evaluated on the second half only.
    seed: seeds the data split, client sampling, model init, smp masks.
    server_budget: the budget filter's eps: a client whose eps against the
      server would exceed it is left out of the round (mechanisms private
      against the server only; None: no filter).
    sampling_seed: seeds who is sampled. None (default): drawn from the
      operating system at the first start and kept only in the checkpoints
      and the write-ahead ledger, so that the released outputs do not tell
      who was sampled, as the amplification by sampling assumes. Given: the
      draws are reproducible, and whoever reads config.json knows them.
    audit_canaries: N > 0: estimate eps empirically from this run (Andrew et
      al., ICLR 2024): N canary clients whose model delta is a secret random
      direction at the clip join the rounds at the real clients' rate, N more
      are held out, and summary.json's privacy['empirical'] gives the
      one-shot estimates for the final model and for all iterates
      (`tff_priv.auditing.canaries`). For udp (record-level): N canary
      examples and the one-run lower bound of Steinke et al.
      (`tff_priv.auditing.canary_examples`).
    client_metrics: 'none': a private run releases no client training
      metrics (the 'none' mechanism releases TFF's exact ones); 'dp': each
      round also releases the clients' mean loss (clipped to
      client_metrics_loss_bound) and accuracy and their number, summed and
      noised by the server (`tff_priv.learning.client_metrics.DpClientMetrics`)
      and charged to the ledger with the round's model (mechanisms whose
      server adds the noise only: dp_fedavg).
    client_metrics_noise_multiplier: z of the 'dp' client metrics: noise std
      z sqrt(3) on the sum of the clients' bounded (loss / bound, accuracy,
      1) vectors; each round is charged GaussianDpEvent(z) more.
    client_metrics_loss_bound: a client's mean loss is clipped to [0, this].
  """

  task: str = 'mnist5k'
  task_options: dict[str, Any] = dataclasses.field(default_factory=dict)
  batch_size: int = 10
  num_epochs: int = 1
  mechanism: str = 'dp_fedavg'
  params: Any = None
  clients_per_round: int = 10
  total_rounds: int = 20
  client_optimizer: str = 'sgd'
  client_learning_rate: float = 0.05
  client_momentum: Optional[float] = None
  client_lr_decay: float = 1.0
  max_client_examples: Optional[int] = None
  server_optimizer: str = 'sgd'
  server_learning_rate: float = 1.0
  eval_every: int = 5
  test_examples: Optional[int] = None
  holdout_validation: bool = False
  seed: int = 0
  server_budget: Optional[float] = None
  sampling_seed: Optional[int] = None
  audit_canaries: int = 0
  client_metrics: str = 'none'
  client_metrics_noise_multiplier: float = 1.0
  client_metrics_loss_bound: float = 5.0

  def validate(self) -> 'RunConfig':
    """Checks every field (without loading data); params resolved.

    Raises:
      ValueError: naming the bad field.
    """
    validation.one_of('task', self.task, tasks.TASK_NAMES)
    options = {k: v for k, v in self.task_options.items() if v is not None}
    known = tasks.task_options(self.task)
    for key in options:
      if key not in TASK_OPTION_NAMES or key not in known:
        raise ValueError(f'{key} does not apply to task {self.task!r}')
    if 'num_clients' in options:
      validation.int_at_least('num_clients', options['num_clients'], 1)
    validation.int_at_least('batch_size', self.batch_size, 1)
    validation.int_at_least('num_epochs', self.num_epochs, 1)
    validation.int_at_least('clients_per_round', self.clients_per_round, 1)
    validation.int_at_least('total_rounds', self.total_rounds, 1)
    validation.int_at_least('eval_every', self.eval_every, 1)
    validation.int_at_least('seed', self.seed, 0)
    if self.sampling_seed is not None:
      validation.int_at_least('sampling_seed', self.sampling_seed, 0)
    validation.one_of('client_optimizer', self.client_optimizer, OPTIMIZERS)
    validation.one_of('server_optimizer', self.server_optimizer, OPTIMIZERS)
    validation.positive('client_learning_rate', self.client_learning_rate)
    validation.positive('server_learning_rate', self.server_learning_rate)
    if self.client_momentum is not None:
      validation.non_negative('client_momentum', self.client_momentum)
      if self.client_optimizer != 'sgd':
        raise ValueError(
            "client_momentum applies only to client_optimizer='sgd'"
        )
    validation.half_open_unit('client_lr_decay', self.client_lr_decay)
    if self.max_client_examples is not None:
      validation.int_at_least(
          'max_client_examples', self.max_client_examples, 1
      )
    if self.test_examples is not None:
      validation.int_at_least('test_examples', self.test_examples, 1)
    if self.server_budget is not None:
      validation.positive('server_budget', self.server_budget)
    params = mechanisms.config(self.mechanism, self.params)
    if self.server_budget is not None and getattr(
        params, 'adaptive_noise', False
    ):
      raise ValueError(
          'server_budget does not apply with an adaptive noise schedule '
          '(crd_beta): the budget filter reads realised compositions, which '
          'are not guarantees when the noise follows earlier releases; drop '
          'one of them'
      )
    validation.int_at_least('audit_canaries', self.audit_canaries, 0)
    if self.audit_canaries:
      if self.audit_canaries < 2:
        raise ValueError(
            'audit_canaries must be 0 or >= 2 (a Gaussian is fit to the '
            f'canaries), got {self.audit_canaries}'
        )
      refusal = mechanisms.canary_refusal(self.mechanism, params)
      if refusal:
        raise ValueError(refusal)
    validation.one_of('client_metrics', self.client_metrics, CLIENT_METRICS)
    validation.positive(
        'client_metrics_noise_multiplier',
        self.client_metrics_noise_multiplier,
    )
    validation.positive(
        'client_metrics_loss_bound', self.client_metrics_loss_bound
    )
    if self.client_metrics == 'dp':
      refusal = mechanisms.client_metrics_refusal(self.mechanism)
      if refusal:
        raise ValueError(refusal)
      if self.audit_canaries:
        raise ValueError(
            "client_metrics='dp' does not apply with audit_canaries: a "
            "canary's metrics come from a real client's data"
        )
    return dataclasses.replace(self, task_options=options, params=params)

  def to_dict(self) -> dict[str, Any]:
    """JSON-ready, with the mechanism's parameters under 'params'."""
    out = dataclasses.asdict(dataclasses.replace(self, params=None))
    out['params'] = mechanisms.to_dict(
        mechanisms.config(self.mechanism, self.params)
    )
    return out


def _build_task(config: RunConfig, cache_dir: Optional[str]):
  spec = tff.simulation.baselines.ClientSpec(
      num_epochs=config.num_epochs,
      batch_size=config.batch_size,
      max_elements=config.max_client_examples,
  )
  kwargs = {}
  if cache_dir is not None and config.task not in tasks.OFFLINE_TASK_NAMES:
    kwargs['cache_dir'] = cache_dir
  try:
    return tasks.get_task(
        config.task,
        train_client_spec=spec,
        seed=config.seed,
        **kwargs,
        **config.task_options,
    )
  except (ValueError, TypeError, tasks.DatasetUnavailableError) as e:
    raise ConfigError(str(e)) from e


def _test_arrays(task, config: RunConfig) -> tuple[np.ndarray, np.ndarray]:
  """The centralized test set as arrays; a fixed random subset if asked."""
  batches = list(task.datasets.get_centralized_test_data().as_numpy_iterator())
  x, y = (np.concatenate(parts) for parts in zip(*batches))
  if config.test_examples is not None and config.test_examples < len(y):
    # The same subset for every run of the same seed.
    picked = np.sort(
        np.random.default_rng(config.seed).permutation(len(y))[
            : config.test_examples
        ]
    )
    x, y = x[picked], y[picked]
  return x, y


def _num_examples(dataset: tf.data.Dataset) -> int:
  n = int(dataset.cardinality())
  if n >= 0:
    return n
  return int(dataset.reduce(np.int64(0), lambda count, _: count + 1))


def _accuracy_key(metrics) -> Optional[str]:
  return client_metrics_lib.accuracy_key(metrics)


def _train_metrics(metrics) -> dict[str, float]:
  """The clients' training metrics of a round, where the process releases them."""
  try:
    train = metrics['client_work']['train']
  except (KeyError, TypeError):
    return {}
  return {k: float(v) for k, v in train.items()}


def _with_defaults(found: dict[str, Any]) -> dict[str, Any]:
  """A config.json's content with the defaults of later versions filled in.

  A field or a mechanism parameter whose default was added after the file
  was written (smp's `mask`, 'rand_k', the only mask before; RunConfig's
  `client_lr_decay`) is then not a difference: the run resumes. Adding a
  default that changes what an older run did would need a new
  `layout.CONFIG_FORMAT` instead.
  """
  found = {
      **{
          f.name: json.loads(json.dumps(files.finite_or_str(f.default)))
          for f in dataclasses.fields(RunConfig)
          if f.name not in found and f.default is not dataclasses.MISSING
          and f.name != 'params'
      },
      **found,
  }
  mechanism, params = found.get('mechanism'), found.get('params')
  if mechanism not in mechanisms.MECHANISMS or not isinstance(params, dict):
    return found
  try:
    resolved = mechanisms.config(mechanism, params)
  except (TypeError, ValueError):
    return found  # Reported as a difference by the caller.
  return {
      **found,
      'params': json.loads(
          json.dumps(files.finite_or_str(mechanisms.to_dict(resolved)))
      ),
  }


def prepare_output_dir(
    root_output_dir: str, config: RunConfig, write: bool = True
) -> bool:
  """Writes config.json in a new run directory, or checks it on a restart.

  Args:
    root_output_dir: the run directory.
    config: the validated configuration.
    write: False: only check (nothing is created).

  Returns:
    True when the directory already holds this configuration's run (resume).

  Raises:
    ConfigError: the directory holds another configuration, or is a non-empty
      directory that is not a run directory.
  """
  config_path = layout.path(root_output_dir, layout.CONFIG)
  wanted = {'format': layout.CONFIG_FORMAT, **config.to_dict()}
  wanted = json.loads(json.dumps(files.finite_or_str(wanted)))
  if os.path.exists(config_path):
    try:
      with open(config_path) as f:
        found = _with_defaults(json.load(f))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise ConfigError(
          f'{config_path} is not a readable run configuration ({e}); use '
          'another root_output_dir'
      ) from e
    if found != wanted:
      keys = sorted(
          k
          for k in set(found) | set(wanted)
          if found.get(k) != wanted.get(k)
      )
      differ = ', '.join(
          f'{k}: {found.get(k)!r} there, {wanted.get(k)!r} now' for k in keys
      )
      raise ConfigError(
          f'{root_output_dir} holds a run of another configuration ({differ});'
          ' use another root_output_dir or the same flags'
      )
    return True
  if os.path.isdir(root_output_dir) and os.listdir(root_output_dir):
    raise ConfigError(
        f'{root_output_dir} exists and is not a tff_priv run directory (no '
        f'{layout.CONFIG}); use an empty or new root_output_dir'
    )
  if write:
    os.makedirs(root_output_dir, exist_ok=True)
    files.write_json(config_path, wanted)
  return False


def _program_state(
    train_state,
    round_num: int,
    ledger: str,
    best_accuracy: float,
    best_round: int,
    uplink_bytes: int,
    wall_seconds: float,
    sessions: list[int],
    sampling_seed: int,
    canary: Optional[tuple[int, np.ndarray]] = None,
):
  """The program state; `canary`: (canary seed, each canary's largest cosine
  with a round's model delta so far), only in runs with canaries (the state
  of a run without them is unchanged)."""
  state = collections.OrderedDict(
      train_state=train_state,
      round_num=np.int64(round_num),
      ledger=ledger,
      sampling_seed=np.int64(sampling_seed),
      best_test_accuracy=np.float64(best_accuracy),
      best_round=np.int64(best_round),
      uplink_bytes=np.int64(uplink_bytes),
      wall_seconds=np.float64(wall_seconds),
      sessions=json.dumps(sessions),
  )
  if canary is not None:
    state['canary_seed'] = np.int64(canary[0])
    state['canary_max_cosines'] = np.asarray(canary[1], np.float64)
  return state


def _flat(weights) -> np.ndarray:
  """A model's trainable weights as one float64 vector (the update's order)."""
  return np.concatenate(
      [np.ravel(np.asarray(w, np.float64)) for w in weights.trainable]
  )


def _read_flat(path: str) -> np.ndarray:
  """`_flat` of a model written by `_write_model`."""
  with np.load(path) as arrays:
    count = sum(1 for k in arrays.files if k.startswith('trainable_'))
    return np.concatenate([
        np.ravel(arrays[f'trainable_{i}'].astype(np.float64))
        for i in range(count)
    ])


def _read_model(path: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
  """(trainable, non_trainable) arrays of a model written by `_write_model`."""
  with np.load(path) as arrays:
    return tuple(
        [arrays[f'{part}_{i}'] for i in range(
            sum(1 for k in arrays.files if k.startswith(f'{part}_'))
        )]
        for part in ('trainable', 'non_trainable')
    )


_LOCK = '.lock'
_held_locks = []  # Open lock files of the runs in progress.


def _lock(root_output_dir: str) -> None:
  """Takes the run directory's exclusive lock, or refuses in one line.

  Raises:
    ConfigError: another process holds it (its pid is named).
  """
  path = os.path.join(root_output_dir, _LOCK)
  f = open(path, 'a+')  # pylint: disable=consider-using-with
  try:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError as e:
    f.seek(0)
    holder = f.read().strip() or 'unknown'
    f.close()
    raise ConfigError(
        f'{root_output_dir} is in use by another run (pid {holder}); wait '
        'for it to end or use another root_output_dir'
    ) from e
  f.seek(0)
  f.truncate()
  f.write(f'{os.getpid()}\n')
  f.flush()
  _held_locks.append(f)


def _release_locks() -> None:
  while _held_locks:
    _held_locks.pop().close()  # Closing the file releases its flock.


async def _load_intact(state_manager, template, checkpoint_dir):
  """The newest checkpoint that loads; older ones when the newest are broken.

  A checkpoint cut short or corrupted (a crash while saving, a bad disk)
  is moved aside (`corrupt_<name>`) with a one-line warning, so the run can
  save that round again; the write-ahead ledger still holds the charges of
  every round released after the checkpoint used.
  """
  versions = await state_manager.get_versions() or []
  for version in sorted(versions, reverse=True):
    try:
      return await state_manager.load(version, template), version
    except Exception as e:  # pylint: disable=broad-except
      reason = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
      name = f'{layout.CHECKPOINT_PREFIX}{version}'
      os.replace(
          os.path.join(checkpoint_dir, name),
          os.path.join(checkpoint_dir, f'corrupt_{name}'),
      )
      print(
          f'tff_priv: checkpoint {version} is unreadable ({reason}); set '
          'aside, trying an older one',
          file=sys.stderr,
      )
  return None, None


def _read_privacy(root_output_dir: str) -> Optional[dict[str, Any]]:
  """The write-ahead ledgers (`layout.PRIVACY`), None before the first round."""
  path = layout.path(root_output_dir, layout.PRIVACY)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def _text(value) -> str:
  return value.decode() if isinstance(value, bytes) else str(value)


class _Progress:
  """Per-round progress on stderr: a tqdm bar on a terminal, else one line.

  Shows public values only (the round, eps, the test accuracy of the
  released model, and the clients' training metrics where a run releases
  them).
  """

  def __init__(self, enabled: bool, total: int, initial: int):
    self._tty = sys.stderr.isatty()
    self._enabled = enabled
    self._total = total
    self._round = initial
    self._bar = tqdm.tqdm(
        total=total,
        initial=initial,
        unit='round',
        disable=not (enabled and self._tty),
        file=sys.stderr,
        dynamic_ncols=True,
    )

  def update(self, **postfix):
    shown = {k: f'{v:.4g}' for k, v in postfix.items() if v is not None}
    self._round += 1
    if self._enabled and not self._tty:
      values = ' '.join(f'{k}={v}' for k, v in shown.items())
      print(f'round {self._round}/{self._total} {values}', file=sys.stderr,
            flush=True)
    self._bar.set_postfix(shown, refresh=False)
    self._bar.update(1)

  def close(self):
    self._bar.close()


def run(
    config: RunConfig,
    root_output_dir: str,
    *,
    checkpoint_every: int = 1,
    keep_checkpoints: int = 3,
    progress: bool = True,
    cache_dir: Optional[str] = None,
    stop_after_round: Optional[int] = None,
) -> Optional[dict[str, Any]]:
  """Runs (or resumes) the training program; see the module docstring.

  Args:
    config: the run's configuration (validated here).
    root_output_dir: the run directory.
    checkpoint_every: save the program state every this many rounds.
    keep_checkpoints: program states kept on disk (the latest ones).
    progress: show a tqdm bar (only when stderr is a terminal).
    cache_dir: where cached data sets are read (online tasks only).
    stop_after_round: stop after this round as if interrupted (after its
      checkpoint, if one is due), without a summary; None: run to the end.

  Sets the global Python, NumPy and TensorFlow seeds to `config.seed`
  (`tf.keras.utils.set_random_seed`) before building the model. Runs in the
  current TFF context (`tff_priv.runtime.set_context` installs one); a TFF
  worker it starts is stopped when the process ends, even in TFF's default
  context (`runtime.track_workers`).

  Returns:
    The summary (also written to summary.json), or None when stopped early.

  Raises:
    ConfigError: the configuration or the output directory is refused, before
      any round runs.
    ValueError: a bad argument of this function.
  """
  try:
    config = config.validate()
  except ValueError as e:
    raise ConfigError(str(e)) from e
  checkpoint_every = validation.int_at_least(
      'checkpoint_every', checkpoint_every, 1
  )
  keep_checkpoints = validation.int_at_least(
      'keep_checkpoints', keep_checkpoints, 1
  )
  if stop_after_round is not None:
    validation.int_at_least('stop_after_round', stop_after_round, 1)
  runtime.track_workers()
  try:
    return asyncio.run(
        _run(
            config,
            root_output_dir,
            checkpoint_every=checkpoint_every,
            keep_checkpoints=keep_checkpoints,
            progress=progress,
            cache_dir=cache_dir,
            stop_after_round=stop_after_round,
        )
    )
  finally:
    _release_locks()


async def _run(
    config,
    root_output_dir,
    *,
    checkpoint_every,
    keep_checkpoints,
    progress,
    cache_dir,
    stop_after_round,
):
  session_start = time.monotonic()
  # Refuse another run's directory first; create it only once the task and
  # the mechanism are known to build (a refused run leaves nothing behind).
  prepare_output_dir(root_output_dir, config, write=False)
  tf.keras.utils.set_random_seed(config.seed)
  task = _build_task(config, cache_dir)
  train_data = task.datasets.train_data
  client_ids = list(train_data.client_ids)
  public_data = None
  public_clients = getattr(config.params, 'public_clients', None)
  if public_clients:
    # smp top_k: the first public_clients clients are D_pub, never sampled.
    try:
      public_data, client_ids = tasks.hold_out_public_clients(
          task, public_clients
      )
    except ValueError as e:
      raise ConfigError(str(e)) from e
  try:
    client_sampling = sampling_lib.ClientSampling(
        mechanisms.sampling_kind(config.mechanism),
        len(client_ids),
        config.clients_per_round,
    )
  except ValueError as e:
    raise ConfigError(str(e)) from e
  client_index = {c: i for i, c in enumerate(train_data.client_ids)}
  test_x, test_y = _test_arrays(task, config)
  half = len(test_y) // 2
  dp_metrics = None
  if config.client_metrics == 'dp':
    dp_metrics = client_metrics_lib.dp_client_metrics(
        config.client_metrics_noise_multiplier,
        config.clients_per_round,
        config.client_metrics_loss_bound,
    )

  # What audit_canaries inserts: None, 'clients' or 'examples'.
  canary_kind = (
      mechanisms.canary_kind(config.mechanism) if config.audit_canaries else None
  )
  canary_slots = config.audit_canaries if canary_kind == 'examples' else 0

  def client_examples(c):
    """|D_i| of one round: the examples client c trains on.

    TFF's preprocessing repeats the client's examples num_epochs times and
    then takes at most max_client_examples (`ClientSpec.max_elements`); the
    canary examples' slots come after that and are part of the audited run's
    data.
    """
    n = _num_examples(train_data.create_tf_dataset_for_client(c))
    n *= config.num_epochs
    if config.max_client_examples is not None:
      n = min(n, config.max_client_examples)
    return n + canary_examples_lib.num_slots(
        canary_slots, len(client_ids), client_index[c]
    )

  def min_client_examples():
    return min(client_examples(c) for c in client_ids)

  try:
    context = mechanisms.BuildContext(
        model_fn=task.model_fn,
        sampling=client_sampling,
        total_rounds=config.total_rounds,
        client_optimizer=config.client_optimizer,
        client_learning_rate=config.client_learning_rate,
        client_momentum=config.client_momentum,
        server_optimizer=config.server_optimizer,
        server_learning_rate=config.server_learning_rate,
        local_epochs=config.num_epochs,
        seed=config.seed,
        public_data=public_data,
        min_client_examples=min_client_examples,
        validation_data=(
            (lambda: (test_x[:half], test_y[:half]))
            if config.holdout_validation else None
        ),
        canary_clients=canary_kind == 'clients',
        mean_client_examples=lambda: float(np.mean([
            client_examples(c) for c in client_ids
        ])),
        metrics_aggregator=dp_metrics,
    )
    mechanism = mechanisms.build(config.mechanism, config.params, context)
    process = mechanism.process
    if config.client_lr_decay != 1.0 and process.get_hparams is None:
      raise ValueError(
          f'client_lr_decay does not apply to mechanism {config.mechanism!r}'
          ' (its process has no learning-rate hyperparameter)'
      )
  except ValueError as e:
    raise ConfigError(str(e)) from e
  if config.holdout_validation:
    # The first half of the test set is the server's: test on the rest.
    test_x, test_y = test_x[half:], test_y[half:]
  test_data = tf.data.Dataset.from_tensor_slices((test_x, test_y)).batch(
      _EVAL_BATCH
  )
  if dp_metrics is not None:
    mechanism.caveats.append(
        "client_metrics='dp': every round also charges the noised client "
        f'metrics, GaussianDpEvent({dp_metrics.noise_multiplier:g}); a target '
        "epsilon calibrates the model's noise only, so the reported epsilon "
        'exceeds it'
    )
  prepare_output_dir(root_output_dir, config)
  _lock(root_output_dir)
  delta = mechanism.config.delta
  private = mechanism.guarantee is not None
  if canary_kind == 'clients':
    warning = canaries_lib.small_count_warning(
        config.audit_canaries, delta,
        getattr(mechanism.config, 'epsilon', None),
    )
    if warning:
      print(f'tff_priv: warning: {warning}', file=sys.stderr)

  evaluation = tff.learning.algorithms.build_fed_eval(task.model_fn)

  def evaluate(train_state) -> dict[str, float]:
    eval_state = evaluation.set_model_weights(
        evaluation.initialize(), process.get_model_weights(train_state)
    )
    output = evaluation.next(eval_state, [test_data])
    metrics = output.metrics['client_work']['eval']['current_round_metrics']
    return {k: float(v) for k, v in metrics.items()}

  # Program state: load the latest checkpoint, or start (and save round 0).
  state_manager = tff.program.FileProgramStateManager(
      layout.path(root_output_dir, layout.CHECKPOINTS),
      prefix=layout.CHECKPOINT_PREFIX,
      keep_total=keep_checkpoints,
      keep_first=False,
  )
  initial_state = process.initialize()
  try:
    privacy = privacy_lib.RunPrivacy.create(
        mechanism.guarantee,
        client_sampling.ledger_kwargs(),
        delta,
        config.server_budget,
        mechanism.adaptive_bounds,
    )
  except ValueError as e:
    raise ConfigError(str(e)) from e
  # The event a round will charge, known before it runs (the budget filter
  # needs it): the factory's event for its first round, then each round's;
  # with 'dp' client metrics, composed with their Gaussian (the same
  # sampled clients, the same adjacency: dp_fedavg's add-or-remove-one).
  def next_event(train_state):
    if mechanism.guarantee is None:
      return None
    model_event = guarantees.extract_dp_event(
        mechanism.aggregator_state(train_state), allow_initial_state=True
    )
    if dp_metrics is None:
      return model_event
    return dp_event.ComposedDpEvent([model_event, dp_metrics.dp_event])

  num_canaries = config.audit_canaries
  # Each canary's largest cosine with a round's model delta (the all-iterates
  # statistic), kept in the program state.
  no_cosines = np.full(2 * num_canaries, -1.0)
  template = _program_state(
      initial_state, 0, privacy.to_json(), _NO_ACCURACY, 0, 0, 0.0, [], 0,
      (0, no_cosines) if num_canaries else None,
  )
  loaded, version = await _load_intact(
      state_manager, template, layout.path(root_output_dir, layout.CHECKPOINTS)
  )
  if loaded is None:
    train_state, start_round = initial_state, 0
    best_accuracy, best_round, uplink_bytes, wall_before = _NO_ACCURACY, 0, 0, 0.0
    sessions = [0]
    sampling_seed = config.sampling_seed
    if sampling_seed is None:
      sampling_seed = secrets.randbits(62)
      # Independent of the data and of who is sampled: a released function
      # of the canaries is a post-processing of the released models.
      canary_seed = secrets.randbits(62)
    else:
      canary_seed = canaries_lib.seed_from(sampling_seed)
    max_cosines = no_cosines
    # The model every run of this seed starts from (public: a function of
    # the configuration), for comparisons with the final model.
    _write_model(
        layout.path(root_output_dir, layout.INITIAL_MODEL),
        process.get_model_weights(train_state),
    )
    await state_manager.save(
        _program_state(
            train_state, 0, privacy.to_json(), best_accuracy, 0, 0, 0.0,
            sessions, sampling_seed,
            (canary_seed, max_cosines) if num_canaries else None,
        ),
        version=0,
    )
  else:
    train_state = loaded['train_state']
    if mechanism.on_resume is not None:
      train_state = mechanism.on_resume(train_state)
    start_round = int(loaded['round_num'])
    sampling_seed = int(loaded['sampling_seed'])
    if num_canaries:
      canary_seed = int(loaded['canary_seed'])
      max_cosines = np.asarray(loaded['canary_max_cosines'], np.float64)
    privacy.restore(_text(loaded['ledger']))
    # Rounds released after this checkpoint were charged first (write-ahead):
    # their charges stay, and the rounds run again are charged again.
    written = _read_privacy(root_output_dir)
    if written is not None and written['round'] > start_round:
      privacy.restore(json.dumps(written['privacy']))
      logging.warning(
          'Rounds %d-%d were released after the last checkpoint: they stay '
          'charged, and run again (charged again)',
          start_round + 1, written['round'],
      )
    best_accuracy = float(loaded['best_test_accuracy'])
    best_round = int(loaded['best_round'])
    uplink_bytes = int(loaded['uplink_bytes'])
    wall_before = float(loaded['wall_seconds'])
    sessions = json.loads(_text(loaded['sessions'])) + [start_round]
    logging.info(
        'Resuming %s from checkpoint %d (round %d, eps %.4g at delta %g)',
        root_output_dir,
        version,
        start_round,
        privacy.analyst_epsilon(),
        delta,
    )
  planned_event = next_event(train_state)
  canaries = None
  canary_examples = None
  if canary_kind == 'examples':
    # Record-level: canary examples in the clients' data (Steinke et al.).
    shape, num_classes, dtype = canary_examples_lib.model_shape(task.model_fn)
    canary_examples = canary_examples_lib.CanaryExamples(
        canary_seed, num_canaries, len(client_ids), shape, num_classes, dtype
    )
  elif canary_kind == 'clients':
    # Inserted canaries join each round at the real clients' rate q = K / N
    # (Andrew et al.'s code samples them with the real clients).
    canaries = canaries_lib.Canaries(
        canary_seed, num_canaries, mechanism.num_parameters,
        client_sampling.rate,
    )

  train_csv = tff.program.CSVFileReleaseManager(
      layout.path(root_output_dir, layout.TRAIN_CSV), key_fieldname=layout.ROUND
  )
  eval_csv = tff.program.CSVFileReleaseManager(
      layout.path(root_output_dir, layout.EVAL_CSV), key_fieldname=layout.ROUND
  )
  tensorboard = tff.program.TensorBoardReleaseManager(
      layout.path(root_output_dir, layout.TENSORBOARD)
  )
  log = tff.program.LoggingReleaseManager()

  def finished(train_state, round_num) -> bool:
    return round_num >= config.total_rounds or (
        mechanism.is_done is not None and mechanism.is_done(train_state)
    )

  bar = _Progress(progress, config.total_rounds, start_round)
  last_accuracy = None
  round_num = start_round
  done = finished(train_state, start_round)
  try:
    while not done:
      round_num += 1
      round_start = time.monotonic()
      if config.client_lr_decay != 1.0:
        # A public schedule: round t's rate is a function of t only.
        hparams = process.get_hparams(train_state)
        hparams['client_work']['learning_rate'] = np.float32(
            config.client_learning_rate
            * config.client_lr_decay ** (round_num - 1)
        )
        train_state = process.set_hparams(train_state, hparams)
      chosen = privacy.admit(
          client_sampling.sample(client_ids, sampling_seed, round_num),
          planned_event,
      )
      # A private round runs even when its Poisson draw is empty: it then
      # releases the noise alone, which is what the charged event describes
      # (skipping it would show that nobody was sampled, and the accountant
      # counts a noised release every round).
      if chosen or private:
        data = []
        for c in chosen:
          x = task.datasets.train_preprocess_fn(
              train_data.create_tf_dataset_for_client(c)
          )
          if canary_examples is not None:
            # The client's canary slots (a canary or a blank: the same
            # |D_i| either way). The charge's sensitivity 2 eta C / min |D_i|
            # counts real examples only, an upper bound on the true one.
            x = canary_examples.add_to(x, client_index[c], config.batch_size)
          data.append(mechanism.preprocess(x, round_num, client_index[c]))
        if canaries is not None:
          # Drawn on top of the real clients (never instead of one), and
          # only in a round that runs: nothing here touches the sampling or
          # the ledger. A canary's TFF update is initial - trained weights:
          # -norm c_j moves the model towards +c_j.
          d = mechanism.num_parameters
          # A dataset of the clients' element type (a canary reads none).
          canary_template = data[0] if data else (
              task.datasets.train_preprocess_fn(
                  train_data.create_tf_dataset_for_client(client_ids[0])
              )
          )
          data = [canary_clients.real_client_data(x, d) for x in data] + [
              canary_clients.canary_client_data(
                  canary_template,
                  -mechanism.canary_norm * canaries.direction(j),
                  mechanism.canary_weight,
              )
              for j in canaries.participants(round_num)
          ]
          before = _flat(process.get_model_weights(train_state))
        output = process.next(train_state, data)
        train_state, metrics = output.state, output.metrics
        released = next_event(train_state)
        if canaries is not None:
          max_cosines = np.maximum(
              max_cosines,
              canaries.cosines(
                  _flat(process.get_model_weights(train_state)) - before
              ),
          )
      else:
        # A non-private run with nobody sampled: nothing runs.
        metrics, released = None, planned_event
      privacy.charge(released, chosen)
      planned_event = released
      done = finished(train_state, round_num)
      eps = privacy.analyst_epsilon()
      server_eps = privacy.server_epsilon()
      # Write-ahead: the charge is on disk before anything of the round is
      # released, so a crash at any point can only over-count.
      files.write_json(
          layout.path(root_output_dir, layout.PRIVACY),
          {
              'round': round_num,
              'sampling_seed': sampling_seed,
              **({'canary_seed': canary_seed} if canaries else {}),
              'privacy': json.loads(privacy.to_json()),
          },
          durable=True,
      )
      if private:
        # Public quantities only: the configured K, the nominal upload size.
        round_bytes = (
            config.clients_per_round * mechanism.upload_bytes_per_client
        )
      else:
        round_bytes = len(chosen) * mechanism.upload_bytes_per_client
      uplink_bytes += round_bytes
      row = collections.OrderedDict([(layout.RDP_EPSILON, eps)])
      if server_eps is not None:
        row[layout.SERVER_EPSILON] = server_eps
      row.update([('delta', delta), ('uplink_bytes', round_bytes)])
      if not private:
        # Who took part and how long it took depend on who was sampled.
        row.update([
            ('clients', len(chosen)),
            ('round_seconds', time.monotonic() - round_start),
        ])
      if metrics is not None:
        row.update(metrics)
      releases = [
          train_csv.release(row, key=round_num),
          tensorboard.release({'train': row}, key=round_num),
          log.release(row, key=round_num),
      ]

      if round_num % config.eval_every == 0 or done:
        test = evaluate(train_state)
        key = _accuracy_key(test)
        last_accuracy = test[key] if key else None
        if last_accuracy is not None and last_accuracy > best_accuracy:
          best_accuracy, best_round = last_accuracy, round_num
        eval_row = collections.OrderedDict([
            (layout.TEST_ACCURACY, last_accuracy),
            (layout.TEST_LOSS, test.get('loss')),
            (layout.RDP_EPSILON, eps),
            ('eval', test),
        ])
        releases += [
            eval_csv.release(eval_row, key=round_num),
            tensorboard.release({'eval': eval_row}, key=round_num),
        ]
      await asyncio.gather(*releases)

      if round_num % checkpoint_every == 0 or done:
        await state_manager.save(
            _program_state(
                train_state,
                round_num,
                privacy.to_json(),
                best_accuracy,
                best_round,
                uplink_bytes,
                wall_before + time.monotonic() - session_start,
                sessions,
                sampling_seed,
                (canary_seed, max_cosines) if canaries else None,
            ),
            version=round_num,
        )
      train = _train_metrics(metrics)
      train_accuracy_key = _accuracy_key(train)
      # Noised metrics are shown under their released names.
      prefix = 'dp_' if dp_metrics is not None else ''
      bar.update(**{
          f'{prefix}loss': train.get(f'{prefix}loss'),
          f'{prefix}acc': (
              train.get(train_accuracy_key) if train_accuracy_key else None
          ),
          'test_acc': last_accuracy,
          'eps': eps,
          'server_eps': server_eps,
      })
      if stop_after_round is not None and round_num >= stop_after_round:
        if not done:
          return None
  finally:
    bar.close()

  if round_num == start_round:  # Resumed after the last round: evaluate.
    test = evaluate(train_state)
  final = test  # The last round was evaluated.
  key = _accuracy_key(final)
  final_accuracy = final[key] if key else None
  wall_seconds = wall_before + time.monotonic() - session_start
  empirical = None
  if canary_examples is not None:
    final_weights = process.get_model_weights(train_state)
    empirical = canary_examples_lib.audit(
        canary_examples.scores(
            canary_examples_lib.model_loss_fn(task.model_fn),
            _read_model(layout.path(root_output_dir, layout.INITIAL_MODEL)),
            (list(final_weights.trainable), list(final_weights.non_trainable)),
        ),
        canary_examples.included,
        delta,
        privacy.analyst_epsilon(),
    )
  if canaries is not None:
    final_delta = _flat(process.get_model_weights(train_state)) - _read_flat(
        layout.path(root_output_dir, layout.INITIAL_MODEL)
    )
    empirical = canaries_lib.estimate(
        canaries.cosines(final_delta),
        max_cosines,
        num_canaries,
        delta,
        privacy.analyst_epsilon(),
    )
  summary = _summary(
      config,
      mechanism,
      privacy,
      final_metrics=final,
      final_accuracy=final_accuracy,
      best_accuracy=best_accuracy if best_accuracy != _NO_ACCURACY else None,
      best_round=best_round,
      uplink_bytes=uplink_bytes,
      wall_seconds=wall_seconds,
      sessions=sessions,
      rounds_run=round_num,
      empirical=empirical,
  )
  _write_model(
      layout.path(root_output_dir, layout.FINAL_MODEL),
      process.get_model_weights(train_state),
  )
  files.write_json(layout.path(root_output_dir, layout.SUMMARY), summary)
  return summary


def _write_model(path: str, weights) -> None:
  """A model's weights as `trainable_<i>` and `non_trainable_<i>` arrays."""
  arrays = {
      f'{part}_{i}': np.asarray(w)
      for part, values in (
          ('trainable', weights.trainable),
          ('non_trainable', weights.non_trainable),
      )
      for i, w in enumerate(values)
  }
  tmp = f'{path}.tmp{os.getpid()}.npz'
  np.savez(tmp, **arrays)
  os.replace(tmp, path)


def _summary(
    config,
    mechanism,
    privacy,
    *,
    final_metrics,
    final_accuracy,
    best_accuracy,
    best_round,
    uplink_bytes,
    wall_seconds,
    sessions,
    rounds_run,
    empirical=None,
):
  """The run's summary (see `run`); `empirical`: the canary estimate."""
  delta = mechanism.config.delta
  ledger = privacy.analyst
  accounted = ledger.report(delta)
  closed_form = mechanism.closed_form
  analyst_eps = privacy.analyst_epsilon()
  return {
      'format': layout.SUMMARY_FORMAT,
      'task': config.task,
      'task_options': config.task_options,
      'mechanism': config.mechanism,
      'parameters': {
          **config.to_dict(),
          'resolved': mechanism.resolved,
          'num_parameters': mechanism.num_parameters,
      },
      'sampling': mechanism.sampling.describe(),
      'rounds': config.total_rounds,
      'rounds_run': rounds_run,
      'final_test_accuracy': final_accuracy,
      'best_test_accuracy': best_accuracy,
      'best_round': best_round if best_accuracy is not None else None,
      'final_test_metrics': final_metrics,
      'privacy': {
          'delta': delta,
          'guarantees': privacy.report(),
          # The analyst's figure (the first guarantee's epsilon).
          'rdp_epsilon': analyst_eps,
          'analyst_ledger': {
              'meaning': (
                  'the composition of the events this run released; '
                  + ('its events were chosen adaptively, so this is an '
                     'ex-post diagnostic, not a guarantee (the guarantee is '
                     'rdp_epsilon above)' if privacy.adaptive is not None
                     else 'its events were fixed before the run, so this is '
                     'the guarantee (before the server-view minimum)')
              ),
              'rdp_epsilon': accounted['rdp_epsilon'],
              'pld_epsilon': accounted['pld_epsilon'],
              'accountants': {
                  'rdp_epsilon': 'dp_accounting RdpAccountant',
                  'pld_epsilon': 'dp_accounting PLDAccountant',
              },
              'unsupported': accounted['unsupported'],
              'neighboring_relation': accounted['neighboring_relation'],
              'releases': accounted['releases'],
          },
          'closed_form': closed_form,
          'caveats': mechanism.caveats + (
              ['sampling_seed was given: whoever reads config.json can '
               'recompute who was sampled in every round, and the amplified '
               'analyst figure assumes that unknown']
              if config.sampling_seed is not None and mechanism.guarantee
              and mechanism.sampling.ledger_kwargs()  # Amplified at all.
              else []
          ),
          'ledger': json.loads(ledger.to_json()),
          **({'empirical': empirical} if empirical is not None else {}),
      },
      'uplink_bytes': {
          'total': uplink_bytes,
          'per_client_per_round': mechanism.upload_bytes_per_client,
      },
      # How long the rounds took depends on the sampled clients' data: only
      # a non-private run writes it.
      'wall_time_seconds': (
          wall_seconds if mechanism.guarantee is None else None
      ),
      'sessions': [{'start_round': r} for r in sessions],
  }
