"""Tests for tff_priv.accounting.closed_forms: hand-computed numbers."""

import math

from absl.testing import parameterized
import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant
import tensorflow as tf

from tff_priv.accounting import closed_forms


class UdpTest(tf.test.TestCase, parameterized.TestCase):

  def test_theorem1_eq10_hand_computed(self):
    # Delta = 0.1, q = 0.6, T = 100, delta = 1e-3, eps = 8:
    # 2 * 0.6 * 100 * ln(1000) = 828.9306; sqrt = 28.79116;
    # * 0.1 / 8 = 0.359889.
    sigma = closed_forms.udp_theorem1_sigma(8.0, 1e-3, 0.6, 100, 0.1)
    self.assertAlmostEqual(sigma, 0.359889, places=6)

  def test_crd_total_budget_hand_computed(self):
    # eps = 2, q = 0.5, Delta = 0.05, delta = 1e-4:
    # 4 / (2 * 0.5 * 0.0025 * ln(1e4) = 0.02302585) = 173.7178.
    self.assertAlmostEqual(
        closed_forms.crd_total_budget(2.0, 1e-4, 0.5, 0.05), 173.7178, places=4
    )

  def test_crd_sigma_constant_when_rounds_unchanged(self):
    eps, delta, q, sens, rounds = 8.0, 1e-3, 0.6, 0.1, 40
    budget = closed_forms.crd_total_budget(eps, delta, q, sens)
    eq10 = closed_forms.udp_theorem1_sigma(eps, delta, q, rounds, sens)
    spent = 0.0
    for t in range(rounds):
      sigma = closed_forms.crd_round_sigma(budget, spent, rounds - t)
      self.assertAllClose(sigma, eq10, rtol=1e-9)
      spent += 1 / sigma**2
    self.assertAllClose(spent, budget, rtol=1e-9)

  def test_crd_discount_lowers_sigma_within_budget(self):
    budget = closed_forms.crd_total_budget(4.0, 1e-3, 1.0, 0.2)
    total, beta, spent, t, sigmas = 50, 0.9, 0.0, 0, []
    while t < total:
      sigma = closed_forms.crd_round_sigma(budget, spent, total - t)
      sigmas.append(sigma)
      spent += 1 / sigma**2
      t += 1
      if t in (10, 20, 30):  # The validation loss stalled: discount T.
        total = math.floor(beta * (total - t)) + t
    self.assertLess(total, 50)
    for before, after in zip(sigmas, sigmas[1:]):
      self.assertLessEqual(after, before * (1 + 1e-12))
    self.assertLess(sigmas[-1], sigmas[0])
    self.assertLessEqual(spent, budget * (1 + 1e-12))
    self.assertAllClose(spent, budget, rtol=1e-9)  # Spent exactly at the end.

  def test_crd_refuses_spent_budget(self):
    with self.assertRaisesRegex(ValueError, 'spent_budget'):
      closed_forms.crd_round_sigma(10.0, 10.0, 3)


class FedSmpTest(tf.test.TestCase):

  def test_theorem1_hand_computed(self):
    # eps 1, delta 1e-5, q 0.01, T 300: 7e-4 * 300 * (1 + 23.02585) = 5.04543,
    # sqrt = 2.24620.
    self.assertAlmostEqual(
        closed_forms.fedsmp_theorem1_noise_multiplier(1.0, 1e-5, 0.01, 300),
        2.24620,
        places=5,
    )


class LdpTest(tf.test.TestCase):

  def test_per_value_and_plain_composition(self):
    self.assertEqual(closed_forms.ldp_per_value_epsilon(0.5), 0.5)
    self.assertEqual(
        closed_forms.ldp_plain_composition_epsilon(0.5, 1000, 10), 5000.0
    )

  def test_shuffle_bound_hand_computed(self):
    # eps0 = 1, n = 1e5, delta = 1e-6:
    # (e - 1)/(e + 1) = 0.462117; sqrt(e * ln(4e6)) = 6.42835;
    # 8 * 6.42835 / 316.2278 = 0.162625; 8e / 1e5 = 0.000217;
    # log1p(0.462117 * 0.162843) = log1p(0.0752524) = 0.0725549.
    bound = closed_forms.shuffle_epsilon(1.0, 100_000, 1e-6)
    self.assertTrue(bound.applicable)
    self.assertAlmostEqual(bound.epsilon, 0.0725549, places=6)

  def test_shuffle_condition_boundary(self):
    n, delta = 10_000, 1e-6
    limit = math.log(n / (16 * math.log(2 / delta)))  # 3.4935
    self.assertAlmostEqual(
        closed_forms.shuffle_max_local_epsilon(n, delta), limit, places=12
    )
    self.assertTrue(closed_forms.shuffle_epsilon(limit, n, delta).applicable)
    outside = closed_forms.shuffle_epsilon(limit + 1e-3, n, delta)
    self.assertFalse(outside.applicable)
    self.assertIsNone(outside.epsilon)
    self.assertIn('eps0 <=', outside.reason)

  def test_composed_shuffle_not_applicable_for_small_populations(self):
    # LDP-FL's MNIST setting: 100 clients, the McMahan CNN, 10 rounds.
    bound = closed_forms.ldp_shuffle_composed(1.0, 100, 1_663_370, 10, 1e-5)
    self.assertFalse(bound.applicable)
    self.assertIsNone(bound.epsilon)

  def test_composed_shuffle_between_single_and_plain_composition(self):
    eps0, n, d, rounds, delta = 0.5, 1_000_000, 100, 5, 1e-5
    bound = closed_forms.ldp_shuffle_composed(eps0, n, d, rounds, delta)
    self.assertTrue(bound.applicable)
    single = closed_forms.shuffle_epsilon(eps0, n, delta / (2 * d * rounds))
    self.assertGreater(bound.epsilon, single.epsilon)
    self.assertLess(bound.epsilon, d * rounds * single.epsilon)
    self.assertLess(
        bound.epsilon,
        closed_forms.ldp_plain_composition_epsilon(eps0, d, rounds),
    )


class BadArgumentsTest(tf.test.TestCase):

  def test_named_errors(self):
    cases = [
        (
            lambda: closed_forms.udp_theorem1_sigma(0.0, 1e-3, 0.5, 10, 1.0),
            'epsilon',
        ),
        (
            lambda: closed_forms.udp_theorem1_sigma(1.0, 1.0, 0.5, 10, 1.0),
            'delta',
        ),
        (
            lambda: closed_forms.udp_theorem1_sigma(1.0, 1e-3, 0.0, 10, 1.0),
            'sampling_probability',
        ),
        (
            lambda: closed_forms.udp_theorem1_sigma(1.0, 1e-3, 0.5, 0, 1.0),
            'rounds',
        ),
        (
            lambda: closed_forms.udp_theorem1_sigma(1.0, 1e-3, 0.5, 10, -1.0),
            'sensitivity',
        ),
        (
            lambda: closed_forms.fedsmp_theorem1_noise_multiplier(
                -1.0, 1e-5, 0.1, 10
            ),
            'epsilon',
        ),
        (
            lambda: closed_forms.fedsmp_theorem1_noise_multiplier(
                1.0, 0.0, 0.1, 10
            ),
            'delta',
        ),
        (
            lambda: closed_forms.fedsmp_theorem1_noise_multiplier(
                1.0, 1e-5, 1.1, 10
            ),
            'sampling_probability',
        ),
        (lambda: closed_forms.ldp_per_value_epsilon(0.0), 'epsilon'),
        (
            lambda: closed_forms.ldp_plain_composition_epsilon(1.0, 0, 1),
            'num_values',
        ),
        (lambda: closed_forms.shuffle_epsilon(1.0, 100, 2.0), 'delta'),
        (
            lambda: closed_forms.shuffle_epsilon(float('inf'), 100, 1e-6),
            'local_epsilon',
        ),
        (
            lambda: closed_forms.crd_total_budget(1.0, 1e-3, 0.5, 0.0),
            'sensitivity',
        ),
    ]
    for fn, name in cases:
      with self.assertRaisesRegex(ValueError, name):
        fn()


def _direct(z, q, rounds):
  event = dp_accounting.GaussianDpEvent(z)
  if q < 1:
    event = dp_accounting.PoissonSampledDpEvent(q, event)
  return rdp_privacy_accountant.RdpAccountant().compose(
      dp_accounting.SelfComposedDpEvent(event, rounds)
  )


class ClaimCheckTest(tf.test.TestCase):
  """The closed forms read back by the accountant."""

  def test_udp_formula_is_optimistic(self):
    # q = 1 (K = U), T = 200, delta = 1e-3, as UDP's experiments.
    for eps, holds in ((4.0, True), (8.0, False), (12.0, False), (16.0, False)):
      check = closed_forms.udp_theorem1_truth(eps, 1e-3, 1.0, 200)
      z = math.sqrt(2 * 200 * math.log(1e3)) / eps  # eq. (10) with Delta = 1.
      self.assertAlmostEqual(check.noise_multiplier, z, places=12)
      direct = _direct(z, 1.0, 200)
      self.assertEqual(check.true_epsilon, direct.get_epsilon(1e-3))
      self.assertEqual(check.true_delta, direct.get_delta(eps))
      self.assertEqual(check.holds, holds, eps)
    # The numbers for the README: delta reached at eps 8 and 12.
    self.assertAlmostEqual(
        closed_forms.udp_theorem1_truth(8.0, 1e-3, 1.0, 200).true_delta,
        0.0064,
        places=4,
    )
    self.assertAlmostEqual(
        closed_forms.udp_theorem1_truth(12.0, 1e-3, 1.0, 200).true_delta,
        0.035,
        places=3,
    )

  def test_fedsmp_formula_is_conservative(self):
    check = closed_forms.fedsmp_theorem1_truth(1.0, 1e-5, 0.01, 300)
    self.assertTrue(check.holds)
    self.assertLess(check.true_epsilon, 0.5)  # Far below the claimed 1.0.
    self.assertEqual(
        check.true_epsilon,
        _direct(check.noise_multiplier, 0.01, 300).get_epsilon(1e-5),
    )


if __name__ == '__main__':
  tf.test.main()
