"""Tests of Steinke, Nasr, Jagielski's one-run eps lower bound."""

import math

from absl.testing import absltest
import dp_accounting
import numpy as np
import pytest
from scipy import stats

from tests import binomial_sizes
from tff_priv.auditing import one_run

# The coverage tests' runs: an honest bound (alpha = 0.05) exceeds the truth
# in a run with probability <= 0.05; the tests fail an honest bound with
# probability <= 1e-3 (any seeds), and fail with probability >= 0.99 a bound
# that exceeds the truth in half the runs.
_ALPHA, _FALSE_ALARM = 0.05, 1e-3
_RUNS = binomial_sizes.repeats_for(0.5, 0.99, _ALPHA, _FALSE_ALARM)
_ALLOWED = binomial_sizes.allowed_failures(_RUNS, _ALPHA, _FALSE_ALARM)


def _guesses(rng, m, mu, k):
  """One run of a Gaussian mechanism over m canaries; guess top/bottom k."""
  included = rng.random(m) < 0.5
  scores = mu * included + rng.standard_normal(m)
  order = np.argsort(scores)
  correct = included[order[-k:]].sum() + (~included[order[:k]]).sum()
  return 2 * k, int(correct)


class OneRunTest(absltest.TestCase):

  def test_p_value_at_delta_zero_is_the_binomial_tail(self):
    q = 1 / (1 + math.exp(-1.0))
    self.assertAlmostEqual(
        one_run.p_value(100, 50, 40, 1.0, 0.0), stats.binom.sf(39, 50, q)
    )

  def test_all_correct_closed_form(self):
    # delta = 0, v = r: p-value q^r; the bound solves q^r = alpha.
    r, alpha = 20, 0.05
    q = alpha ** (1 / r)
    self.assertAlmostEqual(
        one_run.epsilon_lower_bound(1000, r, r, 0.0, alpha),
        math.log(q / (1 - q)),
        places=6,
    )

  def test_chance_guesses_give_zero(self):
    self.assertEqual(one_run.epsilon_lower_bound(1000, 100, 50, 1e-5), 0.0)

  def test_delta_term_lowers_the_bound(self):
    self.assertLess(
        one_run.epsilon_lower_bound(1000, 200, 190, 1e-4),
        one_run.epsilon_lower_bound(1000, 200, 190, 0.0),
    )

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'v <= r <= m'):
      one_run.p_value(10, 5, 6, 1.0, 0.0)
    with self.assertRaisesRegex(ValueError, 'alpha'):
      one_run.epsilon_lower_bound(10, 5, 5, 0.0, alpha=1.5)

  @pytest.mark.slow
  def test_fdp_refutes_more_than_steinke_from_the_same_guesses(self):
    # Mahloujifar et al.'s point: the Gaussian curve constrains the guesses
    # more than one (eps, delta) point. Same (m, r, v), same alpha.
    for r, v in ((200, 190), (100, 100), (1000, 700)):
      steinke = one_run.epsilon_lower_bound(1000, r, v, 1e-5)
      fdp = one_run.fdp_epsilon_lower_bound(1000, r, v, 1e-5)
      self.assertGreater(fdp, steinke, (r, v))
    self.assertEqual(one_run.fdp_mu_lower_bound(1000, 200, 110), 0.0)
    self.assertEqual(one_run.fdp_mu_lower_bound(1000, 0, 0), 0.0)

  def test_fdp_bound_grows_with_correct_guesses_and_confidence(self):
    bounds = [one_run.fdp_mu_lower_bound(1000, 200, v) for v in (150, 170, 190)]
    self.assertEqual(bounds, sorted(bounds))
    self.assertGreater(
        one_run.fdp_mu_lower_bound(1000, 200, 190, alpha=0.1),
        one_run.fdp_mu_lower_bound(1000, 200, 190, alpha=0.01),
    )
    with self.assertRaisesRegex(ValueError, 'v <= r <= m'):
      one_run.fdp_mu_lower_bound(10, 5, 6)

  @pytest.mark.slow
  def test_fdp_coverage_on_a_gaussian_mechanism(self):
    # The per-canary Gaussian mechanism of `_guesses` is exactly mu-GDP: the
    # mu bound may exceed mu in at most _ALLOWED of _RUNS fixed-seed runs,
    # and must see it. Steinke's bound from the same runs is below the f-DP
    # one's eps in the median.
    m = 1000
    for mu in (1.0, 2.0):
      found, eps_steinke, eps_fdp = [], [], []
      for seed in range(_RUNS):
        r, v = _guesses(np.random.default_rng(seed), m, mu, 100)
        found.append(one_run.fdp_mu_lower_bound(m, r, v))
        eps_steinke.append(one_run.epsilon_lower_bound(m, r, v, 1e-5))
        eps_fdp.append(one_run.fdp_epsilon_lower_bound(m, r, v, 1e-5))
      self.assertLessEqual(sum(b > mu for b in found), _ALLOWED, (mu, found))
      self.assertGreater(np.median(found), 0.4 * mu, (mu, np.median(found)))
      self.assertGreater(np.median(eps_fdp), np.median(eps_steinke))

  @pytest.mark.slow
  def test_coverage_on_a_gaussian_mechanism(self):
    # Each canary adds mu to its own score with noise N(0, 1): including one
    # canary or not is a Gaussian mechanism of noise multiplier 1 / mu. The
    # bound may exceed its eps in at most _ALLOWED of _RUNS fixed-seed runs,
    # and must see it (> 1) when the mechanism is weak.
    delta, m = 1e-5, 1000
    for mu, floor in ((2.0, 0.0), (6.0, 1.0)):
      true_eps = (
          dp_accounting.pld.PLDAccountant()
          .compose(dp_accounting.GaussianDpEvent(1 / mu))
          .get_epsilon(delta)
      )
      found = []
      for seed in range(_RUNS):
        r, v = _guesses(np.random.default_rng(seed), m, mu, 50)
        found.append(one_run.epsilon_lower_bound(m, r, v, delta))
      self.assertLessEqual(
          sum(e > true_eps for e in found), _ALLOWED, (mu, found)
      )
      self.assertGreater(np.median(found), floor, (mu, true_eps))


if __name__ == '__main__':
  absltest.main()
