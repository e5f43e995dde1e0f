"""Tests for tff_priv.mechanisms.total_variation."""

from absl.testing import parameterized
import numpy as np
from scipy import stats
import tensorflow as tf

from tff_priv.mechanisms import total_variation


class TotalVariationTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters((0.5, 1.0, 3), (2.0, 1.5, 1), (0.1, 0.2, 10))
  def test_shifted_means_matches_monte_carlo(self, distance, s, dim):
    # TV = P(A) - Q(A) on A = {x : p(x) > q(x)}, estimated with n draws from
    # each: standard error <= sqrt(2 * 0.25 / n) = 0.0022; tolerance 5 SE.
    rng = np.random.default_rng(0)
    n = 100_000
    mu1 = np.zeros(dim)
    mu2 = np.zeros(dim)
    mu2[0] = distance
    x = rng.normal(mu1, s, size=(n, dim))
    y = rng.normal(mu2, s, size=(n, dim))

    def p_gt_q(z):
      return stats.norm.logpdf(z, mu1, s).sum(1) > stats.norm.logpdf(
          z, mu2, s
      ).sum(1)

    estimate = p_gt_q(x).mean() - p_gt_q(y).mean()
    exact = total_variation.tv_shifted_means(distance, s)
    self.assertAllClose(exact, estimate, atol=5 * np.sqrt(0.5 / n))

  def test_bounds_hand_computed(self):
    # m = 100, sigma^2 = 4, sigma_e = 0.4: r = 10 * 0.16 / 4 = 0.4.
    lower, upper = total_variation.tv_bounds(0.4, 4.0, 100)
    self.assertAllClose((lower, upper), (0.004, 0.6))
    # Saturation: r >= 1 gives (1/100, 1).
    self.assertAllClose(total_variation.tv_bounds(10.0, 1.0, 4), (0.01, 1.0))

  def test_bounds_hold_on_a_computable_case(self):
    # One coordinate, N(0, 1) vs N(0, 1 + se^2): the TV is computable exactly
    # (the densities cross at +-c); it must lie within the DMR bounds.
    for se in (0.05, 0.3, 1.0, 3.0):
      v = 1 + se**2
      c = np.sqrt(v * np.log(v) / (v - 1))
      exact = 2 * (
          (stats.norm.cdf(c) - 0.5) - (stats.norm.cdf(c / np.sqrt(v)) - 0.5)
      )
      lower, upper = total_variation.tv_bounds(se, 1.0, 1)
      self.assertBetween(exact, lower, upper)

  @parameterized.parameters(
      (0.3, 'upper', 0.01, 1000),
      (0.9, 'upper', 2.0, 7),
      (0.005, 'lower', 0.5, 50),
  )
  def test_calibrated_noise_meets_its_bound(self, target, bound, variance, dim):
    sigma_e = total_variation.noise_for_tv(target, variance, dim, bound)
    lower, upper = total_variation.tv_bounds(sigma_e, variance, dim)
    if bound == 'upper':
      self.assertLessEqual(upper, target)
      self.assertAllClose(upper, target, rtol=1e-9)
    else:
      self.assertGreaterEqual(lower, target)
      self.assertAllClose(lower, target, rtol=1e-9)

  def test_bad_arguments(self):
    for bad, name in (
        (lambda: total_variation.noise_for_tv(0.0, 1.0, 3), 'target_tv'),
        (lambda: total_variation.noise_for_tv(1.0, 1.0, 3), 'target_tv'),
        (
            lambda: total_variation.noise_for_tv(0.5, 1.0, 3, 'lower'),
            'target_tv',
        ),
        (
            lambda: total_variation.noise_for_tv(0.5, 0.0, 3),
            'parameter_variance',
        ),
        (lambda: total_variation.noise_for_tv(0.5, 1.0, 0), 'dimension'),
        (lambda: total_variation.noise_for_tv(0.5, 1.0, 3, 'middle'), 'bound'),
        (lambda: total_variation.tv_bounds(-1.0, 1.0, 3), 'noise_stddev'),
        (lambda: total_variation.tv_shifted_means(1.0, 0.0), 'stddev'),
    ):
      with self.assertRaisesRegex(ValueError, name):
        bad()


if __name__ == '__main__':
  tf.test.main()
