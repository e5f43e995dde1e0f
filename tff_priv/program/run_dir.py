"""A run directory's lock, its write-ahead ledger file and its secrets file."""

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
  """Releases every run directory lock this process holds (`lock`)."""
  while _held_locks:
    _held_locks.pop().close()  # Closing the file releases its flock.


# The fields every write-ahead record has (`training._Run.charge`). It holds
# no seed: the file may be published (the seeds are in `layout.SECRETS`).
_RECORD_FIELDS = ('round', 'privacy')


def read_privacy(root_output_dir: str) -> Optional[dict[str, Any]]:
  """The write-ahead ledgers (`layout.PRIVACY`), None before the first round.

  Raises:
    ConfigError: the file is damaged (not JSON, or not a record of this
      program): one line; the file is left as it is (a run never writes
      over a ledger it cannot read, which would drop its charges).
  """
  path = layout.path(root_output_dir, layout.PRIVACY)
  if not os.path.exists(path):
    return None
  try:
    with open(path) as f:
      record = json.load(f)
    missing = [k for k in _RECORD_FIELDS if k not in record]
    if missing:
      raise ValueError(f'no {", ".join(missing)}')
  except (ValueError, TypeError, UnicodeDecodeError) as e:
    reason = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
    raise config_lib.ConfigError(
        f'{path} is damaged ({reason}); it holds the charges of every '
        'released round and is never overwritten: restore it (e.g. from a '
        'backup) or use another root_output_dir'
    ) from None
  return record


def set_aside(path: str, what: str) -> Optional[str]:
  """Renames `path` to the first free `<path>.<what>.<n>`; None if absent."""
  if not os.path.exists(path):
    return None
  n = 1
  while os.path.exists(f'{path}.{what}.{n}'):
    n += 1
  os.replace(path, f'{path}.{what}.{n}')
  return f'{path}.{what}.{n}'


def write_privacy(root_output_dir: str, record: dict[str, Any]) -> None:
  """Writes the write-ahead ledgers durably: on disk before this returns."""
  files.write_json(
      layout.path(root_output_dir, layout.PRIVACY), record, durable=True
  )


def write_pending(root_output_dir: str, record: dict[str, Any]) -> None:
  """Writes a checkpointed round's rows before its release (durably)."""
  files.write_json(
      layout.path(root_output_dir, layout.PENDING_RELEASE), record, durable=True
  )


def take_pending(root_output_dir: str) -> Optional[dict[str, Any]]:
  """The rows `write_pending` left (None if none or unreadable), removed."""
  path = layout.path(root_output_dir, layout.PENDING_RELEASE)
  if not os.path.exists(path):
    return None
  try:
    with open(path) as f:
      record = json.load(f)
  except (ValueError, UnicodeDecodeError):
    record = None  # Written atomically: only a damaged disk gets here.
  os.remove(path)
  return record


def write_secrets(root_output_dir: str, secrets: dict[str, Any]) -> None:
  """Writes the run's seeds, readable by the owner alone, durably."""
  files.write_json(
      layout.path(root_output_dir, layout.SECRETS),
      secrets,
      durable=True,
      owner_only=True,
  )


def read_secrets(root_output_dir: str) -> Optional[dict[str, Any]]:
  """The seeds `write_secrets` wrote (None: no such file, or unreadable)."""
  try:
    with open(layout.path(root_output_dir, layout.SECRETS)) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def check_sampling_seed(root_output_dir: str, sampling_seed: Optional[int]):
  """Refuses a given sampling_seed other than the one the run started with.

  Raises:
    ConfigError: one line (the seed itself is not named).
  """
  started = (read_secrets(root_output_dir) or {}).get('sampling_seed')
  if sampling_seed is not None and started not in (None, sampling_seed):
    raise config_lib.ConfigError(
        f'{root_output_dir} holds a run of another sampling_seed (kept in '
        f'{layout.SECRETS}); use another root_output_dir or the same seed'
    )
