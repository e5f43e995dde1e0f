"""audit_aggregator catches a wrong claim and a leaking measurement.

Statistical tests with fixed seeds for the canary and the split; the
factories' noise is TF's nondeterministic noise, so each test states how often
it can fail by chance (at most 1e-7).
"""

import collections
import warnings

from absl.testing import absltest
import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.auditing import aggregator_audit

pytestmark = pytest.mark.statistical

_VALUE = tff.TensorType(np.float32, [20])
_DELTA = 1e-5


def _tff_gaussian(z):
  return tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
      noise_multiplier=z, clients_per_round=5, clip=1.0)


def _leaking(z):
  """TFF's gaussian_fixed plus a measurement: the exact sum of the values."""

  @tff.tensorflow.computation(_VALUE)
  def total(value):
    return tf.reduce_sum(value)

  def client_measurement_fn(value):
    return collections.OrderedDict(
        value_sum=tff.federated_sum(tff.federated_map(total, value)))

  return tff.aggregators.add_measurements(
      _tff_gaussian(z), client_measurement_fn=client_measurement_fn)


class AggregatorAuditTest(absltest.TestCase):

  def test_gaussian_fixed_against_a_false_claim_fails_loudly(self):
    # z = 0.1 against a claimed z = 5 (eps 0.73): the canary moves the sum by
    # 10 noise stds, so the best threshold errs on a run with probability
    # Phi(-5) ~ 3e-7, and the 100 evaluation runs per set show the maximum
    # bound (3.28 > 0.73) except with probability ~ 6e-5 x (the few errors
    # that would still leave it above 0.73): far below 1e-7 to fall under.
    with self.assertWarns(aggregator_audit.AuditFailedWarning):
      result = aggregator_audit.audit_aggregator(
          _tff_gaussian(0.1), value_type=_VALUE, num_clients=5, trials=200,
          delta=_DELTA, claimed_dp_event=dp_accounting.GaussianDpEvent(5.0))
    self.assertFalse(result.passed)
    self.assertAlmostEqual(result.claimed_epsilon, 0.726, delta=0.01)
    self.assertGreater(result.epsilon_lower_bound, result.claimed_epsilon)
    with self.assertRaises(aggregator_audit.AuditFailedError):
      result.raise_if_failed()

  def test_gaussian_fixed_against_its_own_event_passes(self):
    with warnings.catch_warnings():
      warnings.simplefilter('error', aggregator_audit.AuditFailedWarning)
      # alpha = 1e-7: an honest claim fails with at most that probability.
      result = aggregator_audit.audit_aggregator(
          _tff_gaussian(0.3), value_type=_VALUE, num_clients=5, trials=1000,
          delta=_DELTA, alpha=1e-7)
    self.assertTrue(result.passed)
    self.assertEqual(result.neighboring_relation, 'add_or_remove_one')
    self.assertIn('0.3', result.claimed_dp_event)
    self.assertGreater(result.claimed_epsilon, 10)
    # Not vacuous: the same audit sees the weak noise.
    self.assertGreater(result.epsilon_lower_bound, 1.0)
    result.raise_if_failed()

  def test_exact_statistic_in_a_measurement_fails_at_the_maximum(self):
    # z = 5 (eps 0.73) on the aggregate, but a measurement is exact: the
    # bound reaches the most the trials can show.
    with self.assertWarns(aggregator_audit.AuditFailedWarning):
      result = aggregator_audit.audit_aggregator(
          _leaking(5.0), value_type=_VALUE, num_clients=5, trials=200,
          delta=_DELTA, canary=np.full([20], 20**-0.5))  # Norm = clip.
    self.assertFalse(result.passed)
    self.assertEqual((result.false_positives, result.false_negatives), (0, 0))
    self.assertAlmostEqual(
        result.epsilon_lower_bound, result.max_epsilon_lower_bound)
    self.assertStartsWith(result.statistic, 'measurements/')

  def test_bad_arguments(self):
    factory = _tff_gaussian(1.0)
    for kwargs, message in (
        (dict(num_clients=0), 'num_clients'),
        (dict(trials=2), 'trials'),
        (dict(delta=0.0), 'delta'),
        (dict(value_type=tff.TensorType(np.int32, [3])), 'value_type'),
        (dict(canary=[1.0, 2.0]), 'canary has 2 values'),
    ):
      args = dict(value_type=_VALUE, num_clients=2, trials=10, delta=_DELTA)
      args.update(kwargs)
      with self.subTest(message):
        with self.assertRaisesRegex(ValueError, message):
          aggregator_audit.audit_aggregator(factory, **args)


if __name__ == '__main__':
  absltest.main()
