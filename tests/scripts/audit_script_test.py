"""scripts/audit.py end to end at a tiny trial count, in a subprocess."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import pytest

pytestmark = pytest.mark.slow

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')
_SCRIPT = os.path.join(_ROOT, 'scripts', 'audit.py')


class AuditScriptTest(unittest.TestCase):

  def test_json_has_a_row_per_mechanism(self):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(_ROOT),
               TF_CPP_MIN_LOG_LEVEL='3')
    with tempfile.TemporaryDirectory() as tmp:
      plot = os.path.join(tmp, 'audit.png')
      result = subprocess.run(
          [sys.executable, _SCRIPT, '--trials=4', '--dimension=5',
           '--format=json', f'--plot={plot}'],
          capture_output=True, text=True, timeout=300, check=False, env=env)
      self.assertEqual(result.returncode, 0, result.stderr[-3000:])
      with open(plot, 'rb') as f:
        self.assertEqual(f.read(8), b'\x89PNG\r\n\x1a\n')
    rows = json.loads(result.stdout)
    self.assertEqual(
        [r['mechanism'].split()[0] for r in rows],
        ['dp_fedavg', 'smp', 'udp', 'distortion', 'ldp', 'ldp'])
    for row in rows:
      self.assertEqual(row['trials'], 4)
      self.assertEqual(row['verdict'], 'pass')  # 2 trials can show nothing.
      self.assertEqual(row['empirical_lower_bound'], 0.0)
      self.assertGreater(row['accounted_epsilon'], 0.0)

  def test_one_run_adds_a_training_run_row(self):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(_ROOT),
               TF_CPP_MIN_LOG_LEVEL='3')
    result = subprocess.run(
        [sys.executable, _SCRIPT, '--trials=4', '--dimension=5',
         '--format=json', '--one_run', '--one_run_canaries=20',
         '--one_run_rounds=1', '--one_run_epsilon=2'],
        capture_output=True, text=True, timeout=300, check=False, env=env)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    rows = json.loads(result.stdout)
    self.assertEqual(len(rows), 7)
    last = rows[-1]
    self.assertEqual(last['mechanism'], 'udp training run (one-run audit)')
    self.assertEqual(last['unit'], 'example')
    self.assertEqual(last['verdict'], 'pass')
    self.assertAlmostEqual(last['accounted_epsilon'], 2.0, places=3)
    self.assertLessEqual(last['empirical_lower_bound'], last['max_showable'])


if __name__ == '__main__':
  unittest.main()
