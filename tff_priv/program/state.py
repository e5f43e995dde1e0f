"""A training run's program state, and the state manager that skips a corrupt one."""

import collections
import errno
import json
import os
import re
import shutil
import sys
from typing import Optional

import numpy as np
import tensorflow_federated as tff

from tff_priv.program import layout

def program_state(
    train_state,
    round_num: int,
    ledger: str,
    best_accuracy: float,
    best_round: int,
    uplink_bytes: int,
    wall_seconds: float,
    sessions: list[dict],
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


def remove_temporary_states(root_dir: str) -> None:
  """Removes the `<state>_temp<n>` folders a failed or cut-short save left.

  TFF writes a state into such a folder and renames it when complete: one
  left behind holds no complete state.
  """
  if not os.path.isdir(root_dir):
    return
  for entry in os.listdir(root_dir):
    if re.fullmatch(rf'{re.escape(layout.CHECKPOINT_PREFIX)}\d+_temp\d+',
                    entry):
      shutil.rmtree(os.path.join(root_dir, entry), ignore_errors=True)


def sessions_from(value) -> list[dict]:
  """Sessions as dicts ({'start_round': r, ...}); older runs kept ints."""
  return [v if isinstance(v, dict) else {'start_round': int(v)}
          for v in value]


def save_error(error: BaseException, root_dir: str) -> BaseException:
  """A failed state save as one line: an `OSError` naming `root_dir`.

  TF reports a full disk as a `ResourceExhaustedError` of many lines. An
  interruption (KeyboardInterrupt, SystemExit) is returned as it is.
  """
  if not isinstance(error, Exception):
    return error
  text = str(error)
  full = 'No space left' in text
  reason = ('No space left on device' if full
            else (text.strip().splitlines() or [type(error).__name__])[-1][:200])
  return OSError(errno.ENOSPC if full else errno.EIO, reason, root_dir)


def text(value) -> str:
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
        root_dir, prefix=layout.CHECKPOINT_PREFIX, keep_total=keep_total,
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
      await super().save(program_state, version)
    except Exception as e:  # pylint: disable=broad-except
      remove_temporary_states(self._root_dir)
      raise save_error(e, self._root_dir) from None

  async def load_intact(self, template):
    """(state, version) of the newest state that loads; (None, None): none."""
    remove_temporary_states(self._root_dir)  # A save cut short.
    versions = await self.get_versions() or []
    for version in sorted(versions, reverse=True):
      try:
        return await self.load(version, template), version
      except Exception as e:  # pylint: disable=broad-except
        reason = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        path = self._get_path_for_version(version)
        os.replace(path, os.path.join(os.path.dirname(path),
                                      f'corrupt_{os.path.basename(path)}'))
        self.set_aside.append(version)
        print(
            f'tff_priv: checkpoint {version} is unreadable ({reason}); set '
            'aside, trying an older one',
            file=sys.stderr,
        )
    return None, None
