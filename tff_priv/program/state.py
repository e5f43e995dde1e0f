"""A training run's program state, and the state manager that skips a corrupt one."""

import collections
import json
import os
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

  async def load_intact(self, template):
    """(state, version) of the newest state that loads; (None, None): none."""
    versions = await self.get_versions() or []
    for version in sorted(versions, reverse=True):
      try:
        return await self.load(version, template), version
      except Exception as e:  # pylint: disable=broad-except
        reason = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        path = self._get_path_for_version(version)
        os.replace(path, os.path.join(os.path.dirname(path),
                                      f'corrupt_{os.path.basename(path)}'))
        print(
            f'tff_priv: checkpoint {version} is unreadable ({reason}); set '
            'aside, trying an older one',
            file=sys.stderr,
        )
    return None, None
