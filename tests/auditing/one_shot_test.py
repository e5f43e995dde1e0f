"""Tests of Andrew et al.'s one-shot eps estimate."""

import math

from absl.testing import absltest
from dp_accounting.pld import privacy_loss_distribution
import numpy as np
import pytest

from tff_priv.auditing import one_shot


class OneShotTest(absltest.TestCase):

  def test_identical_gaussians_give_zero(self):
    self.assertEqual(
        one_shot.epsilon_two_gaussians(0.1, 0.2, 0.1, 0.2, 1e-5), 0.0
    )

  @pytest.mark.slow
  def test_equal_variances_match_the_gaussian_mechanism(self):
    # N(0, 1) vs N(mu, 1) is the Gaussian mechanism of noise multiplier 1/mu.
    for mu in (0.5, 1.0, 3.0):
      pld = privacy_loss_distribution.from_gaussian_mechanism(
          standard_deviation=1 / mu, value_discretization_interval=1e-5
      )
      expected = pld.get_epsilon_for_delta(1e-5)
      self.assertAlmostEqual(
          one_shot.epsilon_two_gaussians(0.0, 1.0, mu, 1.0, 1e-5),
          expected,
          delta=1e-3 * max(1, expected),
      )

  def test_unequal_variances_symmetric_and_positive(self):
    a = one_shot.epsilon_two_gaussians(0.0, 1.0, 0.0, 2.0, 1e-5)
    b = one_shot.epsilon_two_gaussians(0.0, 2.0, 0.0, 1.0, 1e-5)
    self.assertAlmostEqual(a, b, places=6)
    self.assertGreater(a, 0.5)

  def test_far_apart_unequal_gaussians_are_large_not_an_overflow(self):
    # The search doubles eps past 709, where e^eps overflows a float; a
    # canary far outside the held-out cosines is what a noise-free run gives.
    eps = one_shot.epsilon_two_gaussians(0.0, 0.007, 0.1, 0.05, 1e-5)
    self.assertGreater(eps, 20.0)
    self.assertEqual(
        one_shot.epsilon_two_gaussians(0.0, 1e-3, 1.0, 0.5, 1e-5), math.inf
    )

  def test_estimate_from_cosines(self):
    rng = np.random.default_rng(0)
    held_out = rng.normal(0.0, 0.01, 10000)
    # Canaries never seen: no signal; what remains is the fitted stds'
    # sampling error (~0.7% at 10^4 cosines), which unequal variances turn
    # into ~0.05-0.2 at delta = 1e-5 (~0.7 at 10^3 cosines).
    self.assertLess(
        one_shot.one_shot_epsilon(rng.normal(0.0, 0.01, 10000), held_out, 1e-5),
        0.3,
    )
    self.assertGreater(
        one_shot.one_shot_epsilon(rng.normal(0.1, 0.01, 1000), held_out, 1e-5),
        20.0,
    )  # Ten stds apart: visible canaries.
    self.assertEqual(
        one_shot.one_shot_epsilon([0.5, 0.5], [0.0, 0.0], 1e-5), math.inf
    )

  def test_all_iterates_use_the_max_over_rounds(self):
    rng = np.random.default_rng(1)
    inserted = rng.normal(0.05, 0.01, (200, 5))
    held_out = rng.normal(0.0, 0.01, (200, 5))
    self.assertAlmostEqual(
        one_shot.one_shot_epsilon_all_iterates(inserted, held_out, 1e-5),
        one_shot.one_shot_epsilon(inserted.max(1), held_out.max(1), 1e-5),
    )
    with self.assertRaisesRegex(ValueError, 'rounds differ'):
      one_shot.one_shot_epsilon_all_iterates(inserted, held_out[:, :3], 1e-5)

  def test_cosines(self):
    np.testing.assert_allclose(
        one_shot.cosines([1.0, 0.0], [[2.0, 0.0], [0.0, 3.0], [-1.0, 0.0]]),
        [1.0, 0.0, -1.0],
    )

  @pytest.mark.statistical
  def test_null_quantile_is_the_leak_free_estimates_quantile(self):
    # Fresh leak-free draws (another seed than the quantile's own): the
    # fraction above the 0.95 quantile is 0.05, for Gaussian cosines of any
    # location and scale; 1000 draws: sd 0.0069, the tolerance 0.037 is
    # 5.4 sd (alpha < 1e-7) beside the quantile's own error (1000 draws).
    rng = np.random.default_rng(123)
    q = one_shot.null_quantile(50, 1e-5)
    above = np.mean(
        [
            one_shot.one_shot_epsilon(
                rng.normal(3.0, 0.2, 50), rng.normal(3.0, 0.2, 50), 1e-5
            )
            > q
            for _ in range(1000)
        ]
    )
    self.assertAlmostEqual(above, 0.05, delta=0.037)
    self.assertGreater(
        one_shot.null_quantile(20, 1e-5), one_shot.null_quantile(100, 1e-5)
    )

  def test_bootstrap_interval(self):
    rng = np.random.default_rng(4)
    inserted, held_out = rng.normal(0.5, 1, 100), rng.normal(0, 1, 100)
    estimate = one_shot.one_shot_epsilon(inserted, held_out, 1e-5)
    low, high = one_shot.bootstrap_interval(inserted, held_out, 1e-5)
    self.assertLess(low, estimate)
    self.assertGreater(high, estimate)
    self.assertEqual(
        (low, high), one_shot.bootstrap_interval(inserted, held_out, 1e-5)
    )
    # More canaries, a narrower interval.
    wide = high - low
    low, high = one_shot.bootstrap_interval(
        rng.normal(0.5, 1, 1000), rng.normal(0, 1, 1000), 1e-5
    )
    self.assertLess(high - low, wide / 2)
    with self.assertRaisesRegex(ValueError, 'level'):
      one_shot.bootstrap_interval(inserted, held_out, 1e-5, level=1.0)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'at least 2'):
      one_shot.one_shot_epsilon([0.1], [0.0, 0.1], 1e-5)
    with self.assertRaisesRegex(ValueError, 'delta'):
      one_shot.epsilon_two_gaussians(0, 1, 1, 1, 0.0)


if __name__ == '__main__':
  absltest.main()
