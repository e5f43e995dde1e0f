"""Tests for tff_priv.accounting.audit: closed forms read by the accountant."""

import math

import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant
import tensorflow as tf

from tff_priv.accounting import audit


def _direct(z, q, rounds):
  event = dp_accounting.GaussianDpEvent(z)
  if q < 1:
    event = dp_accounting.PoissonSampledDpEvent(q, event)
  return rdp_privacy_accountant.RdpAccountant().compose(
      dp_accounting.SelfComposedDpEvent(event, rounds)
  )


class AuditTest(tf.test.TestCase):

  def test_udp_formula_is_optimistic(self):
    # q = 1 (K = U), T = 200, delta = 1e-3, as UDP's experiments.
    for eps, holds in ((4.0, True), (8.0, False), (12.0, False), (16.0, False)):
      check = audit.udp_theorem1_truth(eps, 1e-3, 1.0, 200)
      z = math.sqrt(2 * 200 * math.log(1e3)) / eps  # eq. (10) with Delta = 1.
      self.assertAlmostEqual(check.noise_multiplier, z, places=12)
      direct = _direct(z, 1.0, 200)
      self.assertEqual(check.true_epsilon, direct.get_epsilon(1e-3))
      self.assertEqual(check.true_delta, direct.get_delta(eps))
      self.assertEqual(check.holds, holds, eps)
    # The numbers for the README: delta reached at eps 8 and 12.
    self.assertAlmostEqual(
        audit.udp_theorem1_truth(8.0, 1e-3, 1.0, 200).true_delta, 0.0064, places=4
    )
    self.assertAlmostEqual(
        audit.udp_theorem1_truth(12.0, 1e-3, 1.0, 200).true_delta, 0.035, places=3
    )

  def test_fedsmp_formula_is_conservative(self):
    check = audit.fedsmp_theorem1_truth(1.0, 1e-5, 0.01, 300)
    self.assertTrue(check.holds)
    self.assertLess(check.true_epsilon, 0.5)  # Far below the claimed 1.0.
    self.assertEqual(
        check.true_epsilon,
        _direct(check.noise_multiplier, 0.01, 300).get_epsilon(1e-5),
    )


if __name__ == '__main__':
  tf.test.main()
