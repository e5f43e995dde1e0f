"""Tests for tff_priv.benchmarks.fedavg."""

import math

import tensorflow as tf

from tff_priv.benchmarks import fedavg


class FedAvgTest(tf.test.TestCase):
  """The benchmark's parts.

  The run itself: tests/scripts/measure_fedavg_script_test.py.
  """

  def test_result_line(self):
    result = fedavg.Result({'accuracy': 0.5}, [3.0, 1.0, 2.0], 0.25)
    self.assertEqual(result.mean_later_round_seconds, 1.5)
    self.assertEqual(
        fedavg.format_result('digits', result),
        "RESULT task=digits test_metrics={'accuracy': 0.5} first_round_s=3.00 "
        'mean_later_round_s=1.50 eval_s=0.2',
    )

  def test_one_round_has_no_later_mean(self):
    result = fedavg.Result({}, [3.0], 0.0)
    self.assertTrue(math.isnan(result.mean_later_round_seconds))

  def test_bad_options(self):
    with self.assertRaisesRegex(ValueError, 'task'):
      fedavg.Options(task='imagenet')
    with self.assertRaisesRegex(ValueError, 'rounds'):
      fedavg.Options(task='digits', rounds=0)


if __name__ == '__main__':
  tf.test.main()
