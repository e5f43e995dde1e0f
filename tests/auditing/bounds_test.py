"""Tests of the Clopper-Pearson eps lower bounds."""

import math

from absl.testing import absltest
import dp_accounting
import numpy as np

from tff_priv.auditing import bounds


class BoundsTest(absltest.TestCase):

  def test_clopper_pearson_upper_known_values(self):
    # No successes: the bound solves (1 - p)^n = alpha.
    self.assertAlmostEqual(
        float(bounds.clopper_pearson_upper(0, 100, 0.05)),
        1 - 0.05 ** (1 / 100),
        places=10,
    )
    self.assertEqual(float(bounds.clopper_pearson_upper(7, 7, 0.05)), 1.0)
    # Above the point estimate, below 1.
    u = float(bounds.clopper_pearson_upper(30, 100, 0.05))
    self.assertGreater(u, 0.3)
    self.assertLess(u, 0.4)

  def test_perfect_test_reaches_the_maximum(self):
    u = 1 - 0.025 ** (1 / 500)
    self.assertAlmostEqual(
        bounds.max_epsilon_lower_bound(500, 500, 1e-5, 0.05),
        math.log((1 - 1e-5 - u) / u),
        places=9,
    )

  def test_useless_test_gives_zero(self):
    self.assertEqual(
        float(bounds.epsilon_lower_bound(50, 100, 50, 100, 1e-5, 0.05)), 0.0
    )

  def test_both_directions(self):
    a = bounds.epsilon_lower_bound(5, 100, 40, 100, 1e-5, 0.05)
    b = bounds.epsilon_lower_bound(40, 100, 5, 100, 1e-5, 0.05)
    self.assertAlmostEqual(float(a), float(b))
    self.assertGreater(float(a), 0.5)

  def test_coverage_on_a_gaussian_mechanism(self):
    # N(0, 1) vs N(1, 1): the Gaussian mechanism of noise multiplier 1, whose
    # eps at 1e-5 is ~ 4.4; a test chosen on half the samples and bounded on
    # the other half must stay below it in >= 95% of 100 fixed-seed repeats.
    delta = 1e-5
    true_eps = (
        dp_accounting.pld.PLDAccountant()
        .compose(dp_accounting.GaussianDpEvent(1.0))
        .get_epsilon(delta)
    )
    exceed, bounds_seen = 0, []
    for seed in range(100):
      rng = np.random.default_rng(seed)
      s0, s1 = rng.normal(0, 1, 400), rng.normal(1, 1, 400)
      test, _ = bounds.best_threshold_test(s0[:200], s1[:200], delta, 0.05)
      fp, fn = test.errors(s0[200:], s1[200:])
      eps = float(bounds.epsilon_lower_bound(fp, 200, fn, 200, delta, 0.05))
      bounds_seen.append(eps)
      exceed += eps > true_eps
    self.assertLessEqual(exceed, 5)
    self.assertGreater(np.median(bounds_seen), 0.5)  # The test sees the shift.

  def test_best_threshold_test_separates(self):
    test, eps = bounds.best_threshold_test([0, 1, 2], [10, 11, 12], 1e-5, 0.05)
    self.assertEqual(test.errors([0, 1, 2], [10, 11, 12]), (0, 0))
    self.assertEqual(eps, 0.0)  # Three samples a side cannot show any eps.
    test, _ = bounds.best_threshold_test([10, 11], [0, 1], 1e-5, 0.05)
    self.assertEqual(test.sign, -1.0)


if __name__ == '__main__':
  absltest.main()
