"""Resident memory of a process and its descendants (TFF's workers), sampled.

A TFF simulation holds its data in two places: this Python process and the
worker processes TFF's execution context starts (its C++ executor), so
`tree_rss_mb` sums the resident set of a process and every live descendant;
`Sampler` keeps its peak per label, and `train_run` runs scripts/train.py and
reads the memory of it and its workers at every round, with the time to
round 1.
"""

import os
import re
import resource
import subprocess
import sys
import threading
import time
from typing import Any, Optional, Sequence


def _stat(pid: int):
  """(ppid, rss pages) of a live process, else None."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      fields = f.read().rsplit(')', 1)[1].split()
  except (FileNotFoundError, ProcessLookupError, PermissionError):
    return None
  return int(fields[1]), int(fields[21])


def tree_rss_mb(pid: Optional[int] = None) -> float:
  """MB resident in process `pid` (default: this one) and its descendants.

  Read from /proc (Linux). Where /proc is missing, the process's own peak
  (`resource.getrusage`) stands in, without its children.
  """
  pid = os.getpid() if pid is None else pid
  if not os.path.isdir('/proc'):
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
  stats = {}
  for entry in os.listdir('/proc'):
    if entry.isdigit():
      stat = _stat(int(entry))
      if stat is not None:
        stats[int(entry)] = stat
  tree, frontier = {pid}, [pid]
  while frontier:
    parent = frontier.pop()
    for child, (ppid, _) in stats.items():
      if ppid == parent and child not in tree:
        tree.add(child)
        frontier.append(child)
  pages = sum(stats[p][1] for p in tree if p in stats)
  return pages * os.sysconf('SC_PAGE_SIZE') / 2.0**20


class Sampler:
  """Peak `tree_rss_mb` per label, sampled in a thread.

  with Sampler() as sampler:
    sampler.label = 'fedavg'; run(); sampler.label = 'udp'; run()
  sampler.peaks  # {'fedavg': MB, 'udp': MB}

  It reads `tree_rss_mb` every `interval` seconds in a thread and keeps the
  largest value seen per label: the peak of what runs under that label,
  within one interval. A label's peak is the largest sample taken while it
  was set (and at least one sample is taken each time it is set).
  """

  def __init__(self, pid: Optional[int] = None, interval: float = 0.2):
    self._pid = pid
    self._interval = interval
    self._label = None
    self._lock = threading.Lock()
    self._stop = threading.Event()
    self._thread = None
    self.peaks: dict[str, float] = {}

  @property
  def label(self) -> Optional[str]:
    return self._label

  @label.setter
  def label(self, value: Optional[str]) -> None:
    self._label = value
    self.sample()

  def sample(self) -> None:
    """Reads the memory now and records it under the current label."""
    label = self._label
    if label is None:
      return
    mb = tree_rss_mb(self._pid)
    with self._lock:
      self.peaks[label] = max(self.peaks.get(label, 0.0), mb)

  def _loop(self):
    while not self._stop.wait(self._interval):
      self.sample()

  def __enter__(self) -> 'Sampler':
    self._thread = threading.Thread(target=self._loop, daemon=True)
    self._thread.start()
    return self

  def __exit__(self, *exc) -> None:
    self._stop.set()
    self._thread.join()


_ROUND_LINE = re.compile(r'^round (\d+)/(\d+)')


def train_run(
    train_args: Sequence[str],
    *,
    python: str = sys.executable,
    script: str = 'scripts/train.py',
) -> dict[str, Any]:
  """Runs train.py with `train_args` and watches it round by round.

  train.py writes one 'round N/T' line per round on stderr when stderr is
  not a terminal; at each, the resident memory of train.py and its TFF
  workers is read.

  Returns:
    dict(returncode, seconds_to_round_1 (from the start of the process),
    seconds (the whole run), rss_mb: {round: MB}, last_line: train.py's last
    stdout line).
  """
  start = time.monotonic()
  proc = subprocess.Popen(
      [python, script, *train_args, '--progress'],
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
  )
  rss, first, err = {}, None, []
  for line in proc.stderr:
    err.append(line)
    match = _ROUND_LINE.match(line)
    if match:
      rss[int(match.group(1))] = tree_rss_mb(proc.pid)
      if first is None:
        first = time.monotonic() - start
  out = proc.stdout.read()
  proc.wait()
  return dict(
      returncode=proc.returncode,
      seconds_to_round_1=first,
      seconds=time.monotonic() - start,
      rss_mb=rss,
      last_line=(out.strip().splitlines() or [''])[-1],
      stderr_tail=''.join(err[-5:]),
  )
