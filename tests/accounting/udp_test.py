"""Tests for accounting.udp: UDP's CRD budget and ledger, without TensorFlow."""

from absl.testing import absltest
import numpy as np
import pytest

from tff_priv.accounting import closed_forms
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.accounting import target_noise
from tff_priv.accounting import udp

Sampling = sampling_lib.Sampling


class CrdBudgetTest(absltest.TestCase):

  def test_paper_budget_is_theorem4(self):
    budget = udp.crd_budget(
        8.0, 1e-3, 0.05, 40, Sampling.poisson(0.5), calibration='paper'
    )
    self.assertEqual(
        budget.total_budget,
        closed_forms.crd_total_budget(8.0, 1e-3, 0.5, 0.05),
    )
    self.assertIsNone(budget.sigma_table)

  def test_tight_every_client_is_the_inverse_variance_of_sigma0(self):
    sigma0 = target_noise.noise_for_target(4.0, 1e-5, 6, sensitivity=0.05)
    budget = udp.crd_budget(4.0, 1e-5, 0.05, 6)
    self.assertEqual(budget.total_budget, 6 / sigma0**2)
    self.assertEqual(budget.initial_rounds, 6)
    self.assertIsNone(budget.cost_table)

  @pytest.mark.slow
  def test_tight_sampled_tabulates_the_rdp_at_one_order(self):
    budget = udp.crd_budget(
        4.0, 1e-5, 0.05, 6, Sampling.fixed(10, 3), table_size=16
    )
    # 16 levels up to sigma0 (what the plan uses), then a few up to 4 x
    # sigma0 (for a resumed run's budget left).
    self.assertLen(budget.sigma_table, 16 + 3)
    self.assertTrue(np.all(np.diff(budget.sigma_table) > 0))
    self.assertTrue(np.all(np.diff(budget.cost_table) < 0))
    self.assertAlmostEqual(budget.cost_table[15], budget.total_budget / 6)
    self.assertAlmostEqual(budget.sigma_table[-1], 4 * budget.sigma_table[15])
    self.assertGreater(budget.order, 1)

  def test_noise_ledger_charges_each_round(self):
    ledger = udp.noise_ledger([0.1, 0.2], 0.05, Sampling.fixed(10, 3))
    self.assertEqual(ledger.num_releases, 2)
    with self.assertRaisesRegex(ValueError, 'noise_stddevs'):
      udp.noise_ledger([1.0, float('nan')], 0.1)


if __name__ == '__main__':
  absltest.main()
