"""The training program: task, mechanism and ledger, on TFF's program layer.

`run(config, root_output_dir)` trains `config.mechanism` on `config.task` for
`config.total_rounds` rounds and writes the run directory described in
`layout.py`: each round is charged to the ledger, written ahead, before
anything of it is released, and a run killed at any point resumes from its
latest checkpoint with its ledger (a round's steps: `run`; the start and the
resume: `session`). The rest (canary audits, why not `train_model`, the
parts): docs/program.md
"""

import asyncio
import collections
import dataclasses
import functools
import json
import sys
import time
from typing import Any, Optional

from dp_accounting import dp_event
import numpy as np

from tff_priv import runtime
from tff_priv import validation
from tff_priv.accounting import guarantees
from tff_priv.auditing import canaries as canaries_lib
from tff_priv.learning import client_metrics as client_metrics_lib
from tff_priv.program import config as config_lib
from tff_priv.program import files
from tff_priv.program import hooks as hooks_lib
from tff_priv.program import layout
from tff_priv.program import model_io
from tff_priv.program import progress as progress_lib
from tff_priv.program import releases as releases_lib
from tff_priv.program import run_dir
from tff_priv.program import session as session_lib
from tff_priv.program import setup as setup_lib
from tff_priv.program import state as state_lib
from tff_priv.program import summary as summary_lib

# The configuration (defined in `config`; here for `training.RunConfig`).
RunConfig = config_lib.RunConfig
ConfigError = config_lib.ConfigError
prepare_output_dir = config_lib.prepare_output_dir
OPTIMIZERS = config_lib.OPTIMIZERS
TASK_OPTION_NAMES = config_lib.TASK_OPTION_NAMES
CLIENT_METRICS = config_lib.CLIENT_METRICS


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


class _Run:
  """One session of a run: its state between rounds, and one round.

  Args:
    config: the run's configuration.
    setup: what the run is built from (`setup.build`).
    session: where this session starts (`session.start_or_resume`).
    root: the run directory.
    manager: the checkpoints' state manager.
    releases: the run's release boundary.
    hooks: the session's hooks (`hooks.of_run`), in the order they are
      called.
  """

  def __init__(
      self,
      config: RunConfig,
      setup: setup_lib.Setup,
      session: session_lib.Session,
      root: str,
      manager: state_lib.IntactStateManager,
      releases: releases_lib.RunReleases,
      hooks: list[hooks_lib.RunHook],
  ):
    self.config, self.setup, self.root = config, setup, root
    self.state_manager, self.releases = manager, releases
    self.mechanism = session.mechanism
    self.process = session.mechanism.process
    self.privacy = session.privacy
    self.delta = setup.mechanism.config.delta
    self.private = setup.mechanism.guarantee is not None
    self.session_start = session.started
    self.redraw_until = session.redraw_until
    self.round_offset = session.round_offset
    self.hooks = hooks
    # Its cosines so far go in each checkpoint.
    self.canary_hook = next(
        (h for h in hooks if isinstance(h, hooks_lib.CanaryClients)), None
    )
    # What the last round and evaluation released (the progress bar's, the
    # summary's): set by `release`.
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
        self.mechanism.loop.aggregator_state(train_state),
        allow_initial_state=True,
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
    """What the checkpoint of `state` holds (`session.checkpoint`)."""
    cosines = None
    if self.canary_hook is not None:
      cosines = self.canary_hook.max_cosines
    return session_lib.checkpoint(
        state, self.privacy, self.session_start, cosines
    )

  def finished(self, state: state_lib.ProgramState) -> bool:
    return state.round_num >= self.config.total_rounds or (
        self.mechanism.loop.is_done is not None
        and self.mechanism.loop.is_done(state.train_state)
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
          self.mechanism.loop.preprocess(x, round_num, setup.client_index[c])
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
  setup = setup_lib.build(config, cache_dir, progress)
  prepare_output_dir(root_output_dir, config)
  run_dir.lock(root_output_dir)
  mechanism = setup.mechanism
  if setup.canary_kind == 'clients':
    warning = canaries_lib.small_count_warning(
        config.audit_canaries,
        mechanism.config.delta,
        getattr(mechanism.config, 'epsilon', None),
    )
    if warning:
      print(f'tff_priv: warning: {warning}', file=sys.stderr)
  manager = state_lib.IntactStateManager(
      layout.path(root_output_dir, layout.CHECKPOINTS), keep_checkpoints
  )
  session = await session_lib.start_or_resume(
      config, setup, root_output_dir, manager, restart_model
  )
  releases = releases_lib.RunReleases(
      root_output_dir, mechanism.guarantee is not None
  )
  await session_lib.release_pending(session, releases, root_output_dir)
  hooks = hooks_lib.of_run(config, setup, session.mechanism, session.state)
  this = _Run(config, setup, session, root_output_dir, manager, releases, hooks)
  state, start_round = session.state, session.start_round
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
