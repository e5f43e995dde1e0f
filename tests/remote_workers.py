"""Test helpers: loopback TFF workers (`worker.Launched`) watched by PID."""

import os
import signal

from tests import procfs
from tff_priv import worker


class Worker(worker.Launched):
  """A launched worker, its two processes identified by (pid, start time)."""

  def __init__(self, port=None):
    super().__init__(port)
    self.processes = [
        (pid, procfs.stat(pid)[1])
        for pid in (self.proc.pid, self.worker_pid)
        if procfs.stat(pid) is not None
    ]

  def kill_worker_binary(self):
    """SIGKILL of the C++ worker alone (a crashed or lost host)."""
    os.kill(self.worker_pid, signal.SIGKILL)

  def stop(self) -> list:
    """Stops the launcher; returns its processes still alive after 15 s."""
    super().stop()
    return procfs.wait_gone(self.processes, 15)


free_port = worker.free_port
