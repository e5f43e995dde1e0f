"""Power and false alarms of the vectorised factory audit (numpy replays)."""

from absl.testing import absltest
import pytest

from tests import binomial_sizes
from tff_priv.auditing import power
from tff_priv.auditing import tradeoff

pytestmark = [pytest.mark.statistical, pytest.mark.slow]


# The audit's alpha (an honest audit flags with probability <= 1e-3) and the
# probability that a test below fails an honest audit.
_ALPHA = power.ALPHA
_FALSE_ALARM = 1e-3
# Replays per claim: enough that an audit of 50% power fails the power check
# with probability >= 0.99, while one of 95% fails it with <= 1e-3.
_SEEDS = binomial_sizes.repeats_for(0.5, 0.99, 0.05, _FALSE_ALARM)


class PowerTest(absltest.TestCase):
  """Seeded replays of the audits of Gaussian factories.

  `power.replay` draws the exact distribution of a vectorised trial of a
  Gaussian factory (tests/auditing/aggregator_audit_test.py checks the factory
  against it) and runs the audit's own decision. Every replay is seeded, so the
  counts below are deterministic; each test's size and threshold come from the
  exact binomial (tests/binomial_sizes.py) for its stated rates, so that they
  would hold for any seeds. The honest audits run at 2,000 trials: the audit's
  bound is valid at any trial count. The calibration table at 10^5 trials runs
  with `--all` only (exhaustive).
  """

  def test_targets(self):
    # Claims 0.5 and 4 (the ends of [0.5, 4]), 10^5 trials, alpha = 1e-3:
    # true eps = 1.5 x claim is flagged in >= 95% of audits (_SEEDS each).
    seeds = _SEEDS
    misses = binomial_sizes.allowed_failures(seeds, 0.05, _FALSE_ALARM)
    for claim in (0.5, 4.0):
      with self.subTest(claim=claim):
        self.assertGreaterEqual(
            power.flag_rate(claim, 1.5, seeds=seeds), 1 - misses / seeds
        )

  def test_honest_audits_pass_at_a_small_trial_count(self):
    # The bound holds at any trial count: 2,000 trials, as many seeds as
    # above; an honest audit flags at most the binomial's allowance.
    seeds = _SEEDS
    allowed = binomial_sizes.allowed_failures(seeds, _ALPHA, _FALSE_ALARM)
    for claim in (0.5, 4.0):
      with self.subTest(claim=claim):
        self.assertLessEqual(
            power.flag_rate(claim, 1.0, seeds=seeds, trials=2_000),
            allowed / seeds,
        )

  def test_false_alarms_below_alpha(self):
    # At alpha = 0.2 (to see any), honest audits flag at most the binomial
    # allowance of 100 (P(Binomial(100, 0.2) > allowance) <= 1e-3).
    allowed = binomial_sizes.allowed_failures(100, 0.2, _FALSE_ALARM)
    rate = power.flag_rate(1.0, 1.0, seeds=100, trials=2_000, alpha=0.2)
    self.assertLessEqual(rate, allowed / 100)

  @pytest.mark.exhaustive
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
        tradeoff.gdp_epsilon(1.0, 1e-5), true_eps, delta=2e-3
    )


if __name__ == '__main__':
  absltest.main()
