"""The examples/ scripts run as a user runs them and print what they promise."""

import os
import signal
import subprocess
import sys
import tempfile
import time

from absl.testing import absltest
import dp_accounting
import pytest

from tests import procfs
from tests import script_runs
from tff_priv.aggregators import bandmf
from tff_priv.aggregators import blt

pytestmark = pytest.mark.slow


def _command(name, *args):
  return [
      sys.executable,
      os.path.join(script_runs.ROOT, 'examples', name),
      *args,
  ]


def _env():
  # As a user runs them: the examples quiet TF themselves.
  return {
      k: v for k, v in script_runs.env().items() if k != 'TF_CPP_MIN_LOG_LEVEL'
  }


def _example(name, *args, cwd):
  return subprocess.run(
      _command(name, *args),
      capture_output=True,
      text=True,
      cwd=cwd,
      env=_env(),
      timeout=script_runs.TIMEOUT,
      check=False,
  )


def _descendants(pid, fragment):
  """The live processes under `pid` whose command line holds `fragment`."""
  found, todo = [], [pid]
  while todo:
    for child in procfs.children(todo.pop()):
      todo.append(child[0])
      try:
        with open(f'/proc/{child[0]}/cmdline', 'rb') as f:
          if fragment in f.read():
            found.append(child)
      except OSError:
        pass
  return found


def _stopped(test, name, signum, fragment, count):
  """Starts example `name`, signals it once `count` of its TFF processes run."""
  proc = subprocess.Popen(
      _command(name),
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
      cwd=tempfile.mkdtemp(),
      env=_env(),
  )
  deadline = time.monotonic() + script_runs.TIMEOUT
  while (
      len(_descendants(proc.pid, fragment)) < count
      and proc.poll() is None
      and time.monotonic() < deadline
  ):
    time.sleep(0.2)
  started = _descendants(proc.pid, fragment)
  test.assertLen(started, count)
  proc.send_signal(signum)
  _, err = proc.communicate(timeout=60)
  test.assertEqual(proc.returncode, 128 + signum, err[-3000:])
  test.assertEqual(procfs.wait_gone(started, 15), [])
  return err


class ExamplesTest(absltest.TestCase):

  def test_own_loop_charges_every_factory(self):
    result = _example('own_loop.py', cwd=tempfile.mkdtemp())
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    lines = result.stdout.strip().splitlines()
    self.assertEqual(
        [line.split(':')[0] for line in lines],
        [
            'smp',
            'dp_fedavg',
            'dp_fedavg_adaptive',
            'udp',
            'distortion',
            'ldp',
            'blt',
            'bandmf',
        ],
    )
    for line in lines:
      self.assertRegex(
          line,
          r'eps = \d+\.\d{3} at delta = 1e-05 after 5 '
          r'rounds, accuracy 0\.\d{3} on 600 held-out examples$',
      )
    # BLT: one stream (StreamSampler's cyclic schedule, b = 10 > 5 rounds:
    # each client once), calibrated to eps 4, charged once.
    plan = blt.plan_streams(5, 50, 5, participation='cyclic', epsilon=4.0)
    stream = dp_accounting.rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL
    ).compose(plan.event())
    self.assertStartsWith(
        lines[-2], f'blt: eps = {stream.get_epsilon(1e-5):.3f} at delta'
    )
    self.assertBetween(stream.get_epsilon(1e-5), 3.99, 4.0)
    # BandMF: ceil(5 / b) cycle events of the b its plan chose, by hand.
    plan = bandmf.plan_bands(5, 50, 5, epsilon=4.0)
    cycles = dp_accounting.rdp.RdpAccountant().compose(
        plan.event(), -(-5 // plan.bands)
    )
    self.assertStartsWith(
        lines[-1], f'bandmf: eps = {cycles.get_epsilon(1e-5):.3f} at delta'
    )
    self.assertBetween(cycles.get_epsilon(1e-5), 3.99, 4.0)
    # Quiet: TF's logs are off.
    self.assertEqual(result.stderr.strip(), '')
    bad = _example('own_loop.py', 'nope', cwd=tempfile.mkdtemp())
    self.assertNotEqual(bad.returncode, 0)
    self.assertIn("unknown mechanism 'nope'", bad.stderr)

  def test_train_model_resumes_with_its_ledger(self):
    root = os.path.join(tempfile.mkdtemp(), 'run')
    first = _example('train_model.py', root, cwd=tempfile.mkdtemp())
    self.assertEqual(first.returncode, 0, first.stderr[-3000:])
    claimed = 'eps = 7.998 at delta = 1e-5 after 20 charged rounds'
    self.assertIn(claimed, first.stdout)
    self.assertRegex(first.stdout, r'accuracy 0\.\d{3} on 600 held-out')
    self.assertEqual(first.stderr.strip(), '')
    # Run again: everything was trained, and the ledger is read back (not
    # zero, as a ledger kept in memory would be).
    again = _example('train_model.py', root, cwd=tempfile.mkdtemp())
    self.assertEqual(again.returncode, 0, again.stderr[-3000:])
    self.assertIn(claimed, again.stdout)
    self.assertNotIn('Traceback', first.stderr + again.stderr)

  def test_ctrl_c_and_sigterm_stop_the_examples_in_one_line(self):
    # Once the loop computes on TFF's worker, and once the two workers of
    # remote_workers.py are up: one line each, every worker gone.
    err = _stopped(self, 'own_loop.py', signal.SIGINT, b'worker_binary', 1)
    self.assertEqual(
        err.strip().splitlines(),
        [
            'own_loop.py: stopped by SIGINT; nothing is kept (its ledgers are'
            ' in memory)'
        ],
    )
    err = _stopped(
        self, 'remote_workers.py', signal.SIGTERM, b'tff_priv.worker', 2
    )
    self.assertEqual(
        err.strip().splitlines(),
        [
            'remote_workers.py: stopped by SIGTERM; the workers it started'
            ' stop with it'
        ],
    )

  def test_remote_workers_on_loopback(self):
    result = _example('remote_workers.py', cwd=tempfile.mkdtemp())
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertRegex(
        result.stdout,
        r'eps = \d+\.\d{3} at delta = 1e-5 after 3 rounds on 2 ' 'workers',
    )


if __name__ == '__main__':
  absltest.main()
