"""A session of a run: `start_or_resume` starts it or resumes a checkpoint."""

import asyncio
import dataclasses
import json
import secrets
import sys
import time
from typing import Any, Optional

from absl import logging
import numpy as np

from tff_priv.accounting import calibration
from tff_priv.auditing import canaries as canaries_lib
from tff_priv.program import config as config_lib
from tff_priv.program import layout
from tff_priv.program import model_io
from tff_priv.program import privacy as privacy_lib
from tff_priv.program import registry
from tff_priv.program import releases as releases_lib
from tff_priv.program import run_dir
from tff_priv.program import setup as setup_lib
from tff_priv.program import state as state_lib

ConfigError = config_lib.ConfigError
MAX_NOISE_INCREASE = calibration.MAX_NOISE_INCREASE


@dataclasses.dataclass(frozen=True)
class Session:
  """Where a session starts: its state, its mechanism, its ledger.

  Attributes:
    state: the `ProgramState` the session starts from (checkpointed).
    mechanism: the session's built mechanism (recalibrated to the budget left
      when the ledger holds charges).
    privacy: the run's `RunPrivacy`, holding every charge of the directory;
      the loop charges it.
    started: `time.monotonic()` when the session began (its wall time).
    redraw_until: rounds up to this one were released before this session
      and run again: their clients are drawn with fresh coins (`sampling`).
    round_offset: the directory's round before this model's round 1 (a
      restarted model's rows go after the earlier ones, `layout`).
    earlier_offset: when this session restarts the model, the earlier
      model's round offset (its pending rows are released at its rounds);
      None otherwise.
  """

  state: state_lib.ProgramState
  mechanism: Any
  privacy: privacy_lib.RunPrivacy
  started: float
  redraw_until: int = 0
  round_offset: int = 0
  earlier_offset: Optional[int] = None

  @property
  def start_round(self) -> int:
    return self.state.round_num


@dataclasses.dataclass(frozen=True)
class _Inputs:
  """What opening a session reads (the arguments of `start_or_resume`)."""

  config: config_lib.RunConfig
  setup: setup_lib.Setup
  root: str
  manager: state_lib.IntactStateManager
  restart_model: bool
  started: float


def new_privacy(config, mechanism) -> privacy_lib.RunPrivacy:
  """An empty `RunPrivacy` for `mechanism`, or a ConfigError."""
  try:
    return privacy_lib.RunPrivacy.create(
        mechanism.guarantee,
        mechanism.sampling.ledger_sampling(),
        mechanism.config.delta,
        config.server_budget,
        mechanism.adaptive_bounds,
    )
  except ValueError as e:
    raise ConfigError(str(e)) from e


def checkpoint(
    state: state_lib.ProgramState,
    privacy: privacy_lib.RunPrivacy,
    started: float,
    canary_max_cosines: Optional[np.ndarray] = None,
):
  """What the checkpoint of `state` holds (`ProgramState.structure`).

  Its ledger, the wall time of every session so far, the canaries' cosines so
  far (None: `state`'s).
  """
  if canary_max_cosines is None:
    canary_max_cosines = state.canary_max_cosines
  return dataclasses.replace(
      state,
      ledger=privacy.to_json(),
      wall_seconds=state.wall_seconds + time.monotonic() - started,
      canary_max_cosines=canary_max_cosines,
  ).structure()


async def start_or_resume(
    config: config_lib.RunConfig,
    setup: setup_lib.Setup,
    root: str,
    manager: state_lib.IntactStateManager,
    restart_model: bool = False,
) -> Session:
  """Loads the newest intact checkpoint of `root` and resumes, or starts.

  The write-ahead ledger file holds every charge ever made in this directory
  (`run_dir.read_privacy`): every start continues it, and nothing here
  removes a charge. A resumed run (or a model restarted with `restart_model`)
  whose ledger holds charges runs the rounds left at the noise that meets the
  target after them (`_recalibrate`).

  Raises:
    ConfigError: the directory cannot be continued (a damaged or older
      ledger, charges without a checkpoint, no budget left), in one line.
  """
  run = _Inputs(config, setup, root, manager, restart_model, time.monotonic())
  mechanism = setup.mechanism
  written = run_dir.read_privacy(root)  # One line if damaged.
  written_privacy = None
  if written is not None:
    written_privacy = new_privacy(config, mechanism)
    _restore(written_privacy, json.dumps(written['privacy']), layout.PRIVACY)
  charged = written_privacy.analyst.num_releases if written_privacy else 0
  initial = state_lib.ProgramState(
      mechanism.process.initialize(),
      sessions=tuple(
          state_lib.sessions_from(
              written.get('sessions', []) if written else []
          )
      ),
  )
  checkpoints = layout.path(root, layout.CHECKPOINTS)
  loaded, version = await manager.load_intact(*initial.templates())
  if loaded is not None:
    loaded = state_lib.ProgramState.from_structure(loaded, initial)
    # The ledger file holds at least the checkpoint's charges, or it is not
    # this run's latest: refused either way (a new model too).
    _check_ledger_file(run, loaded, version, written_privacy)
  if restart_model:
    # A new model: the old one's checkpoints are kept aside, unused.
    moved = run_dir.set_aside(checkpoints, 'before_restart')
    if moved:
      print(
          f'tff_priv: {checkpoints} set aside as {moved}; training a new model',
          file=sys.stderr,
      )
    return await _start(run, initial, written, written_privacy)
  if loaded is None:
    if charged:
      raise ConfigError(
          f'no readable checkpoint in {checkpoints}, but '
          f'{layout.path(root, layout.PRIVACY)} holds {charged} charged '
          f'rounds (the last one round {written["round"]}): put the '
          'checkpoints back, or run again with --restart_model to train a '
          'new model keeping every charge (the rounds left get the budget '
          'left)'
      )
    return await _start(run, initial, written, written_privacy)
  return _resume(run, initial, loaded, version, written, written_privacy)


def _round_offset(sessions) -> int:
  """The `round_offset` of the last of `sessions` (0: none, or none given)."""
  return int(sessions[-1].get('round_offset', 0)) if sessions else 0


def _check_ledger_file(run: _Inputs, loaded, version, written_privacy) -> None:
  """Refuses a ledger file missing or older than checkpoint `version`'s."""
  in_checkpoint = new_privacy(run.config, run.setup.mechanism)
  _restore(in_checkpoint, loaded.ledger, f'checkpoint {version}')
  charged = in_checkpoint.analyst.num_releases
  path = layout.path(run.root, layout.PRIVACY)
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


def _restore(privacy, text: str, where: str) -> None:
  try:
    privacy.restore(text)
  except (ValueError, KeyError, TypeError) as e:
    raise ConfigError(
        f'the privacy ledger in {where} cannot be read ({e}); it is never '
        'overwritten: restore it or use another root_output_dir'
    ) from None


async def _start(run: _Inputs, initial, written, written_privacy) -> Session:
  """A new model at round 0 (with the earlier charges, if any)."""
  config, root = run.config, run.root
  round_offset, earlier_offset = 0, None
  if run.restart_model:
    # A restarted model's rows go after every row and charged round of the
    # directory (`layout`).
    last = 0
    if written is not None:
      earlier_offset = _round_offset(written.get('sessions', []))
      last = earlier_offset + written['round']
    round_offset = max(last, releases_lib.last_round(root))
  sampling_seed = config.sampling_seed
  if sampling_seed is None:
    sampling_seed = secrets.randbits(62)
    # Independent of the data and of who is sampled: a released function of
    # the canaries is a post-processing of the released models.
    canary_seed = secrets.randbits(62)
  else:
    canary_seed = canaries_lib.seed_from(sampling_seed)
  privacy = written_privacy or new_privacy(config, run.setup.mechanism)
  # A new model in a directory with charges: with a given sampling_seed its
  # rounds would repeat the earlier model's draws.
  redraw_until = config.total_rounds if written_privacy is not None else 0
  # Before the checkpoint that holds them: the owner's copy of the seeds (no
  # other file the run writes holds them; a restarted model's earlier seeds
  # stay in its checkpoints, set aside).
  run_dir.write_secrets(
      root,
      {
          'sampling_seed': sampling_seed,
          'canary_seed': canary_seed if config.audit_canaries else None,
      },
  )
  mechanism, train_state = _recalibrate(
      run, privacy, 0, initial.train_state, initial.sessions, True
  )
  canaries = {}
  if config.audit_canaries:
    canaries = {
        'canary_seed': canary_seed,
        'canary_max_cosines': np.full(2 * config.audit_canaries, -1.0),
    }
  state = dataclasses.replace(
      initial,
      train_state=train_state,
      sampling_seed=sampling_seed,
      sessions=initial.sessions + (_entry(run, mechanism, 0, round_offset),),
      **canaries,
  )
  if run.restart_model:
    # The earlier model's files stay, kept aside (`layout`).
    for name in (layout.INITIAL_MODEL, layout.FINAL_MODEL, layout.SUMMARY):
      run_dir.set_aside(layout.path(root, name), 'before_restart')
  # The model every run of this seed starts from (public: a function of the
  # configuration), for comparisons with the final model.
  model_io.write_model(
      layout.path(root, layout.INITIAL_MODEL),
      mechanism.process.get_model_weights(train_state),
  )
  await run.manager.save(checkpoint(state, privacy, run.started), version=0)
  return Session(
      state,
      mechanism,
      privacy,
      run.started,
      redraw_until=redraw_until,
      round_offset=round_offset,
      earlier_offset=earlier_offset,
  )


def _resume(
    run: _Inputs, initial, loaded, version, written, written_privacy
) -> Session:
  """Continues from a loaded checkpoint, with every charge of the ledger."""
  start_round = loaded.round_num
  privacy = new_privacy(run.config, run.setup.mechanism)
  _restore(privacy, loaded.ledger, f'checkpoint {version}')
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
    privacy = written_privacy
  # The checkpoint's last session is of its model: its rows' offset.
  round_offset = _round_offset(loaded.sessions)
  # Its progress, seeds and wall time; its sessions those of the ledger file
  # (a later session may have charged rounds it never checkpointed), or, for
  # a run older than sessions in the ledger file, its own.
  sessions = initial.sessions or loaded.sessions
  # Released after the checkpoint (and so released again now)? Not when the
  # one round after it waited for its checkpoint before its release and that
  # checkpoint is not on disk (nor set aside as unreadable).
  last = written['round'] if written_privacy is not None else start_round
  released_again = last > start_round and not (
      last == start_round + 1
      and written.get('released_after_its_checkpoint', False)
      and not run.manager.set_aside
  )
  restart_stream = released_again or _stream_changed(
      run, sessions, loaded.sessions
  )
  mechanism, state = _recalibrate(
      run, privacy, start_round, loaded.train_state, sessions, restart_stream
  )
  if restart_stream and mechanism.loop.on_resume is not None:
    # A stream with rounds released twice restarts (and is charged again);
    # otherwise it goes on from its checkpoint.
    state = mechanism.loop.on_resume(state)
  entry = _entry(run, mechanism, start_round, round_offset)
  logging.info(
      'Resuming %s from checkpoint %d (round %d, eps %.4g at delta %g)',
      run.root,
      version,
      start_round,
      privacy.analyst_epsilon(),
      mechanism.config.delta,
  )
  return Session(
      dataclasses.replace(
          loaded, train_state=state, sessions=sessions + (entry,)
      ),
      mechanism,
      privacy,
      run.started,
      redraw_until=last if released_again else 0,
      round_offset=round_offset,
  )


def same_stream(recorded, built) -> bool:
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


def stream_changed(mechanism, ledger_sessions, checkpointed) -> bool:
  """Whether `mechanism`'s stream may differ from the one it would continue.

  The coefficients are a function of the configuration, but computed again
  each session: a changed library or numerics would continue a stream with
  another strategy (BandMF's column norm, BLT's sensitivity no longer hold
  for it), so the stream restarts, charged. Compared with the last session of
  the ledger file and with the last session of the loaded checkpoint (whose
  stream the checkpointed state holds: a later session may have charged a
  round it never checkpointed); a session that recorded no stream (an older
  version) counts as a change (an over-count, never an under-count).
  """
  if mechanism.stream is None:
    return False
  return any(
      not sessions
      or not same_stream(sessions[-1].get('stream'), mechanism.stream)
      for sessions in (ledger_sessions, checkpointed)
  )


def _stream_changed(run: _Inputs, ledger_sessions, checkpointed) -> bool:
  """`stream_changed` of the run's mechanism, with a warning when it has."""
  mechanism = run.setup.mechanism
  changed = stream_changed(mechanism, ledger_sessions, checkpointed)
  if changed:
    logging.warning(
        'The %s stream built now differs from (or was not recorded by) the '
        'session it would continue (%s): it restarts, charged as a new one',
        mechanism.name,
        layout.path(run.root, layout.PRIVACY),
    )
  return changed


def _entry(run: _Inputs, mechanism, start_round: int, round_offset: int):
  """A session's entry: its start, its noise, a new model or not, its stream."""
  entry = {'start_round': start_round}
  noise = mechanism.resolved.get('noise_multiplier')
  if noise is not None:
    entry['noise_multiplier'] = noise
  if run.restart_model:
    entry['restarted_model'] = True
  if round_offset:
    entry['round_offset'] = round_offset
  if mechanism.stream is not None:
    entry['stream'] = mechanism.stream
  return entry


def spent_epsilon(privacy: privacy_lib.RunPrivacy, delta: float) -> float:
  """The analyst's eps of the charges so far.

  For a run whose noise is chosen adaptively, their composition, not the
  filter's bound.
  """
  if privacy.adaptive is not None:
    return privacy.analyst.epsilon(delta)
  return privacy.analyst_epsilon()


def _recalibrate(
    run: _Inputs, privacy, start_round, train_state, sessions, restart_stream
):
  """(the mechanism, the state to continue from), noised for the budget left.

  With a target epsilon and charges in the ledger, the mechanism is built
  again for the rounds after `start_round` with what the ledger spent
  (`BuildContext.resumed`), so that the whole run meets the target: the choice
  reads the ledger alone (public), never the data. Stops in one line
  (ConfigError) when the budget left is gone, or needs more than
  `MAX_NOISE_INCREASE` times the planned noise multiplier.
  """
  config, mechanism = run.config, run.setup.mechanism
  spent = calibration.Spent.of_ledger(privacy.analyst)
  target = getattr(mechanism.config, 'epsilon', None)
  if (
      not spent.releases
      or target is None
      # No round left: nothing to calibrate (but a bound that counts the
      # rounds released, CRD's, is rebuilt below).
      or (
          start_round >= config.total_rounds
          and mechanism.adaptive_bounds is None
      )
  ):
    return mechanism, train_state
  planned = mechanism.resolved.get('noise_multiplier')
  context = dataclasses.replace(
      run.setup.context,
      resumed=registry.Resumed(
          start_round=start_round,
          spent=spent,
          restart_stream=restart_stream,
          # A stream this session continues was charged in an earlier one: at
          # the noise a session recorded, or (sessions of older versions) at
          # the planned one.
          noise_floor=max(
              [s.get('noise_multiplier') or 0.0 for s in sessions]
              + [planned or 0.0]
          )
          if start_round
          else 0.0,
      ),
  )
  left = config.total_rounds - start_round
  delta = mechanism.config.delta
  try:
    rebuilt = registry.build(config.mechanism, config.params, context)
    noise = rebuilt.resolved.get('noise_multiplier')
    if planned and noise and noise > MAX_NOISE_INCREASE * planned:
      raise ValueError(
          f'noise multiplier {noise:.4g} needed, {noise / planned:.1f}x the '
          f'planned {planned:.4g} (at most {MAX_NOISE_INCREASE:g}x)'
      )
    if rebuilt.loop.adopt_state is not None:
      train_state = rebuilt.loop.adopt_state(
          train_state, rebuilt.process.initialize()
      )
  except ValueError as e:
    raise ConfigError(
        f'the budget left after the {spent.releases} rounds charged in '
        f'{layout.path(run.root, layout.PRIVACY)} (target epsilon '
        f'{target:g}, spent {spent_epsilon(privacy, delta):.4g}) cannot '
        f'cover the {left} rounds left: {e}; the ledger is kept: use '
        'another root_output_dir for a new run'
    ) from None
  if rebuilt.adaptive_bounds is not None:
    # Bounds that count the rounds run again (CRD's server view).
    privacy.adaptive = rebuilt.adaptive_bounds
  print(
      f'tff_priv: {spent.releases} rounds charged so far (epsilon '
      f'{spent_epsilon(privacy, delta):.4g} of the target {target:g}): the '
      f'{left} rounds left run at '
      + (
          f'noise multiplier {noise:.4g} (planned {planned:.4g})'
          if planned and noise
          else 'the budget left'
      ),
      file=sys.stderr,
  )
  return rebuilt, train_state


async def release_pending(
    session: Session, releases: releases_lib.RunReleases, root: str
) -> None:
  """Releases the rows of the checkpoint resumed from, if still pending.

  If they were written before its release and a stop came before that
  release (released again, the same public values, if it came after).
  """
  pending = run_dir.take_pending(root)
  if pending is None:
    return
  if session.earlier_offset is not None:
    # The restarted model's last checkpointed round: kept, at its round.
    key = session.earlier_offset + pending['round']
  elif pending.get('round') == session.start_round:
    key = session.round_offset + session.start_round
  else:
    return  # A round run again now.
  rows = [releases.train(pending['train'], key)]
  if pending.get('eval') is not None:
    rows.append(releases.eval(pending['eval'], key))
  await asyncio.gather(*rows)
