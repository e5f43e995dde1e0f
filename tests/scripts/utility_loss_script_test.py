"""scripts/utility_loss.py end to end on the digits task, in a subprocess."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tests import script_runs

pytestmark = pytest.mark.slow

_RUNS = (
    ['rho1_noise_free']
    + [f'rho1_{l}_seed{s}' for l in ('tv0.5', 'eps8') for s in (0, 1)]
    + [
        f'rho0.5_{l}_seed{s}'
        for l in ('noise_free', 'tv0.5', 'eps8')
        for s in (0, 1)
    ]
)


def _args(output_dir, *extra):
  return (
      '--task=digits',
      '--num_clients=3',
      '--samples_per_client=30',
      '--test_examples=100',
      '--rounds=2',
      '--local_steps=2',
      '--reference_steps=300',
      '--rhos=0.5',
      '--target_tvs=0.5',
      '--epsilons=8',
      '--seeds=2',
      f'--output_dir={output_dir}',
      *extra,
  )


def _run(output_dir, *extra):
  return script_runs.run('utility_loss.py', *_args(output_dir, *extra))


def _model(run_dir, name='final_model.npz'):
  with np.load(os.path.join(run_dir, name)) as saved:
    return np.concatenate(
        [saved[f'trainable_{i}'].ravel() for i in range(2)]
    ).astype(np.float64)


def _row(table, rho, level):
  for line in table.splitlines():
    if line.startswith(f'| {rho} | {level} |'):
      return [c.strip() for c in line.split('|')[1:-1]]
  raise AssertionError(f'no row {rho} {level} in\n{table}')


class UtilityLossScriptTest(tf.test.TestCase):

  def test_end_to_end_resume_and_a_bad_flag(self):
    out = os.path.join(self.get_temp_dir(), 'out')
    result = _run(out)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertIn(f'table: {out}/summary.md', result.stdout)
    self.assertCountEqual(
        [d for d in os.listdir(out) if os.path.isdir(os.path.join(out, d))],
        _RUNS,
    )
    summaries = {}
    for name in _RUNS:
      with open(os.path.join(out, name, 'summary.json')) as f:
        summaries[name] = json.load(f)
      # One data split and one initial model for every run.
      self.assertAllEqual(
          _model(os.path.join(out, name), 'initial_model.npz'),
          _model(os.path.join(out, _RUNS[0]), 'initial_model.npz'),
      )
    ref = np.load(os.path.join(out, 'reference.npz'))
    w_star = ref['w_star']
    model = lambda name: _model(os.path.join(out, name))
    d = lambda name: float(np.sum((model(name) - w_star) ** 2))
    with open(os.path.join(out, 'summary.md')) as f:
      table = f.read()
    # W* is closer to the optimum than W: the runs are farther from it.
    self.assertLess(float(ref['grad_norm']), 0.1)
    w_row = _row(table, 1, 'noise_free')
    self.assertAllClose(float(w_row[5]), d('rho1_noise_free'), rtol=1e-3)
    self.assertEqual(w_row[4], 'inf')  # Noise-free: no DP.
    eps_row = _row(table, 0.5, 'eps8')
    self.assertBetween(float(eps_row[4]), 7.9, 8.0 + 1e-6)  # The ledger's.
    self.assertAllClose(
        float(eps_row[5]),
        np.mean([d(f'rho0.5_eps8_seed{s}') for s in (0, 1)]),
        rtol=1e-3,
    )
    tv = summaries['rho0.5_tv0.5_seed0']['parameters']['resolved']
    self.assertAllClose(tv['tv_upper'], 0.5)
    self.assertEqual(
        _row(table, 0.5, 'tv0.5')[3],
        f'[{tv["tv_lower"]:.2g}, {tv["tv_upper"]:.2g}]',
    )
    # Common random numbers: a seed's W_rho and its TV-calibrated W~ (sigma_e
    # ~1e-4) see the same batches, so they are far closer to each other than
    # the two seeds' W_rho are.
    seeds_apart = np.linalg.norm(
        model('rho0.5_noise_free_seed0') - model('rho0.5_noise_free_seed1')
    )
    self.assertGreater(seeds_apart, 0.0)
    for s in (0, 1):
      self.assertLess(
          np.linalg.norm(
              model(f'rho0.5_tv0.5_seed{s}')
              - model(f'rho0.5_noise_free_seed{s}')
          ),
          0.1 * seeds_apart,
      )
    # The split adds up: sampling + distortion = total (printed to 3 digits).
    for level in ('tv0.5', 'eps8'):
      parts = [float(c.split('±')[0]) for c in _row(table, 0.5, level)[6:9]]
      self.assertAllClose(parts[0] + parts[1], parts[2], rtol=0.02, atol=1e-3)
    self.assertGreater(
        os.path.getsize(os.path.join(out, 'utility_loss.png')), 1000
    )
    # A second invocation runs nothing again.
    mtimes = {
        n: os.path.getmtime(os.path.join(out, n, 'summary.json')) for n in _RUNS
    }
    # The second invocation and a bad flag: main() in one interpreter.
    again, bad = script_runs.run_main(
        'utility_loss.py',
        _args(out),
        _args(os.path.join(self.get_temp_dir(), 'bad'), '--rhos=0'),
    )
    self._check_bad_flag(bad)
    self.assertEqual(again.returncode, 0, again.stderr[-3000:])
    self.assertNotIn('[1/', again.stderr)  # The grid names each run it runs.
    self.assertEqual(
        mtimes,
        {
            n: os.path.getmtime(os.path.join(out, n, 'summary.json'))
            for n in _RUNS
        },
    )
    with open(os.path.join(out, 'summary.md')) as f:
      self.assertEqual(f.read(), table)

  def _check_bad_flag(self, result):
    self.assertEqual(result.returncode, 2, result.stderr[-3000:])
    # One line of error, nothing before it.
    errors = [
        l
        for l in result.stderr.splitlines()
        if l.startswith('utility_loss.py:')
    ]
    self.assertEqual(
        errors,
        [
            'utility_loss.py: error: rhos must be in (0, 1], got 0.0 (see'
            ' --help)'
        ],
    )
    self.assertNotIn('Traceback', result.stderr.split(errors[0])[0])


if __name__ == '__main__':
  tf.test.main()
