"""The ledger's accountants: dp_accounting's figures, curves computed once."""

from absl.testing import absltest
from absl.testing import parameterized
import dp_accounting
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from tff_priv.accounting import accountants

_REL = dp_accounting.NeighboringRelation
_GAUSSIAN = dp_accounting.GaussianDpEvent(1.3)
_POISSON = dp_accounting.PoissonSampledDpEvent(0.3, _GAUSSIAN)
_WOR = dp_accounting.SampledWithoutReplacementDpEvent(100, 10, _GAUSSIAN)


class CachedCurvesTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('gaussian', _GAUSSIAN, 'add_or_remove_one'),
      ('poisson', _POISSON, 'add_or_remove_one'),
      (
          'poisson_counted',
          dp_accounting.SelfComposedDpEvent(_POISSON, 7),
          'add_or_remove_one',
      ),
      (
          'without_replacement',
          dp_accounting.ComposedDpEvent(
              [dp_accounting.SelfComposedDpEvent(_WOR, 3), _WOR]
          ),
          'replace_one',
      ),
      (
          'mixed',
          dp_accounting.ComposedDpEvent(
              [
                  dp_accounting.SelfComposedDpEvent(_POISSON, 4),
                  dp_accounting.PoissonSampledDpEvent(0.1, _GAUSSIAN),
                  dp_accounting.SelfComposedDpEvent(_POISSON, 0),
              ]
          ),
          'add_or_remove_one',
      ),
  )
  def test_rdp_is_dp_accountings_to_the_bit_computed_or_cached(
      self, event, relation
  ):
    expected = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=accountants.RELATIONS[relation]
    ).compose(event)
    for _ in range(2):  # The second from the cache.
      got = accountants.make_accountant('rdp', relation).compose(event)
      self.assertEqual(list(got._rdp), list(expected._rdp))  # pylint: disable=protected-access
      self.assertEqual(got.get_epsilon(1e-5), expected.get_epsilon(1e-5))

  def test_a_curve_is_computed_once_per_process(self):
    event = dp_accounting.PoissonSampledDpEvent(0.123, _GAUSSIAN)
    before = accountants._one_release_rdp_keyed.cache_info()  # pylint: disable=protected-access
    for count in (1, 5, 9):
      accountants.make_accountant('rdp', 'add_or_remove_one').compose(
          event, count
      )
    after = accountants._one_release_rdp_keyed.cache_info()  # pylint: disable=protected-access
    self.assertEqual(after.misses - before.misses, 1)
    self.assertEqual(after.hits - before.hits, 2)

  def test_a_sampled_composition_is_cached_too(self):
    # Adaptive DP-FedAvg's round: a Poisson-sampled composition of the sum's
    # and the quantile's Gaussians. Its ComposedDpEvent holds a list
    # (unhashable): it was computed afresh at every epsilon (1-3 s each).
    def event(z):
      return dp_accounting.PoissonSampledDpEvent(
          0.3,
          dp_accounting.ComposedDpEvent(
              [
                  dp_accounting.GaussianDpEvent(z),
                  dp_accounting.GaussianDpEvent(1.34),
              ]
          ),
      )

    relation = accountants.RELATIONS['add_or_remove_one']
    expected = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=relation
    ).compose(event(0.77), 3)
    before = accountants._one_release_rdp_keyed.cache_info()  # pylint: disable=protected-access
    for _ in range(3):  # Equal events built afresh: one curve.
      got = accountants.make_accountant('rdp', 'add_or_remove_one').compose(
          event(0.77), 3
      )
      self.assertEqual(list(got._rdp), list(expected._rdp))  # pylint: disable=protected-access
    other = accountants.make_accountant('rdp', 'add_or_remove_one').compose(
        event(0.78), 3
    )
    after = accountants._one_release_rdp_keyed.cache_info()  # pylint: disable=protected-access
    self.assertEqual(after.misses - before.misses, 2)
    self.assertEqual(after.hits - before.hits, 2)
    self.assertLess(other.get_epsilon(1e-5), got.get_epsilon(1e-5))

  @parameterized.parameters(1, 6)
  def test_pld_is_dp_accountings_to_the_bit_computed_or_cached(self, count):
    expected = pld_privacy_accountant.PLDAccountant(
        value_discretization_interval=accountants.PLD_DISCRETIZATION
    ).compose(_POISSON, count)
    for _ in range(2):
      got = accountants.make_accountant('pld', 'add_or_remove_one').compose(
          _POISSON, count
      )
      self.assertEqual(got.get_epsilon(1e-5), expected.get_epsilon(1e-5))
      self.assertEqual(got.get_delta(2.0), expected.get_delta(2.0))

  def test_what_dp_accounting_refuses_is_still_refused(self):
    # Poisson sampling under replace-one: dp_accounting's error, not a cached
    # curve.
    accountant = accountants.make_accountant('rdp', 'replace_one')
    self.assertFalse(accountant.supports(_POISSON))
    with self.assertRaises(dp_accounting.UnsupportedEventError):
      accountant.compose(_POISSON)


if __name__ == '__main__':
  absltest.main()
