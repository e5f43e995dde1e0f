"""Files a run writes: JSON written atomically, and durably where it must be."""

import json
import math
import os
from typing import Any


def finite_or_str(x: Any) -> Any:
  """`x` with every non-finite float as a string (JSON has no inf / nan)."""
  if isinstance(x, float) and not math.isfinite(x):
    return str(x)
  if isinstance(x, dict):
    return {k: finite_or_str(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [finite_or_str(v) for v in x]
  return x


def write_json(
    path: str, value: Any, durable: bool = False, owner_only: bool = False
) -> None:
  """Writes `value` to `path` atomically: a reader sees the old or the new file.

  Args:
    path: the file.
    value: a JSON-serialisable structure (non-finite floats become strings).
    durable: the file and its directory entry are on disk before this
      returns (fsync), as a write-ahead record must be.
    owner_only: the file is readable by its owner alone (mode 0600) from
      its creation on.
  """
  tmp = f'{path}.tmp{os.getpid()}'
  mode = 0o600 if owner_only else 0o666  # 0666: the umask applies.
  try:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    if owner_only:
      os.fchmod(fd, 0o600)  # A leftover temporary file keeps its mode.
    with os.fdopen(fd, 'w') as f:
      json.dump(finite_or_str(value), f, indent=2, sort_keys=True)
      f.write('\n')
      if durable:
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException as e:
    # A full disk, an interruption: no partial file left behind (and `path`
    # keeps its previous content).
    if os.path.exists(tmp):
      os.remove(tmp)
    if isinstance(e, OSError) and e.filename == tmp:
      raise OSError(e.errno, e.strerror, path) from None
    raise
  if durable:
    fd = os.open(os.path.dirname(path) or '.', os.O_RDONLY)
    try:
      os.fsync(fd)
    finally:
      os.close(fd)
