"""Tests of the Gaussian-DP (mu) bounds and the audit's decision."""

import math

from absl.testing import absltest
import dp_accounting
import numpy as np
import pytest

from tff_priv.auditing import bounds
from tff_priv.auditing import tradeoff


class TradeoffTest(absltest.TestCase):

  def test_gdp_epsilon_is_dp_accountings_gaussian(self):
    for z in (0.5, 1.0, 3.0):
      pld = (
          dp_accounting.pld.PLDAccountant()
          .compose(dp_accounting.GaussianDpEvent(z))
          .get_epsilon(1e-5)
      )
      # The PLD accountant is pessimistic by its discretisation (1e-4).
      self.assertAlmostEqual(tradeoff.gdp_epsilon(1 / z, 1e-5), pld, delta=2e-3)
      self.assertAlmostEqual(
          tradeoff.gdp_mu(tradeoff.gdp_epsilon(1 / z, 1e-5), 1e-5),
          1 / z,
          places=6,
      )
    self.assertEqual(tradeoff.gdp_epsilon(0.0, 1e-5), 0.0)

  def test_mu_bound_formula(self):
    # 300 of 1000 each way: Phi^-1(1 - u) - Phi^-1(u), u the CP bound.
    u = float(bounds.clopper_pearson_upper(300, 1000, 0.025))
    from scipy import stats  # pylint: disable=g-import-not-at-top

    self.assertAlmostEqual(
        float(tradeoff.mu_lower_bound(300, 1000, 300, 1000, 0.05)),
        stats.norm.isf(u) - stats.norm.ppf(u),
        places=9,
    )
    self.assertEqual(
        float(tradeoff.mu_lower_bound(500, 1000, 500, 1000, 0.05)), 0.0
    )
    self.assertAlmostEqual(
        tradeoff.max_mu_lower_bound(1000, 1000, 0.05),
        float(tradeoff.mu_lower_bound(0, 1000, 0, 1000, 0.05)),
    )

  @pytest.mark.slow
  def test_mu_bound_coverage_on_a_gaussian(self):
    # N(0, 1) vs N(1, 1) is exactly 1-GDP: the held-out bound at alpha = 0.05
    # must stay below 1 in >= 95% of fixed-seed repeats (here: all but 5 of
    # 100; seeds are fixed, so the count is deterministic), and it is close.
    exceed, seen = 0, []
    for seed in range(100):
      rng = np.random.default_rng(seed)
      s0, s1 = rng.normal(0, 1, 4000), rng.normal(1, 1, 4000)
      choose, held = tradeoff.split(4000, 0.5, rng)
      decision = tradeoff.decide(
          [('x', s0, s1)], choose, held, 1e-5, 0.1
      )  # mu bound at 0.05
      seen.append(decision.mu_lower_bound)
      exceed += decision.mu_lower_bound > 1.0
    self.assertLessEqual(exceed, 5)
    self.assertGreater(np.median(seen), 0.85)

  def test_separated_samples_give_the_largest_mu(self):
    # Constant statistics 0 and 1 are separated by any threshold in [0, 1):
    # the best test makes no error, whichever way round.
    for sign in (1.0, -1.0):
      test, mu = tradeoff.best_mu_threshold_test(
          np.zeros(100), sign * np.ones(100), 0.05
      )
      self.assertEqual(test.errors(np.zeros(100), sign * np.ones(100)), (0, 0))
      self.assertAlmostEqual(mu, tradeoff.max_mu_lower_bound(100, 100, 0.05))

  def test_violates_profile(self):
    # A pure eps = 1 claim: FPR + e FNR >= 1. The point (0.1, 0.1) breaks it,
    # (0.3, 0.3) does not.
    pure = lambda eps: np.where(eps >= 1, 0.0, 1.0)
    self.assertTrue(tradeoff.violates_profile(0.1, 0.1, pure))
    self.assertFalse(tradeoff.violates_profile(0.3, 0.3, pure))
    # Asymmetric: 0.02 + e * 0.5 >= 1 holds, 0.5 + e * 0.02 < 1 does not.
    self.assertTrue(tradeoff.violates_profile(0.5, 0.02, pure))
    self.assertTrue(tradeoff.violates_profile(0.02, 0.5, pure))

    # Nothing below the diagonal FPR + FNR = 1 breaks any claim; the profile
    # is not read.
    def unread(eps):
      raise AssertionError(f'read at {eps}')

    self.assertFalse(tradeoff.violates_profile(0.5, 0.5, unread))
    self.assertFalse(tradeoff.violates_profile(0.9, 0.3, unread))

  def test_violates_profile_reads_only_where_a_side_can_be_positive(self):
    read = []

    def profile(eps):
      read.append(eps)
      return np.zeros_like(eps)

    self.assertTrue(tradeoff.violates_profile(0.01, 0.05, profile))
    # Beyond log(0.95 / 0.01) = 4.55 both sides are negative.
    self.assertLess(read[0].max(), math.log(0.95 / 0.01))
    self.assertGreater(read[0].max(), math.log(0.95 / 0.01) - 0.05)

  def test_profile_of_reads_a_pld_grid_in_one_pass_as_point_by_point(self):
    event = dp_accounting.PoissonSampledDpEvent(
        0.5, dp_accounting.GaussianDpEvent(1.0)
    )
    grid = np.linspace(0.0, 6.0, 13)
    # A coarse PLD (interval 1e-2): the same code path, read in milliseconds.
    coarse = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-2)
    for accountant in (
        coarse.compose(event, 2),
        dp_accounting.rdp.RdpAccountant().compose(event, 2),
    ):
      with self.subTest(type(accountant).__name__):
        np.testing.assert_allclose(
            tradeoff.profile_of(accountant)(grid),
            [accountant.get_delta(float(e)) for e in grid],
            rtol=1e-12,
        )


if __name__ == '__main__':
  absltest.main()
