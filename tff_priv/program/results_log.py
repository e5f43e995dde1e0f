"""Resumable experiment results: a JSON-lines file of records keyed by 'key'.

The experiment scripts append one record per finished run and, when started
again, skip the keys already there. A run killed while appending can leave a
last line cut short: `load` drops that line (with a warning) so the sweep
resumes and redoes that run; a line that does not parse anywhere else is
corruption, not a crash, and raises.
"""

import json
import os
from typing import Any

from absl import logging


def load(path: str) -> dict[str, dict[str, Any]]:
  """The records of `path` by their 'key' ({} when the file does not exist).

  Raises:
    ValueError: a line other than the last is not a JSON object with a 'key'.
  """
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    lines = [(n, line) for n, line in enumerate(f, 1) if line.strip()]
  records = {}
  for i, (number, line) in enumerate(lines):
    try:
      record = json.loads(line)
      key = record['key']
    except (ValueError, KeyError, TypeError) as e:
      if i == len(lines) - 1 and not line.endswith('\n'):
        logging.warning('%s:%d: dropping a last line cut short (%s)', path,
                        number, e)
        break
      raise ValueError(f'{path}:{number}: not a result record ({e})') from e
    records[key] = record
  return records


def append(path: str, record: dict[str, Any]) -> None:
  """Appends `record` (which must have a 'key') as one line, flushed to disk.

  A last line cut short by an earlier crash (no final newline; `load` drops
  it) is removed first, so the new record starts on a line of its own.
  """
  if 'key' not in record:
    raise ValueError("a result record needs a 'key'")
  line = (json.dumps(record) + '\n').encode()
  with open(path, 'ab+') as f:
    size = f.seek(0, os.SEEK_END)
    if size:
      f.seek(size - 1)
      if f.read(1) != b'\n':
        f.seek(0)
        text = f.read()
        f.truncate(text.rfind(b'\n') + 1)
    f.seek(0, os.SEEK_END)
    f.write(line)
    f.flush()
    os.fsync(f.fileno())
