"""scripts/ldp_table1.py end to end on the digits task, in a subprocess."""

import json
import os
import tempfile

import pytest
import tensorflow as tf

from tests import script_runs
from tff_priv.program import layout

pytestmark = pytest.mark.slow


def _args(output_dir, *extra):
  return (
      '--task=digits',
      '--model=mlp',
      '--clients=4',
      '--rounds=1',
      '--batch_size=32',
      '--epsilons=1,10',
      '--modes=weights,deltas',
      f'--output_dir={output_dir}',
      *extra,
  )


def _run(output_dir, *extra):
  return script_runs.run('ldp_table1.py', *_args(output_dir, *extra))


class LdpTable1ScriptTest(tf.test.TestCase):

  def test_end_to_end_resume_and_a_bad_mode(self):
    out = tempfile.mkdtemp(dir=self.get_temp_dir())
    result = _run(out)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    # One run directory per cell: noise-free + 2 modes x 2 eps, 1 run each.
    labels = sorted(
        d for d in os.listdir(out) if os.path.isdir(os.path.join(out, d))
    )
    self.assertEqual(
        labels,
        [
            'deltas_eps10_run0',
            'deltas_eps1_run0',
            'noise_free_run0',
            'weights_eps10_run0',
            'weights_eps1_run0',
        ],
    )
    for label in labels:
      with open(layout.path(os.path.join(out, label), layout.SUMMARY)) as f:
        summary = json.load(f)
      self.assertBetween(summary['final_test_accuracy'], 0.0, 1.0)
      if label.startswith('noise_free'):
        self.assertEqual(summary['mechanism'], 'none')
        continue
      self.assertEqual(summary['mechanism'], 'ldp')
      mode = label.split('_')[0]
      self.assertEqual(summary['parameters']['params']['ldp_mode'], mode)
      closed = summary['privacy']['closed_form']
      eps0 = float(label.split('_')[1][3:])
      self.assertEqual(
          closed['plain_composition_epsilon'],
          closed['num_values'] * closed['rounds'] * eps0,
      )
    # The printed table has the paper's row and one row per mode.
    self.assertIn('97.26', result.stdout)
    self.assertIn('measured, weights', result.stdout)
    self.assertIn('measured, deltas', result.stdout)
    self.assertIn("the run's ledger", result.stdout)
    with open(os.path.join(out, 'table.md')) as f:
      self.assertIn('96.24', f.read())
    with open(os.path.join(out, 'accuracy_vs_eps.png'), 'rb') as f:
      self.assertEqual(f.read(8), b'\x89PNG\r\n\x1a\n')

    # A rerun skips every finished run: nothing is trained again. It and a
    # bad mode call main() in one interpreter.
    again, bad = script_runs.run_main(
        'ldp_table1.py',
        _args(out),
        _args(tempfile.mkdtemp(dir=self.get_temp_dir()), '--modes=both'),
    )
    self.assertEqual(bad.returncode, 2, bad.stderr[-3000:])
    self.assertStartsWith(
        bad.stderr.strip().splitlines()[-1],
        'ldp_table1.py: error: mode must be one of',
    )
    self.assertEqual(again.returncode, 0, again.stderr[-3000:])
    self.assertNotIn('[1/5]', again.stderr)
    self.assertEqual(
        again.stdout.split('\n\n')[0], result.stdout.split('\n\n')[0]
    )


if __name__ == '__main__':
  tf.test.main()
