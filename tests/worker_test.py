"""`python -m tff_priv.worker`: usage errors, stop time, stops under stress."""

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tests import procfs
from tff_priv import worker

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ENV = dict(os.environ, PYTHONPATH=_ROOT)
# Generous: a stop takes well under a second, even on a loaded machine.
_STOP_DEADLINE_SECONDS = 15

# Runs the launcher with every `Popen.poll()` holding the Popen's waitpid
# lock for 0.2 s, so that a signal often lands while the lock is held: the
# launcher whose handler called `Popen.wait()` deadlocked there.
_HOLDING_POLL = """
import runpy, subprocess, time
_poll = subprocess.Popen._internal_poll
def _holding_poll(self, *args, **kwargs):
  if self._waitpid_lock.acquire(False):
    try:
      time.sleep(0.2)
    finally:
      self._waitpid_lock.release()
  return _poll(self, *args, **kwargs)
subprocess.Popen._internal_poll = _holding_poll
runpy.run_module('tff_priv.worker', run_name='__main__', alter_sys=True)
"""


# (launcher, port) of every launch of the running test, for `_no_leftovers`.
_LAUNCHED = []


@pytest.fixture(autouse=True)
def _no_leftovers():
  """Kills what a test leaves running, whether it passed or failed.

  A test that failed before its stop (e.g. at `_ready`) used to leave its
  launcher and TFF worker running, holding the test run's output open.
  """
  yield
  while _LAUNCHED:
    launcher, port = _LAUNCHED.pop()
    if launcher.poll() is None:
      launcher.kill()
      launcher.wait()
    for pid, _ in _workers_on(port):
      try:
        os.kill(pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
    if launcher.stdout is not None:
      launcher.stdout.close()


def _launch(port, holding_poll=False, ignore_sigint=False):
  start = ['-c', _HOLDING_POLL] if holding_poll else ['-m', 'tff_priv.worker']
  command = [sys.executable, *start, f'--port={port}']
  if ignore_sigint:
    # As in a background job of a non-interactive shell: the shell ignores
    # SIGINT and the launcher inherits that through exec. (Not a Python
    # preexec_fn: in a test process that has loaded gRPC, a preexec_fn runs
    # gRPC's after-fork handler in the child, which can print "Kick failed:
    # eventfd_write: Bad file descriptor" into the launcher's output.)
    command = ['sh', '-c', 'trap "" INT; exec "$0" "$@"', *command]
  launcher = subprocess.Popen(
      command,
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
      cwd=_ROOT,
      env=_ENV,
  )
  _LAUNCHED.append((launcher, port))
  return launcher


def _workers_on(port):
  """The TFF workers on `port`, found by their command line.

  Each launcher is a subprocess on a free loopback port; its TFF worker is found
  by its command line (`worker_binary --port=P`), so a worker is checked even
  when the launcher was stopped before it said which one it started.
  """
  return procfs.with_cmdline(f'worker_binary\0--port={port}\0'.encode())


def _ready(launcher):
  line = launcher.stdout.readline()
  assert 'ready on port' in line, line
  return line


def _stop(launcher, port):
  """SIGTERM, then (exit status, output, seconds to exit, workers left)."""
  start = time.monotonic()
  launcher.send_signal(signal.SIGTERM)
  try:
    output, _ = launcher.communicate(timeout=_STOP_DEADLINE_SECONDS)
  except subprocess.TimeoutExpired:
    for pid, _ in procfs.children(launcher.pid) | set(_workers_on(port)):
      os.kill(pid, signal.SIGKILL)
    launcher.kill()
    launcher.wait()
    pytest.fail(
        f'the launcher ignored SIGTERM for '
        f'{_STOP_DEADLINE_SECONDS} s (port {port})'
    )
  seconds = time.monotonic() - start
  left = procfs.wait_gone(_workers_on(port), _STOP_DEADLINE_SECONDS)
  return launcher.returncode, output, seconds, left


@pytest.mark.parametrize(
    'args',
    [
        ['--port=abc'],
        ['--port=0'],
        ['--port=70000'],
        ['--bogus'],
        [],
        ['--port=8000', 'extra'],
        ['--port=8000', '--ready_timeout=soon'],
    ],
)
def test_bad_usage_is_one_line_and_status_2(args):
  proc = subprocess.run(
      [sys.executable, '-m', 'tff_priv.worker', *args],
      capture_output=True,
      text=True,
      timeout=60,
      cwd=_ROOT,
      env=_ENV,
      check=False,
  )
  assert proc.returncode == 2, proc.stderr
  assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
  assert proc.stderr.startswith('tff_priv.worker: error: '), proc.stderr
  assert proc.stdout == ''


def test_help_exits_0():
  proc = subprocess.run(
      [sys.executable, '-m', 'tff_priv.worker', '--help'],
      capture_output=True,
      text=True,
      timeout=60,
      cwd=_ROOT,
      env=_ENV,
      check=False,
  )
  assert proc.returncode == 0, proc.stderr
  assert '--port' in proc.stdout


def test_a_stop_is_prompt_when_started_with_sigint_ignored():
  # Started from a background job, the launcher and its worker inherit
  # SIGINT ignored: a stop by SIGINT waited 5 s for the SIGKILL.
  port = worker.free_port()
  launcher = _launch(port, ignore_sigint=True)
  _ready(launcher)
  code, output, seconds, left = _stop(launcher, port)
  assert code == 0, output
  assert output.strip() == 'tff_priv.worker: stopped (signal 15)'
  assert left == []
  assert seconds < 4, f'the stop took {seconds:.1f} s'


@pytest.mark.slow
def test_sigterm_at_random_times_stops_the_launcher_and_its_worker():
  # The launcher deadlocked when SIGTERM landed inside its main loop's
  # `proc.poll()`. Signals at random (seeded) times: during the interpreter's
  # start, before the worker listens, in the poll loop, and in the poll loop
  # with the waitpid lock held long (half the time a signal lands in it).
  rng = random.Random(20240607)
  stops = []
  for i in range(36):
    mode = ('start', 'ready', 'holding poll')[i % 3]
    port = worker.free_port()
    launcher = _launch(port, holding_poll=mode == 'holding poll')
    if mode == 'start':
      time.sleep(rng.uniform(0.0, 1.5))
    else:
      _ready(launcher)
      time.sleep(rng.uniform(0.0, 0.6))
    code, output, seconds, left = _stop(launcher, port)
    stops.append(seconds)
    assert left == [], f'stop {i} ({mode}): worker left behind {left}'
    if output:  # The handler was installed before the launcher printed.
      assert code == 0, f'stop {i} ({mode}): status {code}: {output}'
      assert output.splitlines()[-1] == 'tff_priv.worker: stopped (signal 15)'
    else:  # SIGTERM before Python ran the launcher: its default action.
      assert code in (0, -signal.SIGTERM), f'stop {i} ({mode}): status {code}'
  print(f'36 stops, the slowest {max(stops):.2f} s')
