"""scripts/audit.py end to end at a tiny trial count."""

import json
import os
import tempfile
import unittest

import pytest

from tests import script_runs

pytestmark = pytest.mark.slow


class AuditScriptTest(unittest.TestCase):
  """A subprocess, then main() in one interpreter.

  One run as a user runs it (every factory's row and the training run's), then
  main() in process.
  """

  def test_json_has_a_row_per_mechanism_and_the_training_run(self):
    with tempfile.TemporaryDirectory() as tmp:
      plot = os.path.join(tmp, 'audit.png')
      result = script_runs.run(
          'audit.py',
          '--trials=4',
          '--vectorized_trials=4',
          '--dimension=5',
          '--format=json',
          f'--plot={plot}',
          '--one_run',
          '--one_run_canaries=20',
          '--one_run_rounds=1',
          '--one_run_epsilon=2',
      )
      self.assertEqual(result.returncode, 0, result.stderr[-3000:])
      with open(plot, 'rb') as f:
        self.assertEqual(f.read(8), b'\x89PNG\r\n\x1a\n')
    rows = json.loads(result.stdout)
    self.assertEqual(len(rows), 10)  # The 9 factory rows and the run's.
    factories, last = rows[:-1], rows[-1]
    self.assertEqual(
        [r['mechanism'].split()[0] for r in factories],
        [
            'dp_fedavg',
            'dp_fedavg',
            'blt',
            'bandmf',
            'smp',
            'udp',
            'distortion',
            'ldp',
            'ldp',
        ],
    )
    self.assertIn('adaptive', factories[1]['mechanism'])
    for row in factories:
      self.assertEqual(row['trials'], 4)
      self.assertEqual(row['verdict'], 'pass')  # 2 trials can show nothing.
      self.assertEqual(row['empirical_lower_bound'], 0.0)
      self.assertEqual(row['mu_lower_bound'], 0.0)
      self.assertEqual(row['alpha'], 1e-3)
      self.assertGreaterEqual(row['max_showable_epsilon'], row['max_showable'])
      self.assertGreater(row['accounted_epsilon'], 0.0)
    self.assertEqual(
        [r['vectorized'] for r in factories],
        [True, False, True, True, False, True, False, True, True],
    )
    self.assertEqual(last['mechanism'], 'udp training run (one-run audit)')
    self.assertEqual(last['unit'], 'example')
    self.assertEqual(last['verdict'], 'pass')
    self.assertAlmostEqual(last['accounted_epsilon'], 2.0, places=3)
    self.assertLessEqual(last['empirical_lower_bound'], last['max_showable'])
    self.assertGreaterEqual(last['fdp_mu_lower_bound'], 0.0)
    # Quiet without --verbose: no TF or absl log line from the training run.
    self.assertNotIn('INFO', result.stderr)
    self.assertNotIn('I1', result.stderr[:2])

  def test_power_plot_and_one_run_sweep(self):
    with tempfile.TemporaryDirectory() as tmp:
      plot = os.path.join(tmp, 'power.png')
      power, sweep = script_runs.run_main(
          'audit.py',
          (f'--power_plot={plot}', '--seeds=1'),
          (
              '--one_run_sweep=1,0',
              '--one_run_canaries=20',
              '--one_run_rounds=1',
              '--one_run_epsilon=2',
          ),
      )
      self.assertEqual(power.returncode, 0, power.stderr[-3000:])
      with open(plot, 'rb') as f:
        self.assertEqual(f.read(8), b'\x89PNG\r\n\x1a\n')
    self.assertIn('| claimed eps | true = 1 x claim', power.stdout)
    self.assertEqual(sweep.returncode, 0, sweep.stderr[-3000:])
    lines = sweep.stdout.strip().splitlines()
    self.assertIn('Steinke eps lower bound', lines[0])
    self.assertTrue(lines[2].startswith('| 1 |'))
    self.assertTrue(lines[3].startswith('| 0 | 0 |'))
    self.assertIn('steinke_epsilon_lower_bound: refutes eps 2', lines[4])
    self.assertIn('fdp_epsilon_lower_bound: refutes eps 2', lines[5])


if __name__ == '__main__':
  unittest.main()
