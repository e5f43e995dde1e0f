"""One TFF worker for `tff_priv.runtime.set_context('remote', workers=...)`.

  python -m tff_priv.worker --port=8000

Starts TFF's C++ `worker_binary` (the wheel's own) on `--port`, prints one
line when it accepts connections, and stops it when this launcher is asked
to stop (SIGTERM, SIGINT) or dies in any other way (the worker is started
with the parent-death signal, as `tff_priv.runtime` starts the local one).
Exit status: 0 after a stop; when the worker ends by itself, its status,
128 + its signal, or 1 (TFF's worker exits 0 even when it cannot bind its
port); 1 when the port is already in use on this machine.
"""

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Optional

from absl import app
from absl import flags

from tff_priv import runtime


def _define_flags() -> None:
  """The launcher's flags: defined when run, not when imported (tests, benchmarks)."""
  flags.DEFINE_integer('port', None, 'Port to serve on.', lower_bound=1)
  flags.DEFINE_integer(
      'max_concurrent_computation_calls', -1,
      "The worker's limit of concurrent calls to one computation (<= 0: "
      'none).',
  )
  flags.DEFINE_float(
      'ready_timeout', 60.0, 'Seconds to wait for the worker to listen.'
  )


def worker_binary_path() -> str:
  """The path of TFF's C++ `worker_binary` in the installed wheel.

  Found without importing TFF (and TensorFlow): the launcher stays small.
  """
  spec = importlib.util.find_spec('tensorflow_federated')
  if spec is None or not spec.submodule_search_locations:
    raise RuntimeError('tensorflow_federated is not installed')
  path = os.path.join(
      spec.submodule_search_locations[0], 'data', 'worker_binary'
  )
  if not os.path.isfile(path):
    raise RuntimeError(f'no TFF worker binary at {path} (is TFF 0.87 installed?)')
  return path


def _port_in_use(port: int) -> bool:
  """Whether a socket already listens on `port` (TIME_WAIT ones do not count)."""
  for family, host in ((socket.AF_INET6, '::'), (socket.AF_INET, '')):
    try:
      probe = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
      continue  # No IPv6 on this host: IPv4 alone.
    with probe:
      probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
      try:
        probe.bind((host, port))
      except OSError:
        return True
    return False
  return False


def _exit_status(returncode: int) -> int:
  """The launcher's status for a worker that ended by itself."""
  if returncode < 0:
    return 128 - returncode
  return returncode or 1


def _listening(port: int) -> bool:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.settimeout(0.2)
    return s.connect_ex(('127.0.0.1', port)) == 0


def serve(port: int, max_concurrent_computation_calls: int = -1,
          ready_timeout: float = 60.0) -> int:
  """Runs the worker until it ends or this process is told to stop."""
  if _port_in_use(port):
    # TFF's worker would fail to bind, exit 0, and our readiness check would
    # find the other program's socket.
    print(f'tff_priv.worker: port {port} is in use on this machine',
          flush=True)
    return 1
  proc = subprocess.Popen(  # pylint: disable=subprocess-popen-preexec-fn
      [worker_binary_path(), f'--port={port}',
       f'--max_concurrent_computation_calls={max_concurrent_computation_calls}'],
      preexec_fn=runtime.dies_with_this_process(),
      stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL,
  )

  def stop(signum, frame):
    del frame
    proc.send_signal(signal.SIGINT)  # How TFF itself stops its worker.
    deadline = time.monotonic() + 5.0
    while proc.poll() is None and time.monotonic() < deadline:
      time.sleep(0.02)
    if proc.poll() is None:
      proc.kill()
      proc.wait()
    print(f'tff_priv.worker: stopped (signal {signum})', flush=True)
    sys.exit(0)

  signal.signal(signal.SIGTERM, stop)
  signal.signal(signal.SIGINT, stop)
  deadline = time.monotonic() + ready_timeout
  while not _listening(port):
    if proc.poll() is not None:
      print(f'tff_priv.worker: the worker exited with status '
            f'{proc.returncode} before listening on port {port}', flush=True)
      return _exit_status(proc.returncode)
    if time.monotonic() > deadline:
      proc.kill()
      proc.wait()
      print(f'tff_priv.worker: the worker did not listen on port {port} '
            f'within {ready_timeout:g} s', flush=True)
      return 1
    time.sleep(0.05)
  print(f'tff_priv.worker: ready on port {port} (worker pid {proc.pid})',
        flush=True)
  # Polled, not proc.wait(): a signal delivered to another thread (TF starts
  # some) does not interrupt a blocking wait, and Python runs the handler
  # only when the main thread runs again.
  while proc.poll() is None:
    time.sleep(0.1)
  print(f'tff_priv.worker: the worker ended by itself (status '
        f'{proc.returncode})', flush=True)
  return _exit_status(proc.returncode)


def free_port() -> int:
  """A TCP port free on this machine now."""
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


class Launched:
  """A `python -m tff_priv.worker` started by this process (tests, benchmarks).

  Attributes:
    port: its port on this machine.
    address: 'localhost:port', for `runtime.set_context('remote', ...)`.
    proc: the launcher's `subprocess.Popen`.
    worker_pid: the PID of its `worker_binary`.
  """

  def __init__(self, port: Optional[int] = None, timeout: float = 60.0):
    port = free_port() if port is None else port
    self.port = port
    self.address = f'localhost:{port}'
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    self.proc = subprocess.Popen(
        [sys.executable, '-m', 'tff_priv.worker', f'--port={port}',
         f'--ready_timeout={timeout}'],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=dict(os.environ, PYTHONPATH=root), cwd=root,
        # Dies with this process, as the worker dies with it.
        preexec_fn=runtime.dies_with_this_process(),
    )
    line = self.proc.stdout.readline()
    if 'ready on port' not in line:
      self.proc.kill()
      self.proc.wait()
      raise RuntimeError(f'tff_priv.worker did not start: {line.strip()!r}')
    self.worker_pid = int(line.split('worker pid ')[1].rstrip(')\n'))

  def stop(self) -> int:
    """SIGTERM to the launcher (which stops its worker); its exit status."""
    if self.proc.poll() is None:
      self.proc.send_signal(signal.SIGTERM)
    code = self.proc.wait(timeout=30)
    self.proc.stdout.close()
    return code


def main(argv):
  if len(argv) > 1:
    print(f'tff_priv.worker: unexpected arguments {argv[1:]}', file=sys.stderr)
    return 2
  values = flags.FLAGS
  if values.port is None:
    print('tff_priv.worker: give --port', file=sys.stderr)
    return 2
  return serve(
      values.port, values.max_concurrent_computation_calls,
      values.ready_timeout,
  )


if __name__ == '__main__':
  _define_flags()
  app.run(main)
