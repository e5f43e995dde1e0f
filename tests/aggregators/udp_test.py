"""Tests for tff_priv.aggregators.udp."""

import collections

from absl.testing import parameterized
import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import neighbours as neighbours_lib
from tests import tiny_models
from tff_priv.accounting import accountants
from tff_priv.accounting import guarantees
from tff_priv.aggregators import udp
from tff_priv.mechanisms import noise_schedule

# Coordinates: the relative SE of a std estimate is 1/sqrt(2 D) = 0.5%.
_D = 20_000
_VALUE = tff.TensorType(np.float32, [_D])
_WEIGHT = tff.TensorType(np.float32)
_DELTA = 0.05  # The sensitivity the factory is given.


def _std_tolerance(std):
  return 5 * std / np.sqrt(2 * _D)  # 5 standard errors of the sample std.


def _udp(noise_stddev=None, **kwargs):
  return udp.GaussianUDPFactory(
      noise_stddev, sensitivity=kwargs.pop('sensitivity', _DELTA), **kwargs
  )


def _epsilon(event):
  return (
      accountants.make_accountant('rdp', 'replace_one')
      .compose(event)
      .get_epsilon(1e-5)
  )


class GaussianUDPTest(tf.test.TestCase, parameterized.TestCase):

  def test_weighted_and_unweighted_types(self):
    weighted = _udp(noise_stddev=1.0)
    self.assertIsInstance(weighted, tff.aggregators.WeightedAggregationFactory)
    process = weighted.create(_VALUE, _WEIGHT)
    self.assertIsInstance(process, tff.templates.AggregationProcess)
    self.assertEqual(
        process.next.type_signature.parameter[1],
        tff.FederatedType(_VALUE, tff.CLIENTS),
    )
    self.assertEqual(
        process.next.type_signature.result.result,
        tff.FederatedType(_VALUE, tff.SERVER),
    )
    unweighted = _udp(
        noise_stddev=1.0,
        inner_agg_factory=tff.aggregators.UnweightedMeanFactory(),
    )
    self.assertIsInstance(
        unweighted, tff.aggregators.UnweightedAggregationFactory
    )
    self.assertFalse(unweighted.weighted)
    self.assertTrue(weighted.weighted)
    self.assertLen(unweighted.create(_VALUE).next.type_signature.parameter, 2)

  def test_a_builder_of_the_other_kind_fails_in_one_line_naming_the_fix(self):
    # Both are of both TFF kinds, so that tff.learning's builders reach
    # create (TFF's own type check named the private class, not the fix).
    weighted = _udp(noise_stddev=1.0)
    unweighted = _udp(
        noise_stddev=1.0,
        inner_agg_factory=tff.aggregators.UnweightedMeanFactory(),
    )
    for factory, build, fix in (
        (
            weighted,
            tff.learning.algorithms.build_unweighted_fed_avg,
            'UnweightedMeanFactory',
        ),
        (
            unweighted,
            tff.learning.algorithms.build_weighted_fed_avg,
            'build_unweighted_fed_avg',
        ),
    ):
      with self.assertRaisesRegex(TypeError, fix) as raised:
        build(
            tiny_models.softmax_model_fn,
            client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
            model_aggregator=factory,
        )
      self.assertNotIn('\n', str(raised.exception))

  @parameterized.parameters(1, 4, 16)
  def test_unweighted_noise_std_and_independence_across_clients(self, k):
    # Var(mean of K clients' noise) = s^2 / K (1 + (K - 1) rho): the std
    # s / sqrt(K) holds only if the K clients' noises are uncorrelated.
    s = 2.0
    process = _udp(
        noise_stddev=s,
        inner_agg_factory=tff.aggregators.UnweightedMeanFactory(),
    ).create(_VALUE)
    out = process.next(process.initialize(), [np.zeros(_D, np.float32)] * k)
    expected = s / np.sqrt(k)
    self.assertAllClose(
        np.std(out.result), expected, atol=_std_tolerance(expected)
    )
    self.assertLess(abs(np.mean(out.result)), 5 * expected / np.sqrt(_D))
    self.assertAllClose(out.measurements['noise']['noise_stddev'], s)

  def test_weighted_mean_normalises_over_sampled_clients(self):
    s = 1.0
    process = _udp(noise_stddev=s).create(_VALUE, _WEIGHT)
    values = [np.full(_D, v, np.float32) for v in (1.0, 2.0, 5.0)]
    weights = [1.0, 3.0, 0.0]  # The third client has no examples.
    out = process.next(process.initialize(), values, weights)
    # Mean = (1 * 1 + 3 * 2) / 4 = 1.75; noise std = s sqrt(sum p_i^2) with
    # p = (1/4, 3/4, 0).
    expected_std = s * np.sqrt((1 / 4) ** 2 + (3 / 4) ** 2)
    self.assertLess(
        abs(np.mean(out.result) - 1.75), 5 * expected_std / np.sqrt(_D)
    )
    self.assertAllClose(
        np.std(out.result), expected_std, atol=_std_tolerance(expected_std)
    )

  def test_zero_weight_client_breaks_nothing(self):
    process = _udp(noise_stddev=0.0).create(_VALUE, _WEIGHT)
    out = process.next(
        process.initialize(),
        [np.ones(_D, np.float32), np.full(_D, 1e30, np.float32)],
        [2.0, 0.0],
    )
    self.assertAllClose(out.result, np.ones(_D))

  def test_noise_independent_across_rounds(self):
    process = _udp(
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
    schedule = noise_schedule.BudgetSchedule(
        total_budget=16.0, initial_rounds=4
    )
    process = _udp(
        schedule=schedule,
        inner_agg_factory=tff.aggregators.UnweightedMeanFactory(),
    ).create(_VALUE)
    state = process.initialize()
    # initialize()'s event is the one the first round will release.
    self.assertEqual(
        guarantees.extract_dp_event(state, allow_initial_state=True),
        dp_accounting.GaussianDpEvent(0.5 / _DELTA),
    )
    for t in range(4):
      out = process.next(state, [np.zeros(_D, np.float32)])
      noise = out.measurements['noise']
      self.assertAllClose(noise['noise_stddev'], 0.5)  # sqrt(4 / 16).
      self.assertEqual(noise['rounds_done'], t + 1)
      self.assertAllClose(noise['spent_budget'], 4.0 * (t + 1))
      self.assertAllClose(np.std(out.result), 0.5, atol=_std_tolerance(0.5))
      # The scheduled sigma_t is the one the round's event charges.
      self.assertEqual(
          guarantees.extract_dp_event(out.state),
          dp_accounting.GaussianDpEvent(0.5 / _DELTA),
      )
      state = out.state
    with self.assertRaisesRegex(Exception, 'finished'):
      process.next(state, [np.zeros(_D, np.float32)])

  def test_structure_values(self):
    value_type = tff.to_type(
        collections.OrderedDict(
            a=tff.TensorType(np.float32, [3, 2]),
            b=tff.TensorType(np.float32, [4]),
        )
    )
    process = _udp(noise_stddev=0.0).create(value_type, _WEIGHT)
    value = collections.OrderedDict(
        a=np.ones([3, 2], np.float32), b=np.arange(4, dtype=np.float32)
    )
    out = process.next(process.initialize(), [value, value], [1.0, 1.0])
    self.assertAllClose(out.result['a'], value['a'])
    self.assertAllClose(out.result['b'], value['b'])

  @parameterized.named_parameters(
      ('weighted', None),
      ('unweighted', tff.aggregators.UnweightedMeanFactory()),
  )
  def test_dp_event_is_gaussian_sigma_over_sensitivity(self, inner):
    s, delta = 0.3, 0.07
    factory = _udp(noise_stddev=s, sensitivity=delta, inner_agg_factory=inner)
    if inner is None:
      process = factory.create(_VALUE, _WEIGHT)
      args = ([np.ones(_D, np.float32)] * 2, [3.0, 5.0])
    else:
      process = factory.create(_VALUE)
      args = ([np.ones(_D, np.float32)] * 2,)
    state = process.initialize()
    self.assertIsInstance(state, udp.ClientNoiseState)
    self.assertTrue(state.is_init_state)
    with self.assertRaises(guarantees.ExtractingDpEventFromInitialStateError):
      guarantees.extract_dp_event(state)
    out = process.next(state, *args)
    self.assertFalse(out.state.is_init_state)
    event = guarantees.extract_dp_event(out.state)
    expected = dp_accounting.GaussianDpEvent(s / delta)
    self.assertEqual(event, expected)
    self.assertAllClose(_epsilon(event), _epsilon(expected), rtol=1e-6)
    self.assertTrue(np.isfinite(_epsilon(event)))
    # The next round's event is the same: one round, one client's upload.
    again = process.next(out.state, *args)
    self.assertEqual(guarantees.extract_dp_event(again.state), expected)

  def test_guarantee(self):
    for factory in (
        _udp(noise_stddev=1.0),
        _udp(schedule=noise_schedule.BudgetSchedule(1.0, 2)),
        _udp(
            noise_stddev=1.0,
            inner_agg_factory=tff.aggregators.UnweightedMeanFactory(),
        ),
    ):
      guarantee = factory.guarantee
      self.assertEqual(guarantee.unit, 'example')
      self.assertEqual(guarantee.noise, 'local')
      self.assertEqual(guarantee.neighboring_relation, 'replace_one')
      # The precondition: the event needs UDP's client work.
      self.assertIn('udp.build_udp_process', guarantee.description)
      self.assertIs(guarantees.guarantee_of(factory), guarantee)

  @parameterized.named_parameters(
      ('fixed_weighted', dict(noise_stddev=1.0), True),
      ('fixed_unweighted', dict(noise_stddev=1.0), False),
      (
          'scheduled',
          dict(schedule=noise_schedule.BudgetSchedule(16.0, 4)),
          True,
      ),
  )
  def test_no_exact_statistic_in_measurements(self, kwargs, weighted):
    # Two neighbouring client sets: the last client's value is replaced by
    # one far from the others. A measurement that is the same in two runs of
    # each but differs between them is an exact statistic of the clients.
    d = 100
    value_type = tff.TensorType(np.float32, [d])
    rng = np.random.default_rng(3)
    values = [rng.normal(size=d).astype(np.float32) for _ in range(3)]
    far = np.full(d, 1e3, np.float32)
    neighbour_pair = (values, values[:2] + [far])
    if weighted:
      process = _udp(**kwargs).create(value_type, _WEIGHT)
      run = lambda v: process.next(  # pylint: disable=g-long-lambda
          process.initialize(), v, [2.0, 3.0, 4.0]
      ).measurements
    else:
      process = _udp(
          **kwargs, inner_agg_factory=tff.aggregators.UnweightedMeanFactory()
      ).create(value_type)
      run = lambda v: process.next(process.initialize(), v).measurements
    self.assertEqual(
        neighbours_lib.exact_statistic_leaves(run, *neighbour_pair), []
    )

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'noise_stddev'):
      _udp(noise_stddev=-1.0)
    with self.assertRaisesRegex(ValueError, 'exactly one'):
      _udp()
    with self.assertRaisesRegex(ValueError, 'exactly one'):
      _udp(1.0, schedule=noise_schedule.BudgetSchedule(1.0, 1))
    with self.assertRaisesRegex(TypeError, 'schedule'):
      _udp(schedule='crd')
    with self.assertRaisesRegex(TypeError, 'inner_agg_factory'):
      _udp(1.0, inner_agg_factory='mean')
    with self.assertRaisesRegex(TypeError, 'value_type'):
      _udp(1.0).create(tff.TensorType(np.int32, [3]), _WEIGHT)
    for bad in (0.0, -1.0, float('nan'), float('inf')):
      with self.assertRaisesRegex(ValueError, 'sensitivity'):
        _udp(1.0, sensitivity=bad)
    with self.assertRaisesRegex(TypeError, 'sensitivity'):
      udp.GaussianUDPFactory(1.0)  # pylint: disable=missing-kwoa


if __name__ == '__main__':
  tf.test.main()
