"""Power and false alarms of the vectorised factory audit (numpy replays).

`power.replay` draws the exact distribution of a vectorised trial of a
Gaussian factory (tests/auditing/aggregator_audit_test.py checks the factory
against it) and runs the audit's own decision. Every replay is seeded, so the
counts below are deterministic: nothing here can fail by chance.
"""

from absl.testing import absltest
import pytest

from tff_priv.auditing import power
from tff_priv.auditing import tradeoff

pytestmark = [pytest.mark.statistical, pytest.mark.slow]


class PowerTest(absltest.TestCase):

  def test_targets(self):
    # Claims 0.5 and 4 (the ends of [0.5, 4]), 10^5 trials, alpha = 1e-3:
    # true eps = 1.5 x claim is flagged in >= 95% of 20 audits (all 20 here),
    # an honest factory in none of 20.
    for claim in (0.5, 4.0):
      with self.subTest(claim=claim):
        self.assertGreaterEqual(power.flag_rate(claim, 1.5, seeds=20), 0.95)
        self.assertEqual(power.flag_rate(claim, 1.0, seeds=20), 0.0)

  def test_false_alarms_below_alpha(self):
    # At alpha = 0.2 (to see any), honest audits flag at most 20 of 100.
    rate = power.flag_rate(1.0, 1.0, seeds=100, trials=2_000, alpha=0.2)
    self.assertLessEqual(rate, 0.2)

  def test_calibration_approaches_the_truth(self):
    rows = power.calibration((1.0,), (1_000, 10_000, 100_000), seeds=3)
    true_eps = power.gaussian_epsilon(1.0)
    mu_bounds = [r['mu_epsilon_lower_bound'] for r in rows]
    self.assertEqual(mu_bounds, sorted(mu_bounds))
    self.assertLess(mu_bounds[-1], true_eps)
    self.assertGreater(mu_bounds[-1], 0.85 * true_eps)
    for r in rows:
      self.assertLessEqual(r['epsilon_lower_bound'], true_eps)
    self.assertAlmostEqual(
        tradeoff.gdp_epsilon(1.0, 1e-5), true_eps, delta=2e-3)


if __name__ == '__main__':
  absltest.main()
