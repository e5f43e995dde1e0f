"""Test helpers that find and watch processes through /proc (Linux)."""

import os
import time


def stat(pid):
  """(ppid, start time) of a live, non-zombie process, else None."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      fields = f.read().rsplit(')', 1)[1].split()
  except (FileNotFoundError, ProcessLookupError):
    return None
  if fields[0] == 'Z':
    return None
  return int(fields[1]), int(fields[19])


def children(pid):
  """The set of (pid, start time) of every live process with parent `pid`."""
  found = set()
  for entry in os.listdir('/proc'):
    if entry.isdigit():
      entry_stat = stat(int(entry))
      if entry_stat is not None and entry_stat[0] == pid:
        found.add((int(entry), entry_stat[1]))
  return found


def alive(pid, start_time):
  """Whether the process (pid, start time) is still running.

  Processes are identified by (pid, start time), so a PID reused by the kernel
  after a process ended is never mistaken for it.
  """
  entry_stat = stat(pid)
  return entry_stat is not None and entry_stat[1] == start_time


def wait_gone(procs, seconds):
  """Waits up to `seconds` for `procs` to end; returns those still alive."""
  deadline = time.monotonic() + seconds
  while True:
    still = [p for p in procs if alive(*p)]
    if not still or time.monotonic() >= deadline:
      return still
    time.sleep(0.1)


def with_cmdline(fragment):
  r"""The (pid, start time) of each live process with `fragment` in its cmdline.

  `fragment` is bytes, the arguments separated by NUL bytes as in
  /proc/PID/cmdline: e.g. b'worker_binary\0--port=8000\0'.
  """
  found = []
  for entry in os.listdir('/proc'):
    if not entry.isdigit():
      continue
    try:
      with open(f'/proc/{entry}/cmdline', 'rb') as f:
        if fragment not in f.read():
          continue
    except OSError:  # Ended meanwhile.
      continue
    entry_stat = stat(int(entry))
    if entry_stat is not None:
      found.append((int(entry), entry_stat[1]))
  return found
