"""Tests for tff_priv.aggregators.gaussian_udp."""

import collections

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.aggregators import gaussian_udp
from tff_priv.mechanisms import noise_schedule

_D = 20_000  # Coordinates: the relative SE of a std estimate is 1/sqrt(2 D) = 0.5%.
_VALUE = tff.TensorType(np.float32, [_D])
_WEIGHT = tff.TensorType(np.float32)


def _std_tolerance(std):
  return 5 * std / np.sqrt(2 * _D)  # 5 standard errors of the sample std.


class GaussianUDPTest(tf.test.TestCase, parameterized.TestCase):

  def test_weighted_and_unweighted_types(self):
    weighted = gaussian_udp.GaussianUDPFactory(noise_stddev=1.0)
    self.assertIsInstance(weighted, tff.aggregators.WeightedAggregationFactory)
    process = weighted.create(_VALUE, _WEIGHT)
    self.assertIsInstance(process, tff.templates.AggregationProcess)
    self.assertEqual(process.next.type_signature.parameter[1], tff.FederatedType(_VALUE, tff.CLIENTS))
    self.assertEqual(process.next.type_signature.result.result, tff.FederatedType(_VALUE, tff.SERVER))
    unweighted = gaussian_udp.GaussianUDPFactory(
        noise_stddev=1.0,
        inner_agg_factory=tff.aggregators.UnweightedMeanFactory(),
    )
    self.assertIsInstance(
        unweighted, tff.aggregators.UnweightedAggregationFactory
    )
    self.assertNotIsInstance(
        unweighted, tff.aggregators.WeightedAggregationFactory
    )
    self.assertLen(unweighted.create(_VALUE).next.type_signature.parameter, 2)

  @parameterized.parameters(1, 4, 16)
  def test_unweighted_noise_std_and_independence_across_clients(self, k):
    # Var(mean of K clients' noise) = s^2 / K (1 + (K - 1) rho): the std
    # s / sqrt(K) holds only if the K clients' noises are uncorrelated.
    s = 2.0
    process = gaussian_udp.GaussianUDPFactory(
        noise_stddev=s,
        inner_agg_factory=tff.aggregators.UnweightedMeanFactory(),
    ).create(_VALUE)
    out = process.next(process.initialize(), [np.zeros(_D, np.float32)] * k)
    expected = s / np.sqrt(k)
    self.assertAllClose(np.std(out.result), expected, atol=_std_tolerance(expected))
    self.assertLess(abs(np.mean(out.result)), 5 * expected / np.sqrt(_D))
    self.assertAllClose(out.measurements['noise']['noise_stddev'], s)

  def test_weighted_mean_normalises_over_sampled_clients(self):
    s = 1.0
    process = gaussian_udp.GaussianUDPFactory(noise_stddev=s).create(
        _VALUE, _WEIGHT
    )
    values = [np.full(_D, v, np.float32) for v in (1.0, 2.0, 5.0)]
    weights = [1.0, 3.0, 0.0]  # The third client has no examples.
    out = process.next(process.initialize(), values, weights)
    # Mean = (1 * 1 + 3 * 2) / 4 = 1.75; noise std = s sqrt(sum p_i^2) with
    # p = (1/4, 3/4, 0).
    expected_std = s * np.sqrt((1 / 4) ** 2 + (3 / 4) ** 2)
    self.assertLess(abs(np.mean(out.result) - 1.75), 5 * expected_std / np.sqrt(_D))
    self.assertAllClose(
        np.std(out.result), expected_std, atol=_std_tolerance(expected_std)
    )

  def test_zero_weight_client_breaks_nothing(self):
    process = gaussian_udp.GaussianUDPFactory(noise_stddev=0.0).create(
        _VALUE, _WEIGHT
    )
    out = process.next(
        process.initialize(),
        [np.ones(_D, np.float32), np.full(_D, 1e30, np.float32)],
        [2.0, 0.0],
    )
    self.assertAllClose(out.result, np.ones(_D))

  def test_noise_independent_across_rounds(self):
    process = gaussian_udp.GaussianUDPFactory(
        noise_stddev=1.0,
        inner_agg_factory=tff.aggregators.UnweightedMeanFactory(),
    ).create(_VALUE)
    state = process.initialize()
    zeros = [np.zeros(_D, np.float32)] * 2
    first = process.next(state, zeros)
    second = process.next(first.state, zeros)
    # Correlation of independent rounds ~ N(0, 1/D); 5 / sqrt(D) = 0.035.
    self.assertLess(
        abs(np.corrcoef(first.result, second.result)[0, 1]), 5 / np.sqrt(_D)
    )

  def test_schedule_drives_the_noise(self):
    schedule = noise_schedule.BudgetSchedule(total_budget=16.0, initial_rounds=4)
    process = gaussian_udp.GaussianUDPFactory(
        schedule=schedule,
        inner_agg_factory=tff.aggregators.UnweightedMeanFactory(),
    ).create(_VALUE)
    state = process.initialize()
    for t in range(4):
      out = process.next(state, [np.zeros(_D, np.float32)])
      noise = out.measurements['noise']
      self.assertAllClose(noise['noise_stddev'], 0.5)  # sqrt(4 / 16).
      self.assertEqual(noise['rounds_done'], t + 1)
      self.assertAllClose(noise['spent_budget'], 4.0 * (t + 1))
      self.assertAllClose(np.std(out.result), 0.5, atol=_std_tolerance(0.5))
      state = out.state
    with self.assertRaisesRegex(Exception, 'finished'):
      process.next(state, [np.zeros(_D, np.float32)])

  def test_structure_values(self):
    value_type = tff.to_type(
        collections.OrderedDict(
            a=tff.TensorType(np.float32, [3, 2]), b=tff.TensorType(np.float32, [4])
        )
    )
    process = gaussian_udp.GaussianUDPFactory(noise_stddev=0.0).create(
        value_type, _WEIGHT
    )
    value = collections.OrderedDict(
        a=np.ones([3, 2], np.float32), b=np.arange(4, dtype=np.float32)
    )
    out = process.next(process.initialize(), [value, value], [1.0, 1.0])
    self.assertAllClose(out.result['a'], value['a'])
    self.assertAllClose(out.result['b'], value['b'])

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'noise_stddev'):
      gaussian_udp.GaussianUDPFactory(noise_stddev=-1.0)
    with self.assertRaisesRegex(ValueError, 'exactly one'):
      gaussian_udp.GaussianUDPFactory()
    with self.assertRaisesRegex(ValueError, 'exactly one'):
      gaussian_udp.GaussianUDPFactory(
          1.0, schedule=noise_schedule.BudgetSchedule(1.0, 1)
      )
    with self.assertRaisesRegex(TypeError, 'schedule'):
      gaussian_udp.GaussianUDPFactory(schedule='crd')
    with self.assertRaisesRegex(TypeError, 'inner_agg_factory'):
      gaussian_udp.GaussianUDPFactory(1.0, inner_agg_factory='mean')
    with self.assertRaisesRegex(TypeError, 'value_type'):
      gaussian_udp.GaussianUDPFactory(1.0).create(
          tff.TensorType(np.int32, [3]), _WEIGHT
      )


if __name__ == '__main__':
  tf.test.main()
