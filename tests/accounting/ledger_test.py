"""Tests for tff_priv.accounting.ledger, against dp_accounting directly."""

import math

from absl.testing import parameterized
import dp_accounting
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np
import pytest
import tensorflow as tf

from tff_priv.accounting import accountants
from tff_priv.accounting import events
from tff_priv.accounting import ledger as ledger_lib

_REPLACE = dp_accounting.NeighboringRelation.REPLACE_ONE


def _rdp(event, relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE):
  return rdp_privacy_accountant.RdpAccountant(
      neighboring_relation=relation
  ).compose(event)


class LedgerTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(
      (1.1, 0.01, 300, 1e-5),
      (0.8, 0.1, 50, 1e-6),
      (4.0, 1.0, 200, 1e-3),
      (2.5, 0.6, 20, 1e-4),
  )
  def test_poisson_gaussian_matches_dp_accounting(self, z, q, rounds, delta):
    ledger = ledger_lib.PrivacyLedger()
    for _ in range(rounds):
      ledger.record_gaussian(z, sampling_probability=q)
    self.assertEqual(ledger.num_releases, rounds)
    self.assertLen(ledger.entries, 1)  # Identical rounds are merged.
    single = dp_accounting.GaussianDpEvent(z)
    if q < 1:
      single = dp_accounting.PoissonSampledDpEvent(q, single)
    direct = _rdp(dp_accounting.SelfComposedDpEvent(single, rounds))
    self.assertEqual(ledger.epsilon(delta), direct.get_epsilon(delta))
    self.assertEqual(ledger.delta(1.0), direct.get_delta(1.0))

  def test_alternating_self_composed_rounds_compose_as_their_total(self):
    # A BandMF run of 20 rounds, b = 5: its state's event is a cycle's
    # SelfComposedDpEvent(e, 1) at every fifth round and (e, 0) at the
    # others. The ledger keeps each round, and composes e 4 times: one term.
    e = dp_accounting.PoissonSampledDpEvent(
        0.1, dp_accounting.GaussianDpEvent(1.7)
    )
    ledger = ledger_lib.PrivacyLedger()
    for t in range(20):
      ledger.record(dp_accounting.SelfComposedDpEvent(e, int(t % 5 == 0)))
    self.assertEqual(ledger.num_releases, 20)
    self.assertLen(ledger.entries, 8)
    self.assertEqual(ledger.dp_event(), dp_accounting.SelfComposedDpEvent(e, 4))
    self.assertEqual(
        ledger.epsilon(1e-5),
        _rdp(dp_accounting.SelfComposedDpEvent(e, 4)).get_epsilon(1e-5),
    )
    only_zeros = ledger_lib.PrivacyLedger()
    only_zeros.record(dp_accounting.SelfComposedDpEvent(e, 0), 3)
    self.assertEqual(only_zeros.epsilon(1e-5), 0.0)

  def test_pld_matches_dp_accounting(self):
    ledger = ledger_lib.PrivacyLedger()
    ledger.record_gaussian(1.2, sampling_probability=0.05, count=100)
    direct = pld_privacy_accountant.PLDAccountant().compose(
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(
                0.05, dp_accounting.GaussianDpEvent(1.2)
            ),
            100,
        )
    )
    self.assertAlmostEqual(
        ledger.epsilon(1e-5, accountant='pld'),
        direct.get_epsilon(1e-5),
        places=9,
    )
    # PLD is the tighter accountant.
    self.assertLess(ledger.epsilon(1e-5, 'pld'), ledger.epsilon(1e-5, 'rdp'))

  def test_fixed_size_sampling_uses_replace_one(self):
    ledger = ledger_lib.PrivacyLedger()
    ledger.record_gaussian(3.0, population=50, sample_size=30, count=20)
    self.assertEqual(ledger.neighboring_relation, 'replace_one')
    direct = _rdp(
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.SampledWithoutReplacementDpEvent(
                50, 30, dp_accounting.GaussianDpEvent(3.0)
            ),
            20,
        ),
        _REPLACE,
    )
    self.assertEqual(ledger.epsilon(1e-3), direct.get_epsilon(1e-3))
    # dp_accounting 0.4.3's PLD accountant cannot count it: said, not guessed.
    self.assertFalse(ledger.supports('pld'))
    report = ledger.report(1e-3)
    self.assertIsNone(report['pld_epsilon'])
    self.assertIn('pld', report['unsupported'])
    with self.assertRaisesRegex(ValueError, 'pld'):
      ledger.epsilon(1e-3, accountant='pld')

  def test_pld_declines_a_gaussian_of_tiny_noise(self):
    # Its PLD grid would need more memory than a machine has (z = 1e-4: a
    # TV-calibrated distortion); the RDP figure is reported alone.
    ledger = ledger_lib.PrivacyLedger('replace_one')
    ledger.record_gaussian(1e-4, count=20)
    report = ledger.report(1e-5)
    self.assertIsNone(report['pld_epsilon'])
    self.assertIn('noise multiplier 0.0001', report['unsupported']['pld'])
    self.assertGreater(report['rdp_epsilon'], 1e6)
    # At the threshold PLD counts.
    at = ledger_lib.PrivacyLedger('replace_one')
    at.record_gaussian(accountants.PLD_MIN_NOISE_MULTIPLIER, count=1)
    self.assertTrue(at.supports('pld'))

  def test_mixing_sampling_relations_is_refused(self):
    ledger = ledger_lib.PrivacyLedger()
    ledger.record_gaussian(1.0, sampling_probability=0.1)
    with self.assertRaisesRegex(ValueError, 'replace_one'):
      ledger.record_gaussian(1.0, population=10, sample_size=5)

  def test_heterogeneous_rounds_match_composed_event(self):
    sigmas = [3.0, 3.0, 2.5, 2.0, 2.0, 2.0, 1.5]
    ledger = ledger_lib.PrivacyLedger()
    for z in sigmas:
      ledger.record_gaussian(z, sampling_probability=0.2)
    self.assertLen(ledger.entries, 4)
    direct = _rdp(
        dp_accounting.ComposedDpEvent(
            [
                dp_accounting.PoissonSampledDpEvent(
                    0.2, dp_accounting.GaussianDpEvent(z)
                )
                for z in sigmas
            ]
        )
    )
    self.assertAlmostEqual(
        ledger.epsilon(1e-5), direct.get_epsilon(1e-5), places=12
    )

  def test_eps_grows_with_rounds_and_empty_ledger_spends_nothing(self):
    ledger = ledger_lib.PrivacyLedger()
    self.assertEqual(ledger.epsilon(1e-5), 0.0)
    previous = 0.0
    for _ in range(5):
      ledger.record_gaussian(1.0, sampling_probability=0.1)
      eps = ledger.epsilon(1e-5)
      self.assertGreater(eps, previous)
      previous = eps

  def test_zero_noise_is_not_private(self):
    ledger = ledger_lib.PrivacyLedger()
    ledger.record_gaussian(0.0)
    self.assertEqual(ledger.epsilon(1e-5), math.inf)

  @parameterized.parameters(0.1, 0.5, 1.0, 5.0, 10.0)
  def test_pure_epsilon_rdp_is_randomized_response(self, eps):
    # Randomized response's Renyi divergence, summed term by term in plain
    # floats (not the log-space expression of the module).
    p = math.exp(eps) / (1 + math.exp(eps))
    for alpha in (1.5, 2.0, 8.0, 32.0):
      expected = math.log(
          p**alpha * (1 - p) ** (1 - alpha)
          + (1 - p) ** alpha * p ** (1 - alpha)
      ) / (alpha - 1)
      got = events.pure_epsilon_rdp([alpha], eps)[0]
      self.assertAllClose(got, min(expected, eps), rtol=1e-10)
      self.assertLessEqual(got, eps)

  def test_pure_epsilon_releases(self):
    ledger = ledger_lib.PrivacyLedger()
    ledger.record_pure_epsilon(1.0)
    # One eps-DP release. PLD is exact for randomized response up to its grid
    # (1e-4 per step); RDP pays its conversion to (eps, delta) (a few percent
    # at delta 1e-9). Neither may report much less than eps: randomized
    # response is tight.
    pld_eps = ledger.epsilon(1e-9, accountant='pld')
    self.assertAllClose(pld_eps, 1.0, atol=2e-4)
    rdp_eps = ledger.epsilon(1e-9, accountant='rdp')
    self.assertBetween(rdp_eps, 1.0, 1.05)
    # Many releases: RDP/PLD beat basic composition (1000 * 0.1 = 100).
    many = ledger_lib.PrivacyLedger()
    many.record_pure_epsilon(0.1, count=1000)
    self.assertLess(many.epsilon(1e-5), 100.0)
    self.assertLess(many.epsilon(1e-5, 'pld'), many.epsilon(1e-5, 'rdp'))

  @pytest.mark.slow
  def test_json_round_trip_is_exact(self):
    ledger = ledger_lib.PrivacyLedger()
    ledger.record_gaussian(10.0 / 11.0, sampling_probability=0.0123, count=17)
    ledger.record_gaussian(0.7, sampling_probability=0.0123)
    ledger.record_pure_epsilon(0.3, count=4)
    ledger.record(
        dp_accounting.ComposedDpEvent(
            [dp_accounting.GaussianDpEvent(5.0), dp_accounting.NoOpDpEvent()]
        )
    )
    restored = ledger_lib.PrivacyLedger.from_json(ledger.to_json())
    self.assertEqual(restored, ledger)
    for name in ('rdp', 'pld'):
      self.assertEqual(restored.epsilon(1e-6, name), ledger.epsilon(1e-6, name))
    # A restored ledger continues: one more round counts once.
    restored.record_gaussian(0.7, sampling_probability=0.0123)
    ledger.record_gaussian(0.7, sampling_probability=0.0123)
    self.assertEqual(restored.epsilon(1e-6), ledger.epsilon(1e-6))
    # As a string tensor, as a checkpoint would carry it.
    as_tensor = tf.constant(ledger.to_json())
    self.assertEqual(
        ledger_lib.PrivacyLedger.from_json(as_tensor.numpy().decode()), ledger
    )

  def test_from_json_refuses_foreign_content(self):
    with self.assertRaisesRegex(ValueError, 'PrivacyLedger'):
      ledger_lib.PrivacyLedger.from_json('{"entries": []}')
    bad = (
        '{"format": "tff_priv.PrivacyLedger/1", "neighboring_relation": null,'
        ' "entries": [{"count": 1, "event": {"type": "os.system"}}]}'
    )
    with self.assertRaisesRegex(ValueError, 'unknown event type'):
      ledger_lib.PrivacyLedger.from_json(bad)

  def test_bad_arguments(self):
    ledger = ledger_lib.PrivacyLedger()
    cases = [
        (lambda: ledger.record_gaussian(-1.0), 'noise_multiplier'),
        (
            lambda: ledger.record_gaussian(1.0, sampling_probability=0.0),
            'sampling_probability',
        ),
        (
            lambda: ledger.record_gaussian(1.0, sampling_probability=1.5),
            'sampling_probability',
        ),
        (lambda: ledger.record_gaussian(1.0, count=0), 'count'),
        (
            lambda: ledger.record_gaussian(1.0, population=5, sample_size=6),
            'sample_size',
        ),
        (lambda: ledger.record_pure_epsilon(0.0), 'epsilon'),
        (lambda: ledger.record_pure_epsilon(-1.0), 'epsilon'),
        (lambda: ledger.epsilon(0.0), 'delta'),
        (lambda: ledger.epsilon(1.0), 'delta'),
        (lambda: ledger.epsilon(1e-5, accountant='moments'), 'accountant'),
        (lambda: ledger.delta(-1.0), 'epsilon'),
        (lambda: ledger_lib.PrivacyLedger('swap_two'), 'neighboring_relation'),
    ]
    for fn, name in cases:
      with self.assertRaisesRegex(ValueError, name):
        fn()
    with self.assertRaisesRegex(TypeError, 'DpEvent'):
      ledger.record('gaussian')
    with self.assertRaisesRegex(TypeError, 'noise_multiplier'):
      ledger.record_gaussian('1.0')
    self.assertTrue(np.all(events.pure_epsilon_rdp([2.0], 0.0) == 0))

  def test_noise_free_gaussian_is_a_non_private_release_under_any_sampling(
      self,
  ):
    # dp_accounting's RDP accountant divides by z for a sampled-without-
    # replacement Gaussian; a noise-free one is counted as non-private.
    zero = dp_accounting.GaussianDpEvent(0.0)
    for relation, event in (
        (
            'replace_one',
            dp_accounting.SampledWithoutReplacementDpEvent(10, 3, zero),
        ),
        ('add_or_remove_one', dp_accounting.PoissonSampledDpEvent(0.3, zero)),
        ('add_or_remove_one', zero),
    ):
      with self.subTest(type(event).__name__):
        ledger = ledger_lib.PrivacyLedger(relation)
        ledger.record(event)
        report = ledger.report(1e-5)
        self.assertEqual(report['rdp_epsilon'], math.inf)
        self.assertEqual(report['pld_epsilon'], math.inf)
    # A positive z is counted as before.
    ledger = ledger_lib.PrivacyLedger('replace_one')
    ledger.record(
        dp_accounting.SampledWithoutReplacementDpEvent(
            10, 3, dp_accounting.GaussianDpEvent(1.0)
        )
    )
    self.assertLess(ledger.epsilon(1e-5), 10.0)


if __name__ == '__main__':
  tf.test.main()
