"""The TFF worker started by tff_priv.runtime never outlives its process."""

import gc
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from unittest import mock
import weakref

from absl.testing import parameterized
import pytest
import tensorflow as tf

from tests import procfs
from tests import readme_snippets
from tff_priv import runtime

_CHILD = os.path.join(os.path.dirname(__file__), 'testdata', 'runtime_child.py')
_TIMEOUT = 120


def _wait_gone(procs, seconds=10.0):
  return procfs.wait_gone(procs, seconds)


def _default_signals():
  # The child starts with the default dispositions whatever this process
  # inherited (e.g. SIGHUP ignored under nohup, which tff_priv.runtime rightly
  # respects: it then installs no SIGHUP handler).
  for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, signal.SIG_DFL)


def _start(mode, *extra, stderr=subprocess.DEVNULL):
  proc = subprocess.Popen(
      [sys.executable, _CHILD, mode, *extra],
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      stderr=stderr,
      text=True,
      preexec_fn=_default_signals,  # noqa: PLW1509 (only resets signals)
  )
  line = proc.stdout.readline()
  if not line.startswith('READY'):
    proc.kill()
    raise AssertionError(f'child did not get ready: {line!r}')
  return proc, line


# Builds and serialises (as TFF does) 1,000 client datasets with an eager
# `map`, calling `runtime.release_eager_kernels` after every 100 when argv[1] is
# 'release'; prints the growth of the process's resident memory in MB.
_DATASETS = """
import sys
import tensorflow as tf
from tff_priv import runtime

def rss_mb():
  with open('/proc/self/statm') as f:
    return int(f.read().split()[1]) * 4096 / 2**20

base = tf.data.Dataset.from_tensor_slices(
    {'pixels': tf.zeros([20, 28, 28]), 'label': tf.zeros([20], tf.int32)})

def client_dataset():
  d = base.shuffle(20).map(
      lambda e: (tf.reshape(e['pixels'], [-1]), e['label'])).batch(4)
  tf.raw_ops.DatasetToGraphV2(input_dataset=d._variant_tensor)

for _ in range(100):
  client_dataset()
runtime.release_eager_kernels()
start = rss_mb()
for i in range(1000):
  client_dataset()
  if sys.argv[1] == 'release' and i % 100 == 99:
    runtime.release_eager_kernels()
print(rss_mb() - start)
"""


def _federated_sum():
  """A federated computation: the sum of the clients' float32 values."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def total(x):
    return tff.federated_sum(x)

  return total


class RuntimeTest(tf.test.TestCase, parameterized.TestCase):
  """The ways a child ends, and what they leave: no worker, a closed pipe.

  Each test runs tests/testdata/runtime_child.py in a subprocess whose stdout is
  a pipe, finds the child's children by PID while it runs (from /proc, not by
  process name), ends it in one way or another, and checks that those PIDs are
  gone and that the pipe reached EOF (a worker holding it would hang the read).
  """

  def _run_and_end(self, mode, how, stderr=subprocess.DEVNULL, *extra):
    proc, line = _start(mode, *extra, stderr=stderr)
    self.assertEqual(line.split()[1], '3.0')
    workers = procfs.children(proc.pid)
    self.assertNotEmpty(workers, 'the child started no worker process')
    if how == 'stdin':
      proc.stdin.write('go\n')
      proc.stdin.flush()
    else:
      proc.send_signal(how)
    try:
      rest, _ = proc.communicate(
          timeout=_TIMEOUT
      )  # EOF only once every writer is gone.
    except subprocess.TimeoutExpired:
      proc.kill()
      self.fail('the child output pipe stayed open: a worker still holds it')
    self.assertEqual(_wait_gone(workers), [], 'worker outlived its process')
    return proc.returncode, rest

  @pytest.mark.slow
  def test_normal_exit_stops_worker(self):
    with tempfile.TemporaryFile('w+') as err:
      returncode, _ = self._run_and_end('exit', 'stdin', stderr=err)
      err.seek(0)
      stderr = err.read()
    self.assertEqual(returncode, 0)
    # TFF's ServiceManager.__del__ must not run during interpreter teardown.
    self.assertNotIn('Exception ignored', stderr)

  @parameterized.named_parameters(
      # What training.run does: TFF's own context, only the worker tracked.
      ('tracking_alone', 'tracked'),
      # A user's own script: TFF's context, no tff_priv.runtime call. TFF
      # alone leaves its worker behind (the control below); importing
      # tff_priv stops it at exit, with no "Exception ignored in ...
      # ServiceManager.__del__".
      ('a_script_that_only_imports_tff_priv', 'imported'),
  )
  @pytest.mark.slow  # Below the parameters: each generated test is marked.
  def test_the_default_contexts_worker_stops_quietly(self, variant):
    with tempfile.TemporaryFile('w+') as err:
      returncode, _ = self._run_and_end('exit', 'stdin', err, variant)
      err.seek(0)
      stderr = err.read()
    self.assertEqual(returncode, 0)
    self.assertNotIn('Exception ignored', stderr)
    self.assertNotIn('Traceback', stderr)

  @pytest.mark.slow
  def test_a_program_that_ignores_sigint_still_stops_its_worker_by_sigint(self):
    # A program started in the background by a script (`cmd &`, nohup)
    # ignores SIGINT, and its children inherit that through exec: its worker
    # then ignored the SIGINT TFF and stop_workers stop it with, and each
    # stop waited for the SIGKILL fallback (the 5.0 s setups of a test suite
    # run in the background).
    proc, _ = _start('stop', 'sigint_ignored', stderr=subprocess.PIPE)
    out, err = proc.communicate('go\n', timeout=_TIMEOUT)
    self.assertEqual(proc.returncode, 0, err[-3000:])
    code, status = json.loads(out.strip().splitlines()[-1])
    self.assertEqual((code, status), (os.CLD_KILLED, signal.SIGINT))

  @pytest.mark.slow
  def test_uncaught_exception_stops_worker(self):
    returncode, _ = self._run_and_end('raise', 'stdin')
    self.assertEqual(returncode, 1)

  @parameterized.named_parameters(
      ('sigterm', signal.SIGTERM, -signal.SIGTERM),
      ('sighup', signal.SIGHUP, -signal.SIGHUP),
      (
          'sigint',
          signal.SIGINT,
          None,
      ),  # KeyboardInterrupt: exit status 1 or -2.
  )
  @pytest.mark.slow
  def test_signal_stops_worker(self, signum, expected_returncode):
    returncode, _ = self._run_and_end('wait', signum)
    if expected_returncode is not None:
      self.assertEqual(returncode, expected_returncode)
    else:
      self.assertIn(returncode, (1, -signal.SIGINT))

  @pytest.mark.slow
  def test_sigkill_stops_worker_through_parent_death_signal(self):
    self._run_and_end('wait', signal.SIGKILL)

  @pytest.mark.slow
  def test_sigkill_stops_a_worker_started_early(self):
    # The worker is forked by set_context's own thread, not TFF's loop: the
    # parent-death signal still ends it.
    self._run_and_end('wait', signal.SIGKILL, subprocess.DEVNULL, 'early')

  @pytest.mark.slow
  def test_control_plain_tff_leaves_worker_behind(self):
    # Shows that the checks above can fail: without tff_priv.runtime the worker
    # outlives a normally exiting process (TFF 0.87). Cleans up after itself.
    proc, _ = _start('exit', 'plain')
    workers = procfs.children(proc.pid)
    self.assertNotEmpty(workers)
    proc.stdin.write('go\n')
    proc.stdin.flush()
    proc.stdin.close()
    try:
      self.assertEqual(proc.wait(timeout=_TIMEOUT), 0)
      self.assertNotEqual(
          _wait_gone(workers, seconds=3.0),
          [],
          'plain TFF stopped its worker; the runtime workaround may be'
          ' obsolete',
      )
    finally:
      for pid, _ in workers:
        try:
          os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
          pass
      proc.stdout.close()

  def test_in_process_stop_and_restart(self):
    total = _federated_sum()
    self.assertAllClose(total([1.0, 2.0]), 3.0)
    pids = runtime.worker_pids()
    self.assertLen(pids, 1)
    runtime.stop_workers()
    self.assertEqual(runtime.worker_pids(), [])
    self.assertAllClose(total([4.0, 2.0]), 6.0)  # A fresh worker serves on.
    self.assertLen(runtime.worker_pids(), 1)

  def test_a_worker_started_early_serves_the_first_computation(self):
    total = _federated_sum()
    before = set(threading.enumerate())
    runtime.set_context(start_worker=True)
    self.addCleanup(runtime.set_context)
    deadline = time.monotonic() + 60
    while not runtime.worker_pids() and time.monotonic() < deadline:
      time.sleep(0.05)
    early = runtime.worker_pids()
    self.assertLen(early, 1, 'no worker started before any computation')

    self.assertAllClose(total([1.0, 2.0]), 3.0)
    self.assertEqual(runtime.worker_pids(), early)  # That one, not a second.
    starter = [
        t
        for t in set(threading.enumerate()) - before
        if t.name == 'tff_priv-worker-start'
    ]
    self.assertLen(starter, 1)
    runtime.stop_workers()
    starter[0].join(timeout=10)  # It waits on its worker only.
    self.assertFalse(starter[0].is_alive())
    self.assertAllClose(total([4.0, 2.0]), 6.0)

  def test_a_context_started_early_is_freed_without_the_cyclic_gc(self):
    # In a reference cycle, the cyclic GC finalizes the context's objects in
    # any order: TFF's `ServiceManager.__del__` then signalled a worker its
    # `Popen` finalizer had reaped ("Exception ignored ... ProcessLookupError"
    # at the exit of every train.py run).
    total = _federated_sum()
    for start_worker in (False, True):
      context = runtime.set_context(start_worker=start_worker)
      self.assertAllClose(total([1.0, 2.0]), 3.0)  # The worker is up.
      factory = weakref.ref(context.executor_factory)
      del context
      gc.disable()
      try:
        runtime.set_context()
        self.assertIsNone(factory(), f'start_worker={start_worker}')
      finally:
        gc.enable()

  @pytest.mark.slow
  def test_released_kernels_stop_eager_datasets_growing_the_process(self):
    # Without the release every eager `map` leaves its kernel cached (about
    # 70 KB a dataset here): the control shows the measurement can fail.
    growth = {}
    for arm in ('keep', 'release'):
      out = subprocess.run(
          [sys.executable, '-c', _DATASETS, arm],
          capture_output=True,
          text=True,
          timeout=_TIMEOUT,
          check=True,
      )
      growth[arm] = float(out.stdout.split()[-1])
    self.assertGreater(growth['keep'], 40.0, growth)
    self.assertLess(growth['release'], 20.0, growth)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'kind'):
      runtime.set_context('remote')
    with self.assertRaisesRegex(ValueError, 'default_num_clients'):
      runtime.set_context(default_num_clients=-1)
    with self.assertRaisesRegex(
        ValueError, 'start_worker applies to the local'
    ):
      runtime.set_context('remote', workers=['localhost:1'], start_worker=True)


# TF imported first, as a user's script does: what set_context can still
# silence after it (the lines TF prints as it loads come before "IMPORTED").
_QUIET_CHILD = """
import sys
import threading
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from absl import logging
print('IMPORTED', file=sys.stderr, flush=True)
from tff_priv import runtime
runtime.set_context()
# A warning of TF's own code (its record's path in the installed package),
# dropped, and one of the caller's, kept.
import logging as std_logging
import os
library = os.path.join(os.path.dirname(tf.__file__), 'python', 'x.py')
for name in ('absl', 'tensorflow'):
  logger = std_logging.getLogger(name)
  logger.handle(logger.makeRecord(name, std_logging.WARNING, library, 1,
                                  'a library warning', (), None))
logging.warning('a user warning')
# tff_priv's own warning (set_context off the main thread) stays.
thread = threading.Thread(target=runtime._install_signal_handlers)
thread.start()
thread.join()

@tff.tensorflow.computation(np.float32)
def add_noise(x):
  return tf.reduce_sum(tf.random.normal([3])) + x

@tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
def total(x):
  return tff.federated_sum(tff.federated_map(add_noise, x))

print(float(total([1.0, 2.0])) > -1e9)
raise ValueError('an error stays')
"""


class QuietTest(tf.test.TestCase):
  """`set_context()` silences TF's, TFF's, gRPC's, absl's logs, not errors."""

  def test_after_tensorflow_loaded_only_callers_warnings_and_errors_remain(
      self,
  ):
    with tempfile.TemporaryDirectory() as tmp:
      path = os.path.join(tmp, 'child.py')
      with open(path, 'w') as f:
        f.write(_QUIET_CHILD)
      result = subprocess.run(
          [sys.executable, path],
          capture_output=True,
          text=True,
          timeout=_TIMEOUT,
          cwd=tmp,
          env={
              **readme_snippets.user_env(),
              'PYTHONPATH': readme_snippets.ROOT,
          },
          check=False,
      )
    self.assertEqual(result.returncode, 1, result.stderr[-3000:])
    self.assertEqual(result.stdout.strip(), 'True')
    after = result.stderr.split('IMPORTED\n', 1)[1]
    # The log lines left: the caller's warning and tff_priv's own.
    logged = readme_snippets.log_lines(after)
    self.assertLen(logged, 2, after)
    self.assertIn('a user warning', logged[0])
    self.assertIn(
        'tff_priv.runtime: set_context() called off the main thread', logged[1]
    )
    self.assertNotIn('a library warning', after)
    self.assertEqual(
        after.strip().splitlines()[-1], 'ValueError: an error stays'
    )

  def test_cpp_log_lines_are_dropped_and_all_else_is_passed_on(self):
    lines = [
        b'2026-12-02 00:36:17.694429: I tensorflow/core/grappler/devices.cc:66]'
        b' Number of eligible GPUs (core count >= 8): 0\n',
        b'2026-12-02 00:36:17.694779: W tensorflow/core/a.cc:1] a warning\n',
        b'2026-12-02 00:36:17.694780: E tensorflow/core/grappler/grappler_item_'
        b'builder.cc:435] Failed to detect the fetch node(s), skipping this '
        b'input\n',
        b'WARNING: All log messages before absl::InitializeLog() is called are'
        b' written to STDERR\n',
        b'I0000 00:00:1796171652.430587    7859 fork_posix.cc:71] Other threads'
        b' are currently calling into gRPC, skipping fork() handlers\n',
        b'Traceback (most recent call last):\n',
        b'tff_priv: loading task digits ...\n',
    ]
    with tempfile.TemporaryFile() as out:
      saved = os.dup(2)
      os.dup2(out.fileno(), 2)
      try:
        with mock.patch.object(runtime, '_filtered', {'compile'}):
          with runtime._cpp_logs_filtered('compile') as real:
            self.assertNotEqual(real, 2)
            self.assertEqual(runtime.real_stderr(), real)
            os.write(2, b''.join(lines[:3]))
            with runtime._cpp_logs_filtered('compile'):  # Nested: one read.
              os.write(2, b''.join(lines[3:]))
          self.assertEqual(runtime.real_stderr(), 2)
          with runtime._cpp_logs_filtered('fork') as real:  # Not filtered.
            self.assertEqual(real, 2)
            os.write(2, lines[0])
      finally:
        os.dup2(saved, 2)
        os.close(saved)
      out.seek(0)
      self.assertEqual(out.read(), b''.join(lines[5:]) + lines[0])

  def test_records_of_tff_priv_and_errors_pass_the_quiet_filter(self):
    def record(path, level):
      return logging.LogRecord('absl', level, path, 1, 'm', (), None)

    own = os.path.join(readme_snippets.ROOT, 'tff_priv', 'program', 'x.py')
    tasks = os.path.join(readme_snippets.ROOT, 'tasks', 'x.py')
    other = os.path.join(os.path.dirname(tf.__file__), 'x.py')
    quiet = runtime._QuietFilter()
    with mock.patch.object(runtime, '_quiet', True):
      self.assertTrue(quiet.filter(record(own, logging.WARNING)))
      self.assertTrue(quiet.filter(record(tasks, logging.WARNING)))
      self.assertTrue(quiet.filter(record(other, logging.ERROR)))
      self.assertFalse(quiet.filter(record(other, logging.WARNING)))
    with mock.patch.object(runtime, '_quiet', False):  # verbose: all pass.
      self.assertTrue(quiet.filter(record(other, logging.INFO)))

  def test_the_compiler_of_every_context_kind_is_wrapped(self):
    for program in (False, True):
      context = runtime.set_context(program=program)
      self.addCleanup(runtime.set_context)
      holders = [context, getattr(context, '_context', None)]
      holders += [getattr(h, '_async_context', None) for h in holders]
      compilers = [
          h._compiler_pipeline._compiler_fn
          for h in holders
          if getattr(h, '_compiler_pipeline', None) is not None
      ]
      self.assertLen(compilers, 1)
      self.assertTrue(getattr(compilers[0], 'quiet', False), program)


if __name__ == '__main__':
  tf.test.main()
