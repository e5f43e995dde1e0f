"""scripts/utility_loss.py end to end on the digits task, in a subprocess."""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf

_SCRIPT = os.path.join(
    os.path.dirname(__file__), '..', '..', 'scripts', 'utility_loss.py'
)


def _run(output_dir, *extra):
  return subprocess.run(
      [
          sys.executable, _SCRIPT, '--task=digits', '--clients=4',
          '--samples_per_client=50', '--test_examples=200', '--rounds=3',
          '--reference_steps=3000', '--rhos=1,0.5', '--target_tvs=0.5',
          '--epsilons=8', '--seeds=2', f'--output_dir={output_dir}', *extra,
      ],
      capture_output=True,
      text=True,
      timeout=600,
      check=False,
      env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2'},
  )


class UtilityLossScriptTest(tf.test.TestCase):

  def test_end_to_end_and_resume(self):
    out = tempfile.mkdtemp(dir=self.get_temp_dir())
    result = _run(out)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    with open(os.path.join(out, 'results.jsonl')) as f:
      records = {r['key']: r for r in map(json.loads, f)}
    # W once; rho = 1: 2 seeds x (tv, eps); rho = 0.5: 2 seeds x (none, tv, eps).
    self.assertLen(records, 1 + 4 + 6)
    ref = np.load(os.path.join(out, 'reference.npz'))
    # W* is the optimum of a strongly convex objective: its gradient is small
    # and every trained model is farther from it than it is from itself.
    self.assertLess(float(ref['grad_norm']), 0.05)
    w = records['none/rho=1/seed=0']
    self.assertGreater(w['sq_distance'], 0.0)
    self.assertEqual(w['noise_stddev'], 0.0)
    self.assertEqual(w['rdp_epsilon'], float('inf'))
    for seed in (0, 1):
      tv = records[f'tv0.5/rho=0.5/seed={seed}']
      self.assertAllClose(tv['tv_upper'], 0.5)  # Calibrated to its target.
      self.assertGreater(tv['noise_stddev'], 0.0)
      dp = records[f'eps8/rho=0.5/seed={seed}']
      # The ledger's eps of the noise it used meets the calibration target.
      self.assertBetween(dp['rdp_epsilon'], 7.9, 8.0 + 1e-6)
      # Distortion that strong moves the model away from W*.
      self.assertGreater(dp['sq_distance'], w['sq_distance'])
      # Bernoulli mini-batches: different seeds, different models.
    self.assertNotEqual(
        records['none/rho=0.5/seed=0']['sq_distance'],
        records['none/rho=0.5/seed=1']['sq_distance'],
    )
    summary = open(os.path.join(out, 'summary.md')).read()
    self.assertIn('| 0.5 | eps8 |', summary)
    self.assertTrue(os.path.exists(os.path.join(out, 'utility_loss.png')))
    # The decomposition in the table adds up: sampling + distortion = total.
    for line in summary.splitlines():
      if line.startswith('| 0.5 | tv0.5 |'):
        cells = [c.strip() for c in line.split('|')]
        sampling, distortion, total = (
            float(cells[i].split('±')[0]) for i in (7, 8, 9)
        )
        self.assertAllClose(sampling + distortion, total, rtol=0.02, atol=1e-3)
    # Resuming runs nothing new.
    again = _run(out)
    self.assertEqual(again.returncode, 0, again.stderr[-3000:])
    with open(os.path.join(out, 'results.jsonl')) as f:
      self.assertLen(f.readlines(), 11)

  def test_bad_flag(self):
    result = _run(tempfile.mkdtemp(dir=self.get_temp_dir()), '--rhos=0')
    self.assertEqual(result.returncode, 2)
    # One line of error (after whatever TF prints when it is imported).
    last = result.stderr.strip().splitlines()[-1]
    self.assertStartsWith(last, 'utility_loss.py: error: --rhos')
    self.assertIn('(0, 1]', last)


if __name__ == '__main__':
  tf.test.main()
