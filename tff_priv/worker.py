"""One TFF worker for `tff_priv.runtime.set_context('remote', workers=...)`.

`python -m tff_priv.worker --port=8000` starts TFF's C++ `worker_binary` (the
wheel's own) on `--port`, prints one line when it accepts connections, and
stops it (SIGTERM, then SIGKILL after 2 s) when this launcher is asked to stop
(SIGTERM, SIGINT) or dies in any other way (the worker is started with the
parent-death signal, as `tff_priv.runtime` starts the local one). Exit status:
0 after a stop; when the worker ends by itself, its status, 128 + its signal,
or 1; 1 when the port is already in use on this machine; 2 after bad usage
(one line on stderr). The worker listens on every interface: docs/remote.md.
"""

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Optional

from absl import flags

from tff_priv import cli
from tff_priv import runtime

_PROG = 'tff_priv.worker'
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Seconds between the SIGTERM that asks the worker to stop and its SIGKILL.
_STOP_GRACE_SECONDS = 2.0


def _define_flags() -> None:
  """The launcher's flags: defined when run, not when imported.

  Tests and benchmarks import this module.
  """
  flags.DEFINE_integer(
      'port', None, 'Port to serve on.', lower_bound=1, upper_bound=65535
  )
  flags.DEFINE_integer(
      'max_concurrent_computation_calls',
      -1,
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
    raise RuntimeError(
        f'no TFF worker binary at {path} (is TFF 0.87 installed?)'
    )
  return path


def _port_in_use(port: int) -> bool:
  """Whether a socket already listens on `port` (not counting TIME_WAIT)."""
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


class _StopRequest:
  """The launcher's SIGTERM/SIGINT handler: it only records the signal.

  The main loop stops the worker. A handler that called `Popen` methods could
  deadlock: Python runs it in the main thread between two bytecodes, possibly
  inside the main loop's `proc.poll()`, which holds the `Popen`'s waitpid
  lock that `proc.wait()` blocks on.
  """

  def __init__(self):
    self.signum: Optional[int] = None

  def __call__(self, signum, frame):
    del frame
    if self.signum is None:
      self.signum = signum


def _stop_worker(proc: subprocess.Popen) -> None:
  """SIGTERM, then SIGKILL.

  TFF's worker does not handle SIGTERM: it ends at once.
  """
  if proc.poll() is not None:
    return
  # Not SIGINT: a worker started from a background job of a non-interactive
  # shell inherits SIGINT ignored.
  proc.send_signal(signal.SIGTERM)
  try:
    proc.wait(timeout=_STOP_GRACE_SECONDS)
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()


def serve(
    port: int,
    max_concurrent_computation_calls: int = -1,
    ready_timeout: float = 60.0,
) -> int:
  """Runs the worker until it ends or this process is told to stop.

  Call from the main thread (it installs the SIGTERM and SIGINT handlers).
  """
  stop = _StopRequest()
  for signum in _STOP_SIGNALS:
    signal.signal(signum, stop)
  if _port_in_use(port):
    # TFF's worker would fail to bind, exit 0, and our readiness check would
    # find the other program's socket.
    print(f'tff_priv.worker: port {port} is in use on this machine', flush=True)
    return 1
  if stop.signum is not None:
    return _stopped(stop.signum)
  proc = subprocess.Popen(  # pylint: disable=subprocess-popen-preexec-fn
      [
          worker_binary_path(),
          f'--port={port}',
          f'--max_concurrent_computation_calls={max_concurrent_computation_calls}',
      ],
      preexec_fn=runtime.dies_with_this_process(),  # noqa: PLW1509 (parent-death signal)
      stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL,
  )
  try:
    deadline = time.monotonic() + ready_timeout
    while stop.signum is None and not _listening(port):
      if proc.poll() is not None:
        print(
            f'tff_priv.worker: the worker exited with status '
            f'{proc.returncode} before listening on port {port}',
            flush=True,
        )
        return _exit_status(proc.returncode)
      if time.monotonic() > deadline:
        proc.kill()
        proc.wait()
        print(
            f'tff_priv.worker: the worker did not listen on port {port} '
            f'within {ready_timeout:g} s',
            flush=True,
        )
        return 1
      time.sleep(0.05)
    if stop.signum is None:
      print(
          f'tff_priv.worker: ready on port {port} (worker pid {proc.pid})',
          flush=True,
      )
    # Polled, not proc.wait(): a signal delivered to another thread (TF starts
    # some) does not interrupt a blocking wait, and Python runs the handler
    # only when the main thread runs again.
    while stop.signum is None and proc.poll() is None:
      time.sleep(0.05)
    if stop.signum is None:
      print(
          f'tff_priv.worker: the worker ended by itself (status '
          f'{proc.returncode})',
          flush=True,
      )
      return _exit_status(proc.returncode)
    _stop_worker(proc)
    return _stopped(stop.signum)
  finally:
    if proc.poll() is None:  # An unexpected exception: leave no worker.
      proc.kill()
      proc.wait()


def _stopped(signum: int) -> int:
  """The exit of a launcher told to stop, its worker (if any) stopped."""
  # Stopped as asked: a repeated SIGTERM or SIGINT must not turn the exit
  # status 0 into death by that signal (Python restores the default action
  # while it shuts down).
  for stop_signal in _STOP_SIGNALS:
    signal.signal(stop_signal, signal.SIG_IGN)
  print(f'tff_priv.worker: stopped (signal {signum})', flush=True)
  return 0


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
        [
            sys.executable,
            '-m',
            'tff_priv.worker',
            f'--port={port}',
            f'--ready_timeout={timeout}',
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ, PYTHONPATH=root),
        cwd=root,
        # Dies with this process, as the worker dies with it.
        preexec_fn=runtime.dies_with_this_process(),  # noqa: PLW1509 (parent-death signal)
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
  """Serves the worker `--port` names (absl's `main`); the exit status."""
  usage = cli.Cli(_PROG)
  if len(argv) > 1:
    usage.fail(f'unexpected arguments {argv[1:]}')
  values = flags.FLAGS
  if values.port is None:
    usage.fail('give --port')
  return serve(
      values.port,
      values.max_concurrent_computation_calls,
      values.ready_timeout,
  )


if __name__ == '__main__':
  _define_flags()
  cli.Cli(_PROG, doc=__doc__).run(main)
