"""The scripts in examples/ run as a user runs them and print what they promise."""

import os
import re
import subprocess
import sys
import tempfile

from absl.testing import absltest
import dp_accounting
import pytest

from tests import script_runs
from tff_priv.aggregators import blt

pytestmark = pytest.mark.slow


def _example(name, *args, cwd):
  return subprocess.run(
      [sys.executable, os.path.join(script_runs.ROOT, 'examples', name),
       *args],
      capture_output=True, text=True, cwd=cwd,
      # As a user runs them: the examples quiet TF themselves.
      env={k: v for k, v in script_runs.env().items()
           if k != 'TF_CPP_MIN_LOG_LEVEL'},
      timeout=script_runs.TIMEOUT, check=False,
  )


class ExamplesTest(absltest.TestCase):

  def test_own_loop_charges_every_factory(self):
    result = _example('own_loop.py', cwd=tempfile.mkdtemp())
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    lines = result.stdout.strip().splitlines()
    self.assertEqual(
        [line.split(':')[0] for line in lines],
        ['smp', 'dp_fedavg', 'dp_fedavg_adaptive', 'udp', 'distortion', 'ldp',
         'blt'],
    )
    for line in lines:
      self.assertRegex(line, r'eps = \d+\.\d{3} at delta = 1e-05 after 5 '
                       r'rounds, accuracy 0\.\d{3} on 600 held-out examples$')
    # BLT: one stream (StreamSampler's cyclic schedule, b = 10 > 5 rounds:
    # each client once), calibrated to eps 4, charged once.
    plan = blt.plan_streams(5, 50, 5, participation='cyclic', epsilon=4.0)
    stream = dp_accounting.rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL
    ).compose(plan.event())
    self.assertStartsWith(
        lines[-1], f'blt: eps = {stream.get_epsilon(1e-5):.3f} at delta')
    self.assertBetween(stream.get_epsilon(1e-5), 3.99, 4.0)
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

  def test_remote_workers_on_loopback(self):
    result = _example('remote_workers.py', cwd=tempfile.mkdtemp())
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertRegex(result.stdout,
                     r'eps = \d+\.\d{3} at delta = 1e-5 after 3 rounds on 2 '
                     'workers')


if __name__ == '__main__':
  absltest.main()
