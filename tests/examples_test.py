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
from tff_priv.mechanisms import blt as blt_lib

pytestmark = pytest.mark.slow


def _example(name, *args, cwd):
  return subprocess.run(
      [sys.executable, os.path.join(script_runs.ROOT, 'examples', name),
       *args],
      capture_output=True, text=True, cwd=cwd, env=script_runs.env(),
      timeout=script_runs.TIMEOUT, check=False,
  )


class ExamplesTest(absltest.TestCase):

  def test_own_loop_charges_every_factory(self):
    result = _example('own_loop.py', cwd=tempfile.mkdtemp())
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    lines = result.stdout.strip().splitlines()
    self.assertEqual(
        [line.split(':')[0] for line in lines],
        ['smp', 'dp_fedavg', 'udp', 'distortion', 'ldp', 'blt'],
    )
    for line in lines:
      self.assertRegex(line, r'eps = \d+\.\d{3} at delta = 1e-05 after 5 rounds')
    # BLT: one stream charged once, Gaussian(z / sensitivity) under zero-out.
    sensitivity = blt_lib.optimize(5).sensitivity(5)
    stream = dp_accounting.rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL
    ).compose(dp_accounting.GaussianDpEvent(2.0 / sensitivity))
    self.assertEqual(lines[-1], f'blt: eps = {stream.get_epsilon(1e-5):.3f} '
                     'at delta = 1e-05 after 5 rounds')
    bad = _example('own_loop.py', 'nope', cwd=tempfile.mkdtemp())
    self.assertNotEqual(bad.returncode, 0)
    self.assertIn("unknown mechanism 'nope'", bad.stderr)

  def test_train_model_resumes_with_its_ledger(self):
    root = os.path.join(tempfile.mkdtemp(), 'run')
    first = _example('train_model.py', root, cwd=tempfile.mkdtemp())
    self.assertEqual(first.returncode, 0, first.stderr[-3000:])
    claimed = 'eps = 7.998 at delta = 1e-5 after 20 charged rounds'
    self.assertIn(claimed, first.stdout)
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
