"""Tests for tff_priv.accounting.filters (guarantees of adaptive runs)."""

import dp_accounting
import tensorflow as tf

from tff_priv.accounting import filters


class FiltersTest(tf.test.TestCase):

  def test_gaussian_bound_is_one_gaussian_of_the_summed_inverse_variance(self):
    # sum 1/z_t^2 = 1/0.8^2 + 1/1.6^2 + 1/1.6^2: the RDP of one Gaussian of
    # z = 1/sqrt(that) at every order, as dp_accounting counts it.
    s = 1 / 0.8**2 + 2 / 1.6**2
    bound = filters.gaussian(s, 'three rounds')
    expected = (
        dp_accounting.rdp.RdpAccountant()
        .compose(dp_accounting.GaussianDpEvent(s**-0.5))
        .get_epsilon(1e-5)
    )
    self.assertAllClose(bound.epsilon(1e-5), expected, rtol=1e-9)
    self.assertEqual(bound.to_dict()['description'], 'three rounds')

  def test_one_order_is_the_conversion_at_that_order(self):
    order, budget, delta = 8.0, 0.5, 1e-5
    acc = dp_accounting.rdp.RdpAccountant(orders=[order])
    # One Gaussian whose RDP at order 8 is exactly the budget.
    acc.compose(dp_accounting.GaussianDpEvent((order / (2 * budget)) ** 0.5))
    self.assertAllClose(
        filters.at_order(order, budget, '').epsilon(delta),
        acc.get_epsilon(delta),
        rtol=1e-9,
    )

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'order'):
      filters.at_order(1.0, 1.0, '')
    with self.assertRaisesRegex(ValueError, 'budget'):
      filters.at_order(2.0, -1.0, '')
    with self.assertRaisesRegex(ValueError, 'inverse_variance_sum'):
      filters.gaussian(float('inf'), '')
    with self.assertRaisesRegex(ValueError, 'delta'):
      filters.gaussian(1.0, '').epsilon(0.0)


if __name__ == '__main__':
  tf.test.main()
