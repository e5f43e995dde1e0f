"""A run's program state, and the state manager that skips a corrupt one."""

import collections
import dataclasses
import errno
import json
import os
import re
import shutil
import sys
from typing import Any, Optional

import numpy as np
import tensorflow_federated as tff

from tff_priv.aggregators import correlated_noise
from tff_priv.program import layout

# `best_test_accuracy` before any evaluation.
NO_ACCURACY = -1.0
# The fields a checkpoint of an older version lacks when its run had no
# canaries (its state then had only the others): still loaded.
_CANARY_FIELDS = ('canary_seed', 'canary_max_cosines')
# A checkpoint's format, a leaf of its own. A checkpoint of tff_priv 0.2 has
# no such leaf and its stream states are OrderedDicts (their leaves in another
# order): TFF's load already refuses it for this version's structure (its
# structure check compares dict keys and named tuples' fields), and the format
# leaf makes sure of it whatever the leaf counts.
STATE_FORMAT = 'tff_priv.ProgramState/2'


def versioned(structure) -> collections.OrderedDict:
  """`structure` with its format: what a checkpoint of this version holds."""
  return collections.OrderedDict(format=STATE_FORMAT, state=structure)


def unversioned(loaded) -> Any:
  """The state of a checkpoint `versioned` wrote; TypeError: another format."""
  found = text(loaded['format'])
  if found != STATE_FORMAT:
    raise TypeError(f'a checkpoint of format {found!r}, not {STATE_FORMAT!r}')
  return loaded['state']


@dataclasses.dataclass(frozen=True)
class ProgramState:
  """A run's state between rounds: what each checkpoint holds.

  Frozen: a step of the training loop returns a new one
  (`dataclasses.replace`). The canary part is always there (a seed of 0 and
  no cosines in a run without canaries), so every checkpoint has one shape.

  Attributes:
    train_state: the learning process's state (the model, the aggregator's
      state with its DpEvent, the optimizers').
    round_num: the rounds run.
    ledger: the run's privacy ledgers (`RunPrivacy.to_json`) as of
      `round_num`.
    sampling_seed: the secret seed of the client draws.
    best_test_accuracy: the best released test accuracy (`NO_ACCURACY`:
      none yet) and `best_round`, its round.
    best_round: see above.
    uplink_bytes: the nominal bytes uploaded so far (public).
    wall_seconds: the wall time of the sessions before this one, and in a
      checkpoint of every session up to it.
    sessions: each session's entry ({'start_round': r, ...}).
    canary_seed: the secret seed of the audit's canaries (0: none).
    canary_max_cosines: each canary's largest cosine with a round's model
      delta so far ([2N]; empty without canaries).
  """

  train_state: Any
  round_num: int = 0
  ledger: str = ''
  sampling_seed: int = 0
  best_test_accuracy: float = NO_ACCURACY
  best_round: int = 0
  uplink_bytes: int = 0
  wall_seconds: float = 0.0
  sessions: tuple[dict, ...] = ()
  canary_seed: int = 0
  canary_max_cosines: np.ndarray = dataclasses.field(
      default_factory=lambda: np.zeros(0, np.float64)
  )

  def structure(self) -> collections.OrderedDict:
    """What `IntactStateManager` saves: one shape for every run, versioned."""
    return versioned(self._fields())

  def _fields(self) -> collections.OrderedDict:
    return collections.OrderedDict(
        train_state=self.train_state,
        round_num=np.int64(self.round_num),
        ledger=self.ledger,
        sampling_seed=np.int64(self.sampling_seed),
        best_test_accuracy=np.float64(self.best_test_accuracy),
        best_round=np.int64(self.best_round),
        uplink_bytes=np.int64(self.uplink_bytes),
        wall_seconds=np.float64(self.wall_seconds),
        sessions=json.dumps(list(self.sessions)),
        canary_seed=np.int64(self.canary_seed),
        canary_max_cosines=np.asarray(self.canary_max_cosines, np.float64),
    )

  def templates(self) -> tuple[Any, ...]:
    """The structures a checkpoint may have: this version's, then older ones.

    This version's is `versioned(structure())`; tff_priv 0.2's had no format
    and its stream states as OrderedDicts (`correlated_noise.legacy_form`),
    and an older one's lacked the canary part.
    """
    legacy = self._fields()
    legacy['train_state'] = correlated_noise.legacy_form(self.train_state)
    no_canary = collections.OrderedDict(
        (k, v) for k, v in legacy.items() if k not in _CANARY_FIELDS
    )
    return self.structure(), legacy, no_canary

  @classmethod
  def from_structure(
      cls, loaded, template: Optional['ProgramState'] = None
  ) -> 'ProgramState':
    """The state a checkpoint loaded with `template.templates()` holds.

    A checkpoint of tff_priv 0.2 needs the `template` it was loaded with.
    """
    if 'format' in loaded:
      loaded = unversioned(loaded)
    else:
      if template is None:
        raise ValueError(
            'a checkpoint without a format (tff_priv 0.2) needs the template '
            'it was loaded with: from_structure(loaded, template)'
        )
      loaded = collections.OrderedDict(loaded)
      loaded['train_state'] = correlated_noise.from_legacy_form(
          template.train_state, loaded['train_state']
      )
    return cls(
        train_state=loaded['train_state'],
        round_num=int(loaded['round_num']),
        ledger=text(loaded['ledger']),
        sampling_seed=int(loaded['sampling_seed']),
        best_test_accuracy=float(loaded['best_test_accuracy']),
        best_round=int(loaded['best_round']),
        uplink_bytes=int(loaded['uplink_bytes']),
        wall_seconds=float(loaded['wall_seconds']),
        sessions=tuple(sessions_from(json.loads(text(loaded['sessions'])))),
        canary_seed=int(loaded.get('canary_seed', 0)),
        canary_max_cosines=np.asarray(
            loaded.get('canary_max_cosines', np.zeros(0)), np.float64
        ),
    )


def remove_temporary_states(root_dir: str) -> None:
  """Removes the `<state>_temp<n>` folders a failed or cut-short save left.

  TFF writes a state into such a folder and renames it when complete: one
  left behind holds no complete state.
  """
  if not os.path.isdir(root_dir):
    return
  for entry in os.listdir(root_dir):
    if re.fullmatch(
        rf'{re.escape(layout.CHECKPOINT_PREFIX)}\d+_temp\d+', entry
    ):
      shutil.rmtree(os.path.join(root_dir, entry), ignore_errors=True)


def sessions_from(value) -> list[dict]:
  """Sessions as dicts ({'start_round': r, ...}); older runs kept ints."""
  return [v if isinstance(v, dict) else {'start_round': int(v)} for v in value]


def save_error(error: BaseException, root_dir: str) -> BaseException:
  """A failed state save as one line: an `OSError` naming `root_dir`.

  TF reports a full disk as a `ResourceExhaustedError` of many lines. An
  interruption (KeyboardInterrupt, SystemExit) is returned as it is.
  """
  if not isinstance(error, Exception):
    return error
  text = str(error)
  full = 'No space left' in text
  reason = (
      'No space left on device'
      if full
      else (text.strip().splitlines() or [type(error).__name__])[-1][:200]
  )
  return OSError(errno.ENOSPC if full else errno.EIO, reason, root_dir)


def text(value) -> str:
  """`value` as text: bytes decoded, anything else as `str` makes it."""
  return value.decode() if isinstance(value, bytes) else str(value)


class IntactStateManager(tff.program.FileProgramStateManager):
  """A `FileProgramStateManager` that resumes from the newest intact state.

  A checkpoint cut short or corrupted (a crash while saving, a bad disk) is
  moved aside (`corrupt_<name>`) with a one-line warning, so the run can save
  that round again; the write-ahead ledger still holds the charges of every
  round released after the checkpoint used.

  Args:
    root_dir: the checkpoint directory.
    keep_total: the newest states kept on disk.
  """

  def __init__(self, root_dir: str, keep_total: int):
    super().__init__(
        root_dir,
        prefix=layout.CHECKPOINT_PREFIX,
        keep_total=keep_total,
        keep_first=False,
    )
    self.set_aside = []  # The versions `load_intact` found unreadable.

  async def save(self, program_state, version: int) -> None:
    """Saves a state; a failed save leaves no temporary folder behind.

    Raises:
      OSError: the save failed (a full disk, an unwritable folder): one
        line naming the checkpoint folder (TF's own errors are many lines).
    """
    try:
      # The program state holds the seeds and the noise state: the owner's.
      os.makedirs(self._root_dir, mode=0o700, exist_ok=True)
      os.chmod(self._root_dir, 0o700)
      await super().save(program_state, version)
    except Exception as e:  # pylint: disable=broad-except
      remove_temporary_states(self._root_dir)
      raise save_error(e, self._root_dir) from None

  async def load_intact(self, *templates):
    """(state, version) of the newest state that loads; (None, None): none.

    A state loads with the first of `templates` whose structure it has.
    """
    remove_temporary_states(self._root_dir)  # A save cut short.
    versions = await self.get_versions() or []
    for version in sorted(versions, reverse=True):
      try:
        return await self._load_any(version, templates), version
      except Exception as e:  # pylint: disable=broad-except
        reason = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        path = self._get_path_for_version(version)
        os.replace(
            path,
            os.path.join(
                os.path.dirname(path), f'corrupt_{os.path.basename(path)}'
            ),
        )
        self.set_aside.append(version)
        print(
            f'tff_priv: checkpoint {version} is unreadable ({reason}); set '
            'aside, trying an older one',
            file=sys.stderr,
        )
    return None, None

  async def _load_any(self, version: int, templates):
    # The first template the checkpoint loads into. Not TFF's error text: a
    # shape mismatch fails the load (ValueError or TypeError) whatever its
    # message; a checkpoint that loads into none fails on the last with its
    # own error, and any other error (a bad file) at once.
    for template in templates[:-1]:
      try:
        return await self.load(version, template)
      except (ValueError, TypeError):
        pass
    return await self.load(version, templates[-1])
