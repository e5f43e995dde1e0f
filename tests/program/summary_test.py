"""Tests of tff_priv.program.summary: what train.py's last line says."""

import unittest

from tff_priv.program import summary


class AccuracyLineTest(unittest.TestCase):

  def test_final_and_best_with_its_round(self):
    self.assertEqual(
        summary.accuracy_line(
            {
                'final_test_accuracy': 0.20812,
                'best_test_accuracy': 0.38549,
                'best_round': 12,
            }
        ),
        'test_accuracy=0.2081 (best 0.3855 at round 12)',
    )

  def test_a_restarted_model_gives_its_own_round_too(self):
    self.assertEqual(
        summary.accuracy_line(
            {
                'final_test_accuracy': 0.5,
                'best_test_accuracy': 0.625,
                'best_round': 14,
                'round_offset': 10,
            }
        ),
        'test_accuracy=0.5 (best 0.625 at round 14, model round 4)',
    )

  def test_a_run_without_accuracy(self):
    self.assertEqual(
        summary.accuracy_line(
            {
                'final_test_accuracy': None,
                'best_test_accuracy': None,
                'best_round': None,
            }
        ),
        'test_accuracy=n/a',
    )


if __name__ == '__main__':
  unittest.main()
