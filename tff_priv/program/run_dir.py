"""A run directory's lock and its write-ahead ledger file (`layout.PRIVACY`)."""

import fcntl
import json
import os
from typing import Any, Optional

from tff_priv.program import config as config_lib
from tff_priv.program import files
from tff_priv.program import layout

_held_locks = []  # Open lock files of the runs in progress.


def lock(root_output_dir: str) -> None:
  """Takes the run directory's exclusive lock, or refuses in one line.

  Raises:
    ConfigError: another process holds it (its pid is named).
  """
  path = layout.path(root_output_dir, layout.LOCK)
  f = open(path, 'a+')  # pylint: disable=consider-using-with
  try:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError as e:
    f.seek(0)
    holder = f.read().strip() or 'unknown'
    f.close()
    raise config_lib.ConfigError(
        f'{root_output_dir} is in use by another run (pid {holder}); wait '
        'for it to end or use another root_output_dir'
    ) from e
  f.seek(0)
  f.truncate()
  f.write(f'{os.getpid()}\n')
  f.flush()
  _held_locks.append(f)


def release_locks() -> None:
  while _held_locks:
    _held_locks.pop().close()  # Closing the file releases its flock.


def read_privacy(root_output_dir: str) -> Optional[dict[str, Any]]:
  """The write-ahead ledgers (`layout.PRIVACY`), None before the first round."""
  path = layout.path(root_output_dir, layout.PRIVACY)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def write_privacy(root_output_dir: str, record: dict[str, Any]) -> None:
  """Writes the write-ahead ledgers durably: on disk before this returns."""
  files.write_json(
      layout.path(root_output_dir, layout.PRIVACY), record, durable=True
  )
