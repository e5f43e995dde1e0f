"""The training program: task, mechanism and ledger, on TFF's program layer.

`run(config, root_output_dir)` trains `config.mechanism` on `config.task` for
`config.total_rounds` rounds and writes the run directory described in
`layout.py`: each round is charged to the ledger, written ahead, before
anything of it is released, and a run killed at any point resumes from its
latest checkpoint with its ledger (a round's steps and the resume: `run`).
Details (the canary audits, why not `train_model`, the parts): docs/program.md
"""

import asyncio
import collections
import dataclasses
import functools
import json
import secrets
import sys
import time
from typing import Any, Optional

from absl import logging
from dp_accounting import dp_event
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import runtime
from tff_priv import validation
from tff_priv.accounting import calibration
from tff_priv.accounting import guarantees
from tff_priv.auditing import canaries as canaries_lib
from tff_priv.auditing import canary_examples as canary_examples_lib
from tff_priv.learning import client_metrics as client_metrics_lib
from tff_priv.program import config as config_lib
from tff_priv.program import files
from tff_priv.program import hooks as hooks_lib
from tff_priv.program import layout
from tff_priv.program import model_io
from tff_priv.program import privacy as privacy_lib
from tff_priv.program import progress as progress_lib
from tff_priv.program import registry
from tff_priv.program import releases as releases_lib
from tff_priv.program import run_dir
from tff_priv.program import sampling as sampling_lib
from tff_priv.program import state as state_lib
from tff_priv.program import summary as summary_lib
import tff_priv_tasks as tasks

# The configuration (defined in `config`; here for `training.RunConfig`).
RunConfig = config_lib.RunConfig
ConfigError = config_lib.ConfigError
prepare_output_dir = config_lib.prepare_output_dir
OPTIMIZERS = config_lib.OPTIMIZERS
TASK_OPTION_NAMES = config_lib.TASK_OPTION_NAMES
CLIENT_METRICS = config_lib.CLIENT_METRICS

MAX_NOISE_INCREASE = calibration.MAX_NOISE_INCREASE
_EVAL_BATCH = 256


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
  """A round's clients' training metrics, where the process releases them."""
  try:
    train = metrics['client_work']['train']
  except (KeyError, TypeError):
    return {}
  return {k: float(v) for k, v in train.items()}


def run(
    config: RunConfig,
    root_output_dir: str,
    *,
    checkpoint_every: int = 1,
    keep_checkpoints: int = 3,
    progress: bool = True,
    cache_dir: Optional[str] = None,
    restart_model: bool = False,
) -> dict[str, Any]:
  """Runs (or resumes) the training program.

  Trains `config.mechanism` on `config.task` for `config.total_rounds` rounds
  and writes the run directory described in `layout.py`. Each round:

  1. draws its clients (`sampling.ClientSampling`, seeded by (sampling seed,
     round): the sampling seed is drawn from the operating system at the first
     start and kept only in the run's owner-only `secrets.json` and
     checkpoints, so the released outputs do not tell
     who was sampled, and a resumed run draws what the uninterrupted run would
     have; with smp's top_k mask the first `public_clients` clients are the
     server's public set D_pub and are never drawn);
  2. runs the mechanism's `LearningProcess.next` (a private round whose Poisson
     draw is empty runs on no clients: its release is the noise alone, as the
     accountant assumes);
  3. charges the round from the DpEvent its aggregation factory keeps in the
     state (`tff_priv.program.privacy.RunPrivacy`: the analyst's ledger under
     the round's sampling, and, for mechanisms private against the server, each
     participating client's server-view ledger, whose optional budget filter
     `server_budget` leaves out of the round any client it would take over the
     budget), and releases the round's metrics with the eps spent so far (the
     analyst's and the worst client's against the server, at the run's delta;
     with `client_metrics='dp'`, the round's event is composed with the noised
     client metrics' Gaussian, `DpClientMetrics.dp_event`) through the run's
     release boundary (`releases.RunReleases`: in a private run only the public
     columns reach the CSV, TensorBoard and the log);
  4. every `eval_every` rounds and at the last round, evaluates the global model
     on the task's centralized test set (`evaluation.CentralEvaluation`:
     `tff.learning.algorithms.build_fed_eval`'s metrics, in plain TF);
  5. every `checkpoint_every` rounds and at the last round, saves the program
     state (`state.ProgramState`: frozen, each step of the loop takes the
     round's and returns the next; one shape with or without canaries) with
     `tff.program.FileProgramStateManager`.

  The program state is (learning process state, round number, the ledgers as
  JSON, best test accuracy and its round, uplink bytes, wall time, the start
  round of every session). A run killed at any point and started again with the
  same output directory loads the latest checkpoint and continues from its round
  with its ledger: eps is never reset, and the rounds after the checkpoint are
  run (and charged) again from the checkpointed ledger, so nothing is counted
  twice. CSV rows of those rounds are replaced: a CSV release of round r first
  removes the rows of rounds >= r.

  Args:
    config: the run's configuration (validated here).
    root_output_dir: the run directory.
    checkpoint_every: save the program state every this many rounds.
    keep_checkpoints: program states kept on disk (the latest ones).
    progress: show a tqdm bar (only when stderr is a terminal).
    cache_dir: where cached data sets are read (online tasks only).
    restart_model: train a new model from round 0 in a directory whose
      ledger holds charges (needed when no checkpoint is readable; readable
      ones are set aside, unread): every earlier charge stays, and a target
      epsilon calibrates the new rounds to the budget left. Its rows follow
      the earlier ones in the CSVs, which keep them (`layout`).

  Sets the global Python, NumPy and TensorFlow seeds to `config.seed`
  (`tf.keras.utils.set_random_seed`) before building the model. Runs in the
  current TFF context (`tff_priv.runtime.set_context` installs one); a TFF
  worker it starts is stopped when the process ends, even in TFF's default
  context (`runtime.track_workers`).

  Returns:
    The summary (also written to summary.json).

  Raises:
    ConfigError: the configuration or the output directory is refused, before
      any round runs.
    ValueError: a bad argument of this function.
  """
  return run_until(
      config,
      root_output_dir,
      None,
      checkpoint_every=checkpoint_every,
      keep_checkpoints=keep_checkpoints,
      progress=progress,
      cache_dir=cache_dir,
      restart_model=restart_model,
  )


def run_until(
    config: RunConfig,
    root_output_dir: str,
    last_round: Optional[int],
    **options,
) -> Optional[dict[str, Any]]:
  """`run`, stopped after round `last_round` as if interrupted.

  The run stops after that round (and its checkpoint, if one is due), without
  a summary; running again resumes it. `last_round` None: to the end.

  Returns:
    The summary when the run ended, None when it stopped early.
  """
  try:
    config = config.validate()
  except ValueError as e:
    raise ConfigError(str(e)) from e
  options = {
      'checkpoint_every': 1,
      'keep_checkpoints': 3,
      'progress': True,
      'cache_dir': None,
      'restart_model': False,
      **options,
  }
  for name in ('checkpoint_every', 'keep_checkpoints'):
    options[name] = validation.int_at_least(name, options[name], 1)
  if last_round is not None:
    validation.int_at_least('last_round', last_round, 1)
  runtime.track_workers()
  try:
    return asyncio.run(_run(config, root_output_dir, last_round, **options))
  finally:
    run_dir.release_locks()


@dataclasses.dataclass
class _Setup:
  """What a run is built from (before its directory is touched)."""

  task: Any
  client_ids: list
  client_index: dict
  sampling: sampling_lib.ClientSampling
  mechanism: Any
  dp_metrics: Any
  canary_kind: Optional[str]
  test_data: tf.data.Dataset
  context: Any = None  # The mechanism's `BuildContext` (to rebuild it).


def _hold_out_public_clients(config: RunConfig, task, client_ids: list):
  """(public data or None, the clients that may be sampled)."""
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
  return public_data, client_ids


def _dp_metrics(config: RunConfig):
  """The 'dp' client metrics' aggregator, or None."""
  dp_metrics = None
  if config.client_metrics == 'dp':
    dp_metrics = client_metrics_lib.dp_client_metrics(
        config.client_metrics_noise_multiplier,
        config.clients_per_round,
        config.client_metrics_loss_bound,
    )
  return dp_metrics


def _client_examples(
    config: RunConfig, train_data, client_ids, client_index, canary_slots
):
  """`client_examples(c)`: |D_i| of one round, the examples c trains on."""

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

  return client_examples


def _setup(
    config: RunConfig, cache_dir: Optional[str], progress: bool = False
) -> _Setup:
  """The task, the client sampling and the mechanism, or a ConfigError."""
  tf.keras.utils.set_random_seed(config.seed)
  task = _build_task(config, cache_dir)
  train_data = task.datasets.train_data
  client_ids = list(train_data.client_ids)
  public_data, client_ids = _hold_out_public_clients(config, task, client_ids)
  client_index = {c: i for i, c in enumerate(train_data.client_ids)}
  test_x, test_y = _test_arrays(task, config)
  half = len(test_y) // 2
  # The server's half, bound now: test_x and test_y are the other half below.
  server_half = (test_x[:half], test_y[:half])
  dp_metrics = _dp_metrics(config)
  # What audit_canaries inserts: None, 'clients' or 'examples'.
  canary_kind = (
      registry.canary_kind(config.mechanism) if config.audit_canaries else None
  )
  canary_slots = config.audit_canaries if canary_kind == 'examples' else 0
  client_examples = _client_examples(
      config, train_data, client_ids, client_index, canary_slots
  )
  try:
    sampling = sampling_lib.ClientSampling(
        registry.sampling_kind(config.mechanism, config.params),
        len(client_ids),
        config.clients_per_round,
    )
    context = registry.BuildContext(
        model_fn=task.model_fn,
        sampling=sampling,
        total_rounds=config.total_rounds,
        client_optimizer=config.client_optimizer,
        client_learning_rate=config.client_learning_rate,
        client_momentum=config.client_momentum,
        server_optimizer=config.server_optimizer,
        server_learning_rate=config.server_learning_rate,
        local_epochs=config.num_epochs,
        seed=config.seed,
        public_data=public_data,
        min_client_examples=functools.cache(
            lambda: min(client_examples(c) for c in client_ids)
        ),
        validation_data=(
            (lambda: server_half) if config.holdout_validation else None
        ),
        canary_clients=canary_kind == 'clients',
        mean_client_examples=functools.cache(
            lambda: float(np.mean([client_examples(c) for c in client_ids]))
        ),
        metrics_aggregator=dp_metrics,
    )
    progress_lib.building(progress, config.mechanism)
    mechanism = registry.build(config.mechanism, config.params, context)
    if config.client_lr_decay != 1.0 and mechanism.process.get_hparams is None:
      raise ValueError(
          f'client_lr_decay does not apply to mechanism {config.mechanism!r}'
          ' (its process has no learning-rate hyperparameter)'
      )
  except ValueError as e:
    raise ConfigError(str(e)) from e
  if config.holdout_validation:
    # The first half of the test set is the server's: test on the rest.
    test_x, test_y = test_x[half:], test_y[half:]
  if dp_metrics is not None:
    mechanism.caveats.append(
        "client_metrics='dp': every round also charges the noised client "
        f'metrics, GaussianDpEvent({dp_metrics.noise_multiplier:g}); a target '
        "epsilon calibrates the model's noise only, so the reported epsilon "
        'exceeds it'
    )
  return _Setup(
      # The mechanism's sampling: 'banded' with the bands it chose.
      task,
      client_ids,
      client_index,
      mechanism.sampling,
      mechanism,
      dp_metrics,
      canary_kind,
      tf.data.Dataset.from_tensor_slices((test_x, test_y)).batch(_EVAL_BATCH),
      context,
  )


def _same_stream(recorded, built) -> bool:
  """Equal keys and values, floats to 1e-9 relative.

  1e-9: below what the float32 noise they weight can show (the thread count
  may move the last bits of an optimised coefficient between sessions).
  """
  if not isinstance(recorded, dict) or not isinstance(built, dict):
    return recorded == built
  if recorded.keys() != built.keys():
    return False
  for key, value in recorded.items():
    other = built[key]
    if isinstance(value, (list, float)) and isinstance(other, (list, float)):
      a, b = np.asarray(value, np.float64), np.asarray(other, np.float64)
      if a.shape != b.shape or not np.allclose(a, b, rtol=1e-9, atol=0.0):
        return False
    elif value != other:
      return False
  return True


def _round_offset(sessions) -> int:
  """The `round_offset` of the last of `sessions` (0: none, or none given)."""
  return int(sessions[-1].get('round_offset', 0)) if sessions else 0


class _Run:
  """One session of a run: its state between rounds, and one round."""

  def __init__(
      self,
      config: RunConfig,
      setup: _Setup,
      root_output_dir: str,
      keep_checkpoints: int,
      restart_model: bool = False,
  ):
    self.config, self.setup, self.root = config, setup, root_output_dir
    self.restart_model = restart_model
    self.released_again = True  # Until a resume knows better.
    self.restart_stream = True
    # Rounds up to this one were released before this session and run
    # again: their clients are drawn with fresh coins (`sampling`).
    self.redraw_until = 0
    # The directory's round before this model's round 1: a restarted model's
    # rows go after the earlier ones (`layout`); the earlier model's, when
    # this session restarts it (its pending rows are released at its rounds).
    self.round_offset = 0
    self.earlier_offset = None
    self.mechanism = setup.mechanism
    self.process = setup.mechanism.process
    self.delta = self.mechanism.config.delta
    self.private = self.mechanism.guarantee is not None
    self.session_start = time.monotonic()
    self.state_manager = state_lib.IntactStateManager(
        layout.path(root_output_dir, layout.CHECKPOINTS), keep_checkpoints
    )
    try:
      self.privacy = privacy_lib.RunPrivacy.create(
          self.mechanism.guarantee,
          setup.sampling.ledger_sampling(),
          self.delta,
          config.server_budget,
          self.mechanism.adaptive_bounds,
      )
    except ValueError as e:
      raise ConfigError(str(e)) from e
    self.releases = releases_lib.RunReleases(root_output_dir, self.private)
    self.hooks: list[hooks_lib.RunHook] = [
        hooks_lib.Evaluation(
            setup.task.model_fn, setup.test_data, config.eval_every
        )
    ]
    self.canary_hook = None
    # The state this session starts from (`start_or_resume`); the loop then
    # carries each round's, which every step takes and returns.
    self.state: Optional[state_lib.ProgramState] = None
    self.last_accuracy = None
    self.last_eval_round = None
    self.test = None
    self.rows = None  # The last round's rows, as `releases.pending` keeps them.
    self.on_evaluation = lambda round_num: None  # The progress bar's.

  def next_event(self, train_state):
    """The event a round charges: the factory's, and the 'dp' metrics' one.

    The factory's event, composed with the 'dp' client metrics' Gaussian (the
    same sampled clients and adjacency).
    """
    if self.mechanism.guarantee is None:
      return None
    model_event = guarantees.extract_dp_event(
        self.mechanism.aggregator_state(train_state), allow_initial_state=True
    )
    if self.setup.dp_metrics is None:
      return model_event
    return dp_event.ComposedDpEvent(
        [model_event, self.setup.dp_metrics.dp_event]
    )

  def evaluate(
      self, state: state_lib.ProgramState, last: bool
  ) -> Optional[dict[str, float]]:
    """The hooks' metrics of `state`'s model on public data (None: none due)."""

    def read():  # Read by a hook that evaluates now.
      self.on_evaluation(state.round_num)
      return self.process.get_model_weights(state.train_state)

    weights = functools.cache(read)
    metrics = {}
    for hook in self.hooks:
      metrics.update(hook.evaluate(state.round_num, weights, last) or {})
    return metrics or None

  def checkpoint(self, state: state_lib.ProgramState):
    """What the checkpoint of `state` holds.

    Its ledger, the wall time of every session so far, the canaries' cosines
    so far.
    """
    return dataclasses.replace(
        state,
        ledger=self.privacy.to_json(),
        wall_seconds=state.wall_seconds + time.monotonic() - self.session_start,
        canary_max_cosines=(
            self.canary_hook.max_cosines
            if self.canary_hook is not None
            else state.canary_max_cosines
        ),
    ).structure()

  async def start_or_resume(self) -> int:
    """Loads the newest intact checkpoint, or starts; the start round.

    The write-ahead ledger file holds every charge ever made in this
    directory (`run_dir.read_privacy`): every start continues it, and
    nothing here removes a charge. A resumed run (or a model restarted with
    `restart_model`) whose ledger holds charges runs the rounds left at the
    noise that meets the target after them (`recalibrate`).
    """
    written = run_dir.read_privacy(self.root)  # One line if damaged.
    written_privacy = None
    if written is not None:
      written_privacy = privacy_lib.RunPrivacy.create(
          self.mechanism.guarantee,
          self.setup.sampling.ledger_sampling(),
          self.delta,
          self.config.server_budget,
          self.mechanism.adaptive_bounds,
      )
      self._restore(
          written_privacy, json.dumps(written['privacy']), layout.PRIVACY
      )
    charged = written_privacy.analyst.num_releases if written_privacy else 0
    self.state = state_lib.ProgramState(
        self.process.initialize(),
        sessions=tuple(
            state_lib.sessions_from(
                written.get('sessions', []) if written else []
            )
        ),
    )
    checkpoints = layout.path(self.root, layout.CHECKPOINTS)
    loaded, version = await self.state_manager.load_intact(
        *self.state.templates()
    )
    if loaded is not None:
      loaded = state_lib.ProgramState.from_structure(loaded, self.state)
      # The ledger file holds at least the checkpoint's charges, or it is
      # not this run's latest: refused either way (a new model too).
      self._check_ledger_file(loaded, version, written_privacy)
    if self.restart_model:
      # A new model: the old one's checkpoints are kept aside, unused.
      moved = run_dir.set_aside(checkpoints, 'before_restart')
      if moved:
        print(
            f'tff_priv: {checkpoints} set aside as {moved}; training a new '
            'model',
            file=sys.stderr,
        )
      self._rows_after(written)
      loaded, version = None, None
    if loaded is None:
      if charged and not self.restart_model:
        raise ConfigError(
            f'no readable checkpoint in {checkpoints}, but '
            f'{layout.path(self.root, layout.PRIVACY)} holds {charged} charged '
            f'rounds (the last one round {written["round"]}): put the '
            'checkpoints back, or run again with --restart_model to train a '
            'new model keeping every charge (the rounds left get the budget '
            'left)'
        )
      return await self._start(written_privacy)
    return self._resume(loaded, version, written, written_privacy)

  def _rows_after(self, written) -> None:
    """Sets `round_offset`: a restarted model's rows go after the earlier.

    After every row and charged round of the directory (`layout`).
    """
    last = 0
    if written is not None:
      self.earlier_offset = _round_offset(written.get('sessions', []))
      last = self.earlier_offset + written['round']
    self.round_offset = max(last, releases_lib.last_round(self.root))

  def _check_ledger_file(self, loaded, version, written_privacy) -> None:
    """Refuses a ledger file missing or older than checkpoint `version`'s."""
    in_checkpoint = privacy_lib.RunPrivacy.create(
        self.mechanism.guarantee,
        self.setup.sampling.ledger_sampling(),
        self.delta,
        self.config.server_budget,
        self.mechanism.adaptive_bounds,
    )
    self._restore(in_checkpoint, loaded.ledger, f'checkpoint {version}')
    charged = in_checkpoint.analyst.num_releases
    path = layout.path(self.root, layout.PRIVACY)
    if written_privacy is None and charged:
      raise ConfigError(
          f'{path} is missing, but checkpoint {version} holds {charged} '
          'charged rounds: restore the file (the charges after the '
          'checkpoint are only there) or use another root_output_dir'
      )
    if (
        written_privacy is not None
        and written_privacy.analyst.num_releases < charged
    ):
      raise ConfigError(
          f'{path} holds fewer charges ({written_privacy.analyst.num_releases}'
          f") than checkpoint {version} ({charged}): it is not this run's "
          'latest ledger; restore the latest one or use another '
          'root_output_dir'
      )

  @staticmethod
  def _restore(privacy, text: str, where: str) -> None:
    try:
      privacy.restore(text)
    except (ValueError, KeyError, TypeError) as e:
      raise ConfigError(
          f'the privacy ledger in {where} cannot be read ({e}); it is never '
          'overwritten: restore it or use another root_output_dir'
      ) from None

  async def _start(self, written_privacy) -> int:
    """A new model at round 0 (with the earlier charges, if any)."""
    sampling_seed = self.config.sampling_seed
    if sampling_seed is None:
      sampling_seed = secrets.randbits(62)
      # Independent of the data and of who is sampled: a released function
      # of the canaries is a post-processing of the released models.
      canary_seed = secrets.randbits(62)
    else:
      canary_seed = canaries_lib.seed_from(sampling_seed)
    if written_privacy is not None:
      self.privacy = written_privacy
      # A new model in a directory with charges: with a given sampling_seed
      # its rounds would repeat the earlier model's draws.
      self.redraw_until = self.config.total_rounds
    # Before the checkpoint that holds them: the owner's copy of the seeds
    # (no other file the run writes holds them; a restarted model's earlier
    # seeds stay in its checkpoints, set aside).
    run_dir.write_secrets(
        self.root,
        {
            'sampling_seed': sampling_seed,
            'canary_seed': canary_seed if self.config.audit_canaries else None,
        },
    )
    train_state = self.recalibrate(0, self.state.train_state)
    self.state = dataclasses.replace(
        self.state,
        train_state=train_state,
        sampling_seed=sampling_seed,
        sessions=self.state.sessions + (self.session(0),),
        **(
            {
                'canary_seed': canary_seed,
                'canary_max_cosines': np.full(
                    2 * self.config.audit_canaries, -1.0
                ),
            }
            if self.config.audit_canaries
            else {}
        ),
    )
    if self.restart_model:
      # The earlier model's files stay, kept aside (`layout`).
      for name in (layout.INITIAL_MODEL, layout.FINAL_MODEL, layout.SUMMARY):
        run_dir.set_aside(layout.path(self.root, name), 'before_restart')
    # The model every run of this seed starts from (public: a function of
    # the configuration), for comparisons with the final model.
    model_io.write_model(
        layout.path(self.root, layout.INITIAL_MODEL),
        self.process.get_model_weights(train_state),
    )
    self.add_hooks()
    await self.state_manager.save(self.checkpoint(self.state), version=0)
    return 0

  def _resume(self, loaded, version, written, written_privacy) -> int:
    """Continues from a loaded checkpoint, with every charge of the ledger."""
    start_round = loaded.round_num
    self._restore(self.privacy, loaded.ledger, f'checkpoint {version}')
    if written_privacy is not None:
      if written['round'] > start_round:
        # Released after this checkpoint, charged first (write-ahead): the
        # charges stay, and the rounds run again are charged again.
        logging.warning(
            'Rounds %d-%d were released after the last checkpoint: they stay '
            'charged, and run again (charged again)',
            start_round + 1,
            written['round'],
        )
      self.privacy = written_privacy
    ledger_sessions = self.state.sessions
    # The checkpoint's last session is of its model: its rows' offset.
    self.round_offset = _round_offset(loaded.sessions)
    # Its progress, seeds and wall time; its sessions those of the ledger
    # file (a later session may have charged rounds it never checkpointed),
    # or, for a run older than sessions in the ledger file, its own.
    self.state = dataclasses.replace(
        loaded, sessions=ledger_sessions or loaded.sessions
    )
    # Released after the checkpoint (and so released again now)? Not when
    # the one round after it waited for its checkpoint before its release
    # and that checkpoint is not on disk (nor set aside as unreadable).
    last = written['round'] if written_privacy is not None else start_round
    self.released_again = last > start_round and not (
        last == start_round + 1
        and written.get('released_after_its_checkpoint', False)
        and not self.state_manager.set_aside
    )
    self.redraw_until = last if self.released_again else 0
    self.restart_stream = self.released_again or self._stream_changed(
        self.state.sessions, loaded.sessions
    )
    state = self.recalibrate(start_round, loaded.train_state)
    if self.restart_stream and self.mechanism.on_resume is not None:
      # A stream with rounds released twice restarts (and is charged
      # again); otherwise it goes on from its checkpoint.
      state = self.mechanism.on_resume(state)
    self.state = dataclasses.replace(
        self.state,
        train_state=state,
        sessions=self.state.sessions + (self.session(start_round),),
    )
    logging.info(
        'Resuming %s from checkpoint %d (round %d, eps %.4g at delta %g)',
        self.root,
        version,
        start_round,
        self.privacy.analyst_epsilon(),
        self.delta,
    )
    self.add_hooks()
    return start_round

  def _stream_changed(self, ledger_sessions, checkpointed) -> bool:
    """Whether this build's stream may differ from the one it would continue.

    The coefficients are a function of the configuration, but computed
    again each session: a changed library or numerics would continue a
    stream with another strategy (BandMF's column norm, BLT's sensitivity
    no longer hold for it), so the stream restarts, charged. Compared with
    the last session of the ledger file and with the last session of the
    loaded checkpoint (whose stream the checkpointed state holds: a later
    session may have charged a round it never checkpointed); a session that
    recorded no stream (an older version) counts as a change (an
    over-count, never an under-count).
    """
    if self.mechanism.stream is None:
      return False
    changed = any(
        not sessions
        or not _same_stream(sessions[-1].get('stream'), self.mechanism.stream)
        for sessions in (ledger_sessions, checkpointed)
    )
    if changed:
      logging.warning(
          'The %s stream built now differs from (or was not recorded by) '
          'the session it would continue (%s): it restarts, charged as a new '
          'one',
          self.mechanism.name,
          layout.path(self.root, layout.PRIVACY),
      )
    return changed

  def _spent_epsilon(self) -> float:
    """The analyst's eps of the charges so far.

    For a run whose noise is chosen adaptively, their composition, not the
    filter's bound.
    """
    if self.privacy.adaptive is not None:
      return self.privacy.analyst.epsilon(self.delta)
    return self.privacy.analyst_epsilon()

  def session(self, start_round: int) -> dict[str, Any]:
    """What this session runs at: its start, its noise, a new model or not."""
    entry = {'start_round': start_round}
    noise = self.mechanism.resolved.get('noise_multiplier')
    if noise is not None:
      entry['noise_multiplier'] = noise
    if self.restart_model:
      entry['restarted_model'] = True
    if self.round_offset:
      entry['round_offset'] = self.round_offset
    if self.mechanism.stream is not None:
      entry['stream'] = self.mechanism.stream
    return entry

  def recalibrate(self, start_round: int, train_state):
    """The state to continue from, its mechanism noised for the budget left.

    With a target epsilon and charges in the ledger, the mechanism is built
    again for the rounds after `start_round` with what the ledger spent
    (`BuildContext.spent`), so that the whole run meets the target: the
    choice reads the ledger alone (public), never the data. Stops in one
    line (ConfigError) when the budget left is gone, or needs more than
    `MAX_NOISE_INCREASE` times the planned noise multiplier.
    """
    spent = calibration.Spent.of_ledger(self.privacy.analyst)
    if (
        not spent.releases
        or getattr(self.mechanism.config, 'epsilon', None) is None
        # No round left: nothing to calibrate (but a bound that counts the
        # rounds released, CRD's, is rebuilt below).
        or (
            start_round >= self.config.total_rounds
            and self.mechanism.adaptive_bounds is None
        )
    ):
      return train_state
    target = self.mechanism.config.epsilon
    context = dataclasses.replace(
        self.setup.context,
        start_round=start_round,
        spent=spent,
        restart_stream=self.restart_stream,
        # A stream this session continues was charged in an earlier one: at
        # the noise a session recorded, or (sessions of older versions) at
        # the planned one.
        noise_floor=max(
            [s.get('noise_multiplier') or 0.0 for s in self.state.sessions]
            + [self.mechanism.resolved.get('noise_multiplier') or 0.0]
        )
        if start_round
        else 0.0,
    )
    left = self.config.total_rounds - start_round
    try:
      rebuilt = registry.build(
          self.config.mechanism, self.config.params, context
      )
      planned = self.mechanism.resolved.get('noise_multiplier')
      noise = rebuilt.resolved.get('noise_multiplier')
      if planned and noise and noise > MAX_NOISE_INCREASE * planned:
        raise ValueError(
            f'noise multiplier {noise:.4g} needed, {noise / planned:.1f}x the '
            f'planned {planned:.4g} (at most {MAX_NOISE_INCREASE:g}x)'
        )
      if rebuilt.adopt_state is not None:
        train_state = rebuilt.adopt_state(
            train_state, rebuilt.process.initialize()
        )
    except ValueError as e:
      raise ConfigError(
          f'the budget left after the {spent.releases} rounds charged in '
          f'{layout.path(self.root, layout.PRIVACY)} (target epsilon '
          f'{target:g}, spent {self._spent_epsilon():.4g}) cannot '
          f'cover the {left} rounds left: {e}; the ledger is kept: use '
          'another root_output_dir for a new run'
      ) from None
    self.mechanism, self.process = rebuilt, rebuilt.process
    if rebuilt.adaptive_bounds is not None:
      # Bounds that count the rounds run again (CRD's server view).
      self.privacy.adaptive = rebuilt.adaptive_bounds
    print(
        f'tff_priv: {spent.releases} rounds charged so far (epsilon '
        f'{self._spent_epsilon():.4g} of the target {target:g}): the {left} '
        'rounds left run at '
        + (
            f'noise multiplier {noise:.4g} (planned {planned:.4g})'
            if planned and noise
            else 'the budget left'
        ),
        file=sys.stderr,
    )
    return train_state

  def add_hooks(self) -> None:
    """The canary audit of `audit_canaries`, if any (its seed is known)."""
    setup, n = self.setup, self.config.audit_canaries
    if setup.canary_kind == 'examples':
      # Record-level: canary examples in the clients' data (Steinke et al.).
      shape, num_classes, dtype = canary_examples_lib.model_shape(
          setup.task.model_fn
      )
      self.hooks.append(
          hooks_lib.CanaryExamples(
              canary_examples_lib.CanaryExamples(
                  self.state.canary_seed,
                  n,
                  len(setup.client_ids),
                  shape,
                  num_classes,
                  dtype,
              ),
              setup.task.model_fn,
              self.config.batch_size,
          )
      )
    elif setup.canary_kind == 'clients':
      # Inserted canaries join each round at the real clients' rate q = K / N
      # (Andrew et al.'s code samples them with the real clients); under
      # epoch sampling once per epoch, as a real client (DP-FTRL's trees and
      # BLT's streams hold for clients at most once per epoch).
      epoch = (
          setup.sampling.rounds_per_epoch
          if setup.sampling.kind == 'epoch'
          else None
      )
      self.canary_hook = hooks_lib.CanaryClients(
          canaries_lib.Canaries(
              self.state.canary_seed,
              n,
              self.mechanism.num_parameters,
              setup.sampling.rate,
              rounds_per_epoch=epoch,
          ),
          self.mechanism,
          lambda: setup.task.datasets.train_preprocess_fn(
              setup.task.datasets.train_data.create_tf_dataset_for_client(
                  setup.client_ids[0]
              )
          ),
          self.state.canary_max_cosines,
      )
      self.hooks.append(self.canary_hook)

  def finished(self, state: state_lib.ProgramState) -> bool:
    return state.round_num >= self.config.total_rounds or (
        self.mechanism.is_done is not None
        and self.mechanism.is_done(state.train_state)
    )

  def train(self, state: state_lib.ProgramState, planned_event):
    """Samples, admits and runs the round after `state`'s.

    Returns:
      (its state, the clients, the process's metrics, the round's event).
    """
    config, setup = self.config, self.setup
    round_num, train_state = state.round_num + 1, state.train_state
    if config.client_lr_decay != 1.0:
      # A public schedule: round t's rate is a function of t only.
      hparams = self.process.get_hparams(train_state)
      hparams['client_work']['learning_rate'] = np.float32(
          config.client_learning_rate
          * config.client_lr_decay ** (round_num - 1)
      )
      train_state = self.process.set_hparams(train_state, hparams)
    state = dataclasses.replace(
        state, round_num=round_num, train_state=train_state
    )
    # A round released before this session and run again draws anew: the
    # ledger charges it as an independent sampled release.
    attempt = (
        max(1, len(state.sessions) - 1) if round_num <= self.redraw_until else 0
    )
    chosen = self.privacy.admit(
        setup.sampling.sample(
            setup.client_ids, state.sampling_seed, round_num, attempt
        ),
        planned_event,
    )
    # A private round runs even when its Poisson draw is empty: it then
    # releases the noise alone, which is what the charged event describes
    # (skipping it would show that nobody was sampled, and the accountant
    # counts a noised release every round).
    if not (chosen or self.private):
      # A non-private run with nobody sampled: nothing runs.
      return state, chosen, None, planned_event
    data = []
    for c in chosen:
      x = setup.task.datasets.train_preprocess_fn(
          setup.task.datasets.train_data.create_tf_dataset_for_client(c)
      )
      for hook in self.hooks:
        x = hook.client_dataset(x, setup.client_index[c])
      data.append(
          self.mechanism.preprocess(x, round_num, setup.client_index[c])
      )
    # The model is read only for a hook that asks (the canary audit): each
    # read moves the whole learning state through TFF's executor.
    weights = functools.cache(
        lambda: self.process.get_model_weights(train_state)
    )
    for hook in self.hooks:
      data = hook.round_data(data, round_num)
      hook.before_round(weights)
    output = self.process.next(train_state, data)
    # The eager kernels of the round's client datasets would otherwise stay
    # cached for the life of the process.
    runtime.release_eager_kernels()
    state = dataclasses.replace(state, train_state=output.state)
    weights = functools.cache(
        lambda: self.process.get_model_weights(output.state)
    )
    for hook in self.hooks:
      hook.after_round(weights)
    return state, chosen, output.metrics, self.next_event(output.state)

  def charge(
      self, state: state_lib.ProgramState, chosen, event, saving: bool
  ) -> None:
    """Charges the round, then writes the ledgers durably (write-ahead).

    `saving`: the round's checkpoint is saved before anything of it is
    released (the record says so: a resume from the checkpoint before knows
    the round was not released).
    """
    self.privacy.charge(event, chosen)
    run_dir.write_privacy(
        self.root,
        {
            'round': state.round_num,
            'released_after_its_checkpoint': saving,
            'sessions': list(state.sessions),
            'privacy': json.loads(self.privacy.to_json()),
        },
    )

  def release(
      self,
      state: state_lib.ProgramState,
      chosen,
      metrics,
      round_start: float,
      done: bool,
  ):
    """The round's rows, and its evaluation when one is due: the releases.

    Evaluates now (the program state saved next holds its best accuracy).

    Returns:
      (its state, with the uplink and best accuracy so far; the release
      coroutines, not started: awaited after the checkpoint).
    """
    round_num = state.round_num
    eps = self.privacy.analyst_epsilon()
    server_eps = self.privacy.server_epsilon()
    # A private run: public quantities only (the configured K, the nominal
    # upload size); the release boundary drops anything else.
    clients = self.config.clients_per_round if self.private else len(chosen)
    round_bytes = clients * self.mechanism.upload_bytes_per_client
    state = dataclasses.replace(
        state, uplink_bytes=state.uplink_bytes + round_bytes
    )
    # Which session wrote it (public: how often the directory was started).
    session = len(state.sessions)
    csv_round = self.round_offset + round_num  # The directory's round.
    row = collections.OrderedDict(
        [(layout.SESSION, session), (layout.RDP_EPSILON, eps)]
    )
    if server_eps is not None:
      row[layout.SERVER_EPSILON] = server_eps
    row.update([('delta', self.delta), ('uplink_bytes', round_bytes)])
    if not self.private:
      # Who took part and how long it took depend on who was sampled.
      row.update(
          [
              ('clients', len(chosen)),
              ('round_seconds', time.monotonic() - round_start),
          ]
      )
    if metrics is not None:
      row.update(metrics)
    releases = [self.releases.train(row, csv_round)]
    eval_row = None
    evaluated = self.evaluate(state, done)
    if evaluated is not None:
      self.test = evaluated
      key = _accuracy_key(self.test)
      self.last_accuracy = self.test[key] if key else None
      self.last_eval_round = round_num
      if (
          self.last_accuracy is not None
          and self.last_accuracy > state.best_test_accuracy
      ):
        state = dataclasses.replace(
            state, best_test_accuracy=self.last_accuracy, best_round=round_num
        )
      eval_row = collections.OrderedDict(
          [
              (layout.SESSION, session),
              (layout.TEST_ACCURACY, self.last_accuracy),
              (layout.TEST_LOSS, self.test.get('loss')),
              (layout.RDP_EPSILON, eps),
              ('eval', self.test),
          ]
      )
      releases.append(self.releases.eval(eval_row, csv_round))
    self.rows = self.releases.pending(row, eval_row)
    return state, releases

  async def release_pending(self, start_round: int) -> None:
    """Releases the rows of the checkpoint resumed from, if still pending.

    If they were written before its release and a stop came before that
    release (released again, the same public values, if it came after).
    """
    pending = run_dir.take_pending(self.root)
    if pending is None:
      return
    if self.earlier_offset is not None:
      # The restarted model's last checkpointed round: kept, at its round.
      key = self.earlier_offset + pending['round']
    elif pending.get('round') == start_round:
      key = self.round_offset + start_round
    else:
      return  # A round run again now.
    releases = [self.releases.train(pending['train'], key)]
    if pending.get('eval') is not None:
      releases.append(self.releases.eval(pending['eval'], key))
    await asyncio.gather(*releases)

  def progress(self, bar, metrics) -> None:
    train = _train_metrics(metrics)
    accuracy_key = _accuracy_key(train)
    # Noised metrics are shown under their released names.
    prefix = 'dp_' if self.setup.dp_metrics is not None else ''
    bar.update(
        **{
            f'{prefix}loss': train.get(f'{prefix}loss'),
            f'{prefix}acc': train.get(accuracy_key) if accuracy_key else None,
            # The last evaluation, named by its round (not every round has one).
            f'test_acc@{self.last_eval_round}': self.last_accuracy,
            'eps': self.privacy.analyst_epsilon(),
            'server_eps': self.privacy.server_epsilon(),
        }
    )

  def finish(self, state: state_lib.ProgramState) -> dict[str, Any]:
    """Writes the final model and summary.json; the summary."""
    if self.test is None:  # Resumed after the last round: evaluate.
      self.test = self.evaluate(state, last=True) or {}
    key = _accuracy_key(self.test)
    final_weights = self.process.get_model_weights(state.train_state)
    empirical = None
    for hook in self.hooks:
      empirical = (
          hook.summary(
              layout.path(self.root, layout.INITIAL_MODEL),
              final_weights,
              self.delta,
              self.privacy.analyst_epsilon(),
          )
          or empirical
      )
    result = summary_lib.build(
        self.config,
        self.mechanism,
        self.privacy,
        final_metrics=self.test,
        final_accuracy=self.test[key] if key else None,
        best_accuracy=(
            state.best_test_accuracy
            if state.best_test_accuracy != state_lib.NO_ACCURACY
            else None
        ),
        best_round=self.round_offset + state.best_round,
        round_offset=self.round_offset,
        uplink_bytes=state.uplink_bytes,
        wall_seconds=state.wall_seconds + time.monotonic() - self.session_start,
        sessions=list(state.sessions),
        rounds_run=state.round_num,
        empirical=empirical,
    )
    model_io.write_model(
        layout.path(self.root, layout.FINAL_MODEL), final_weights
    )
    files.write_json(layout.path(self.root, layout.SUMMARY), result)
    return result


async def _run(
    config,
    root_output_dir,
    last_round,
    *,
    checkpoint_every,
    keep_checkpoints,
    progress,
    cache_dir,
    restart_model,
):
  """The loop: each round's steps, then the summary at the end.

  Sample -> admit -> process.next -> charge (write-ahead) -> release ->
  evaluate -> checkpoint, each round; the summary at the end.
  """
  # Refuse another run's directory first; create it only once the task and
  # the mechanism are known to build (a refused run leaves nothing behind).
  prepare_output_dir(root_output_dir, config, write=False)
  run_dir.check_sampling_seed(root_output_dir, config.sampling_seed)
  run_dir.read_privacy(root_output_dir)  # A damaged ledger: refused now.
  progress_lib.starting(progress, config.task, config.mechanism)
  setup = _setup(config, cache_dir, progress)
  prepare_output_dir(root_output_dir, config)
  run_dir.lock(root_output_dir)
  this = _Run(config, setup, root_output_dir, keep_checkpoints, restart_model)
  if setup.canary_kind == 'clients':
    warning = canaries_lib.small_count_warning(
        config.audit_canaries,
        this.delta,
        getattr(setup.mechanism.config, 'epsilon', None),
    )
    if warning:
      print(f'tff_priv: warning: {warning}', file=sys.stderr)
  start_round = await this.start_or_resume()
  state = this.state
  await this.release_pending(start_round)
  # The first round's event, as this session's process releases it (a
  # resumed state holds the last round's, of the noise planned before).
  planned_event = this.next_event(
      this.process.initialize() if start_round else state.train_state
  )
  bar = progress_lib.Progress(progress, config.total_rounds, start_round)
  this.on_evaluation = bar.evaluating
  bar.first_round()
  done = this.finished(state)
  try:
    while not done:
      round_start = time.monotonic()
      state, chosen, metrics, planned_event = this.train(state, planned_event)
      round_num = state.round_num
      done = this.finished(state)
      saving = round_num % checkpoint_every == 0 or done
      this.charge(state, chosen, planned_event, saving)
      state, releases = this.release(state, chosen, metrics, round_start, done)
      if saving:
        # Before the release: a round whose checkpoint is due is never
        # released without it, so a resume never releases it twice; its
        # rows wait on disk, for a resume from that checkpoint to release.
        run_dir.write_pending(this.root, {'round': round_num, **this.rows})
        await this.state_manager.save(this.checkpoint(state), version=round_num)
      await asyncio.gather(*releases)
      if saving:
        run_dir.take_pending(this.root)
      this.progress(bar, metrics)
      if last_round is not None and round_num >= last_round and not done:
        return None
  finally:
    bar.close()
  return this.finish(state)
