"""Tests for tff_priv.experiments.one_run_audit: the run and its table row."""

import pytest
import tensorflow as tf

from tff_priv.auditing import canary_examples
from tff_priv.auditing import one_run
from tff_priv.experiments import one_run_audit


class OneRunAuditTest(tf.test.TestCase):

  def test_config_is_a_udp_run_with_canary_examples(self):
    config = one_run_audit.config(canaries=50, rounds=3, epsilon=2.0)
    self.assertEqual(config.mechanism, 'udp')
    self.assertEqual(config.audit_canaries, 50)
    self.assertEqual(config.total_rounds, 3)
    self.assertEqual(config.params['epsilon'], 2.0)
    with self.assertRaises(ValueError):
      one_run_audit.config(canaries=1)

  @pytest.mark.slow
  def test_max_showable_is_the_all_right_bound_of_the_best_row(self):
    m, delta = 200, 1e-5
    alpha = canary_examples.ALPHA / len(canary_examples.GUESS_FRACTIONS)
    # Grid fraction 1.0 guesses all 200 (k = 100 each way).
    self.assertGreaterEqual(
        one_run_audit.max_showable(m, delta),
        one_run.epsilon_lower_bound(m, 200, 200, delta, alpha),
    )
    self.assertGreater(
        one_run_audit.max_showable(2000, delta),
        one_run_audit.max_showable(200, delta),
    )

  def test_row_reads_the_summary(self):
    config = one_run_audit.config(canaries=200, rounds=10)
    summary = {
        'privacy': {
            'empirical': {
                'accounted_epsilon': 4.0,
                'epsilon_lower_bound': 0.2,
                'num_canaries': 200,
                'delta': 1e-5,
                'guesses': 100,
                'correct': 66,
                'fdp_mu_lower_bound': 0.1,
                'fdp_epsilon_lower_bound': 0.3,
            }
        }
    }
    row = one_run_audit.row(config, summary)
    self.assertEqual(row['verdict'], 'pass')
    self.assertEqual(row['empirical_lower_bound'], 0.2)
    self.assertEqual(row['accounted_epsilon'], 4.0)
    self.assertIn('200 canary examples', row['setting'])
    self.assertEqual(row['fdp_epsilon_lower_bound'], 0.3)
    summary['privacy']['empirical']['epsilon_lower_bound'] = 4.5
    self.assertEqual(one_run_audit.row(config, summary)['verdict'], 'FAIL')

  def test_low_interference_config(self):
    config = one_run_audit.config(
        canaries=50, rounds=2, **one_run_audit.LOW_INTERFERENCE
    )
    self.assertEqual(config.task, 'mnist5k')
    self.assertEqual(config.task_options['model'], 'softmax')

  def test_largest_refuted(self):
    rows = [
        {'fraction': f, 'claimed_epsilon': 1.0, 'b': b}
        for f, b in ((1.0, 0.1), (0.1, 0.8), (0.05, 1.5), (0.0, 2.4))
    ]
    self.assertEqual(one_run_audit.largest_refuted(rows, 'b'), 0.05)
    self.assertIsNone(one_run_audit.largest_refuted(rows[:2], 'b'))

  @pytest.mark.slow
  def test_noise_sweep_runs_each_fraction(self):
    # Tiny runs: the noise of fraction f is z f, the bounds come from the
    # summary's one-run entry; no noise shows at least as much.
    rows = one_run_audit.noise_sweep(
        [1.0, 0.0], self.get_temp_dir(), canaries=40, rounds=2
    )
    self.assertEqual([r['fraction'] for r in rows], [1.0, 0.0])
    self.assertGreater(rows[0]['noise_multiplier'], 0.0)
    self.assertEqual(rows[1]['noise_multiplier'], 0.0)
    for row in rows:
      self.assertGreaterEqual(row['steinke_epsilon_lower_bound'], 0.0)
      self.assertGreaterEqual(row['fdp_mu_lower_bound'], 0.0)


if __name__ == '__main__':
  tf.test.main()
