"""scripts/udp_experiments.py end to end on the digits task, in a subprocess."""

import json
import os
import tempfile

import pytest
import tensorflow as tf

from tests import script_runs
from tff_priv.program import layout

pytestmark = pytest.mark.slow


def _run(output_dir, *extra):
  return script_runs.run(
      'udp_experiments.py',
      '--task=digits',
      '--clients=6',
      '--samples_per_client=20',
      '--epsilons=8',
      '--clients_per_round=3',
      '--calibrations=tight',
      '--grid=1,2',
      '--initial_rounds=3',
      f'--output_dir={output_dir}',
      *extra,
  )


class UdpExperimentsScriptTest(tf.test.TestCase):

  def test_end_to_end(self):
    out = tempfile.mkdtemp(dir=self.get_temp_dir())
    result = _run(out)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    summaries = {}
    for label in ('eps8_K3_tight_T1', 'eps8_K3_tight_T2', 'eps8_K3_tight_crd'):
      with open(layout.path(os.path.join(out, label), layout.SUMMARY)) as f:
        summaries[label] = json.load(f)
    for label, summary in summaries.items():
      # The analyst's figure (the smaller of the amplified and the server's)
      # meets the target; the server's own is reported beside it.
      analyst, server = summary['privacy']['guarantees']
      self.assertEqual(
          (analyst['adversary'], server['adversary']), ('analyst', 'server')
      )
      self.assertLessEqual(analyst['epsilon'], 8.0 + 1e-6, label)
      self.assertLessEqual(analyst['epsilon'], server['epsilon'] + 1e-9)
      self.assertTrue(summary['parameters']['holdout_validation'])
    self.assertBetween(summaries['eps8_K3_tight_crd']['rounds_run'], 1, 3)
    with open(os.path.join(out, 'summary.md')) as f:
      table = f.read()
    self.assertIn('| 8 | 3 | tight | 1: ', table)
    self.assertIn(table.splitlines()[-1], result.stdout)
    with open(os.path.join(out, 'udp_loss_vs_rounds.png'), 'rb') as f:
      self.assertEqual(f.read(8), b'\x89PNG\r\n\x1a\n')

  def test_bad_calibration_fails_in_one_line(self):
    out = tempfile.mkdtemp(dir=self.get_temp_dir())
    result = _run(out, '--calibrations=loose')
    self.assertEqual(result.returncode, 2)
    self.assertEqual(
        result.stderr.strip().splitlines()[-1],
        "udp_experiments.py: error: calibration must be one of ('tight', "
        "'paper'), got 'loose' (see --help)",
    )


if __name__ == '__main__':
  tf.test.main()
