"""Tests for LDPEncodeFactory and ReportMeanFactory (tff_priv.aggregators)."""

import collections
import math

from absl.testing import parameterized
import dp_accounting
import numpy as np
import pytest
from sklearn import datasets
import tensorflow as tf
import tensorflow_federated as tff

from tests import neighbours
from tff_priv.accounting import accountants
from tff_priv.accounting import events
from tff_priv.accounting import guarantees
from tff_priv.aggregators import ldp as ldp_aggregators
from tff_priv.mechanisms import ldp as ldp_mechanisms

_F32 = np.float32


def _list_type(*shapes):
  return tff.StructWithPythonType(
      [tff.TensorType(_F32, s) for s in shapes], list
  )


def _zeros_like_type(value_type):
  if isinstance(value_type, tff.TensorType):
    return np.zeros(value_type.shape, value_type.dtype.type)
  flat = [
      np.zeros(t.shape, t.dtype.type) for t in tff.structure.flatten(value_type)
  ]
  return tff.types.type_to_py_container(
      tff.structure.pack_sequence_as(value_type, flat), value_type
  )


def _two_values(center, radius, eps, dtype=tf.float32):
  """c -+ r q as the encoder emits them for a tensor of `dtype`."""
  compute = ldp_mechanisms.compute_dtype(dtype)
  lo, hi = ldp_mechanisms.output_values(
      tf.constant(center, compute), tf.constant(radius, compute), eps
  )
  return [tf.cast(lo, dtype).numpy(), tf.cast(hi, dtype).numpy()]


def _rdp_epsilon(event, delta=1e-5):
  accountant = accountants.make_accountant('rdp', 'replace_one')
  accountant.compose(event)
  return accountant.get_epsilon(delta)


def _one_round_event(factory, value_type, clients):
  process = factory.create(value_type)
  output = process.next(process.initialize(), clients)
  return guarantees.extract_dp_event(output.state)


def _zscores(result, values, center, radius, eps):
  """(result - mean of clipped values) / sd of the mean (Lemma 4).

  The factory's clients draw their randomness from OS entropy inside their own
  computation (that is what makes two clients independent), so its outputs
  cannot be seeded: statistical checks use a tolerance of 5 standard errors (a
  false-alarm probability below 1e-6 per check), with standard errors from the
  exact two-point distribution (Lemma 4). Client data use fixed seeds.
  """
  stacked = np.stack(values).astype(np.float64)
  clipped = np.clip(stacked, center - radius, center + radius)
  var = ldp_mechanisms.mean_variance(stacked, center, radius, eps).numpy()
  return (np.asarray(result, np.float64) - clipped.mean(axis=0)) / np.sqrt(var)


class TypeTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters('fixed', 'minmax')
  def test_type_signature(self, mode):
    value_type = _list_type([3], [2, 2])
    process = ldp_aggregators.LDPEncodeFactory(1.0, mode, radius=1.0).create(
        value_type
    )
    self.assertIsInstance(process, tff.templates.AggregationProcess)
    vector = tff.TensorType(_F32, [2])
    state_type = process.initialize.type_signature.result
    self.assertEqual(state_type.placement, tff.SERVER)
    member = state_type.member
    self.assertIs(member.python_container, ldp_aggregators.LDPState)
    self.assertEqual(
        tff.structure.name_list(member),
        [
            'center',
            'radius',
            'range_estimator',
            'report_mean',
            'dp_event',
            'is_init_state',
        ],
    )
    for name, expected in (
        ('center', vector),
        ('radius', vector),
        ('range_estimator', tff.StructType([])),
        ('report_mean', tff.StructType([])),
        ('is_init_state', tff.TensorType(np.bool_)),
    ):
      self.assertTrue(member[name].is_equivalent_to(expected), name)
    result_type = process.next.type_signature.result
    # The state next returns has initialize's type, dp_event included.
    self.assertTrue(result_type.state.is_equivalent_to(state_type))
    self.assertTrue(
        result_type.result.is_equivalent_to(
            tff.FederatedType(value_type, tff.SERVER)
        )
    )
    measurements_type = tff.FederatedType(
        collections.OrderedDict(center=vector, radius=vector),
        tff.SERVER,
    )
    self.assertTrue(
        result_type.measurements.is_equivalent_to(measurements_type)
    )

  @parameterized.named_parameters(
      ('tensor', tff.TensorType(_F32, [4]), 4),
      (
          'unnamed_struct',
          tff.StructType([tff.TensorType(_F32, [2, 3])] * 2),
          12,
      ),
      (
          'odict_mixed_dtypes',
          tff.StructWithPythonType(
              [
                  ('b', tff.TensorType(np.float64, [3])),
                  ('a', tff.TensorType(np.float16, [2])),
              ],
              collections.OrderedDict,
          ),
          5,
      ),
  )
  def test_value_structures(self, value_type, d):
    factory = ldp_aggregators.LDPEncodeFactory(2.0, radius=1.0)
    self.assertEqual(factory.num_scalars(value_type), d)
    process = factory.create(value_type)
    output = process.next(process.initialize(), [_zeros_like_type(value_type)])
    flat = (
        [output.result]
        if isinstance(value_type, tff.TensorType)
        else tff.structure.flatten(
            tff.structure.from_container(output.result, recursive=True)
        )
    )
    types = (
        [value_type]
        if isinstance(value_type, tff.TensorType)
        else tff.structure.flatten(value_type)
    )
    for x, t in zip(flat, types):
      # One client: the result is its report, one of c +- r q per scalar.
      self.assertEqual(x.dtype, t.dtype)
      self.assertTrue(np.all(np.isin(x, _two_values(0.0, 1.0, 2.0, t.dtype))))


class FixedRangeTest(tf.test.TestCase):

  def test_per_tensor_range_two_values(self):
    value_type = _list_type([6], [4])
    factory = ldp_aggregators.LDPEncodeFactory(
        1.0, center=[0.0, 5.0], radius=[1.0, 0.5]
    )
    process = factory.create(value_type)
    values = [
        np.array([-3.0, -1.0, 0.0, 0.5, 1.0, 2.0], _F32),  # 2 of 6 outside
        np.array([5.0, 5.4, 4.6, 9.0], _F32),  # 1 of 4 outside
    ]
    output = process.next(process.initialize(), [values])
    self.assertTrue(np.all(np.isin(output.result[0], _two_values(0, 1, 1.0))))
    self.assertTrue(
        np.all(np.isin(output.result[1], _two_values(5.0, 0.5, 1.0)))
    )
    m = output.measurements
    self.assertAllEqual(m['center'], [0.0, 5.0])
    self.assertAllEqual(m['radius'], [1.0, 0.5])
    self.assertEqual(list(m), ['center', 'radius'])
    self.assertAllEqual(output.state.center, [0.0, 5.0])
    self.assertAllEqual(output.state.radius, [1.0, 0.5])

  def test_unbiased_with_lemma_4_variance(self):
    eps, c, r, n, d = 1.0, 0.2, 1.0, 8, 4000
    rng = np.random.default_rng(0)
    values = [rng.normal(c, 0.6, size=[d]).astype(_F32) for _ in range(n)]
    process = ldp_aggregators.LDPEncodeFactory(eps, center=c, radius=r).create(
        tff.TensorType(_F32, [d])
    )
    output = process.next(process.initialize(), values)
    z = _zscores(output.result, values, c, r, eps)
    # The d coordinates are independent: mean(z) has SE 1/sqrt(d); the sample
    # variance of z has SE sqrt((E z^4 - 1) / d), E z^4 estimated from z.
    self.assertLess(abs(z.mean()), 5 / math.sqrt(d))
    m4 = np.mean(z**4)
    self.assertNear(z.var(), 1.0, 5 * math.sqrt((m4 - 1) / d))
    # Some values were clipped: the estimate is of the clipped mean.
    self.assertGreater(np.mean(np.abs(np.stack(values) - c) > r), 0.05)

  def test_per_tensor_length_must_match(self):
    value_type = _list_type([2], [2])
    for kwargs, name in (
        (dict(center=[0.0, 1.0, 2.0], radius=1.0), 'center'),
        (dict(radius=[1.0]), 'radius'),
    ):
      with self.assertRaisesRegex(ValueError, name):
        ldp_aggregators.LDPEncodeFactory(1.0, **kwargs).create(value_type)


class MinMaxRangeTest(tf.test.TestCase):

  def test_state_after_round_is_global_min_max(self):
    # Dyadic values: (min + max) / 2 and (max - min) / 2 are exact.
    values = [
        [np.array([0.25, -0.5, np.nan], _F32), np.array([3.0, 3.0], _F32)],
        [np.array([1.5, 0.0, 0.125], _F32), np.array([3.0, 3.0], _F32)],
        [np.array([np.inf, 0.75, -0.25], _F32), np.array([3.0, 3.0], _F32)],
    ]
    factory = ldp_aggregators.LDPEncodeFactory(
        1.0, 'minmax', radius=2.0, min_radius=1e-3
    )
    self.assertFalse(factory.range_release_is_private)
    process = factory.create(_list_type([3], [2]))
    first = process.next(process.initialize(), values)
    # The round encodes with the initial range, then updates it.
    self.assertAllEqual(first.measurements['center'], [0.0, 0.0])
    self.assertAllEqual(first.measurements['radius'], [2.0, 2.0])
    state = first.state
    # Tensor 0: global min / max; NaN and inf count as the center (0).
    self.assertEqual(state.center[0] - state.radius[0], -0.5)
    self.assertEqual(state.center[0] + state.radius[0], 1.5)
    # Tensor 1: all values equal, so the radius is min_radius.
    self.assertAllEqual(state.center, [0.5, 3.0])
    self.assertAllEqual(state.radius, np.array([1.0, 1e-3], _F32))
    second = process.next(state, values)
    self.assertAllEqual(second.measurements['center'], [0.5, 3.0])
    self.assertAllEqual(
        second.measurements['radius'], np.array([1.0, 1e-3], _F32)
    )

  def test_non_finite_values_count_as_the_center(self):
    process = ldp_aggregators.LDPEncodeFactory(
        1.0, 'minmax', radius=2.0, min_radius=1e-3
    ).create(tff.TensorType(_F32, [2]))
    output = process.next(
        process.initialize(), [np.array([np.nan, np.inf], _F32)] * 2
    )
    self.assertAllEqual(output.state.center, [0.0])
    self.assertAllEqual(output.state.radius, np.array([1e-3], _F32))
    self.assertTrue(np.all(np.isfinite(output.result)))

  def test_range_release_is_charged_as_non_private(self):
    factory = ldp_aggregators.LDPEncodeFactory(1.0, 'minmax', radius=1.0)
    event = _one_round_event(
        factory, _list_type([2]), [[np.array([0.5, -0.5], _F32)]]
    )
    self.assertEqual(
        event,
        dp_accounting.ComposedDpEvent(
            [
                dp_accounting.SelfComposedDpEvent(
                    events.PureEpsilonDpEvent(1.0), 2
                ),
                dp_accounting.NonPrivateDpEvent(),
            ]
        ),
    )
    self.assertEqual(_rdp_epsilon(event), math.inf)
    self.assertIn('not private', factory.guarantee.description)


class QuantileRangeTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters((0.01, -1), (10.0, 1))
  def test_radius_moves_toward_the_clients(self, scale, direction):
    n, lr, target, r0 = 10, 0.2, 0.5, 1.0
    factory = ldp_aggregators.LDPEncodeFactory(
        1.0,
        'quantile',
        radius=r0,
        quantile_target=target,
        quantile_learning_rate=lr,
        expected_clients_per_round=n,
    )
    self.assertTrue(factory.range_release_is_private)
    process = factory.create(_list_type([5]))
    rng = np.random.default_rng(1)
    values = [[rng.uniform(-scale, scale, [5]).astype(_F32)] for _ in range(n)]
    new_radius = process.next(process.initialize(), values).state.radius[0]
    # Geometric update r * exp(-lr (below - target)), below in [0, 1]: the
    # radius can never move further than these bounds...
    self.assertBetween(
        new_radius,
        r0 * math.exp(-lr * (1 - target)) * (1 - 1e-6),
        r0 * math.exp(lr * target) * (1 + 1e-6),
    )
    # ... and every client is below (above) r0: the noised fraction below is
    # 1 (0) +- N(0, 1/20^2), so it moves by 5 sd = 0.25 at least.
    if direction < 0:
      self.assertLess(new_radius, r0 * math.exp(-lr * 0.25))
    else:
      self.assertGreater(new_radius, r0 * math.exp(lr * 0.25))

  @pytest.mark.slow
  def test_range_event_is_a_gaussian_count_per_tensor_replace_one(self):
    n, stddev, eps = 50, 5.0, 1.0
    value_type = _list_type([2], [3], [4])
    factory = ldp_aggregators.LDPEncodeFactory(
        eps,
        'quantile',
        radius=1.0,
        expected_clients_per_round=n,
        quantile_noise_stddev=stddev,
    )
    clients = [
        [np.full([2], 0.1 * i, _F32), np.zeros([3], _F32), np.ones([4], _F32)]
        for i in range(3)
    ]
    event = _one_round_event(factory, value_type, clients)
    # Replace-one: a client's record flips from -0.5 to +0.5, sensitivity 1.
    by_hand = dp_accounting.ComposedDpEvent(
        [
            dp_accounting.SelfComposedDpEvent(
                events.PureEpsilonDpEvent(eps), 9
            ),
            dp_accounting.ComposedDpEvent(
                [dp_accounting.GaussianDpEvent(stddev / 1.0)] * 3
            ),
        ]
    )
    self.assertEqual(event, by_hand)
    self.assertIsInstance(event.events[1].events[0].noise_multiplier, float)
    self.assertAllClose(_rdp_epsilon(event), _rdp_epsilon(by_hand), rtol=1e-6)
    self.assertTrue(math.isfinite(_rdp_epsilon(event)))

    def range_epsilon(ev, rounds=100):
      accountant = dp_accounting.rdp.RdpAccountant(
          neighboring_relation=(dp_accounting.NeighboringRelation.REPLACE_ONE)
      )
      accountant.compose(ev, rounds)
      return accountant.get_epsilon(1e-5)

    # L Gaussian releases of multiplier z compose like one of z / sqrt(L).
    self.assertAllClose(
        range_epsilon(event.events[1]),
        range_epsilon(dp_accounting.GaussianDpEvent(stddev / math.sqrt(3))),
        rtol=1e-4,
    )
    noisier = ldp_aggregators.LDPEncodeFactory(
        eps,
        'quantile',
        radius=1.0,
        expected_clients_per_round=n,
        quantile_noise_stddev=2 * stddev,
    )
    noisier_event = _one_round_event(noisier, value_type, clients)
    self.assertLess(
        range_epsilon(noisier_event.events[1]), range_epsilon(event.events[1])
    )

  def test_multiplier_is_half_of_tensorflow_privacys_add_or_remove_one(self):
    # tensorflow_privacy's query accounts a record of +-0.5 appearing or not
    # (stddev / 0.5); replacing a client flips it (stddev / 1).
    n, stddev = 40, 3.0
    factory = ldp_aggregators.LDPEncodeFactory(
        1.0,
        'quantile',
        radius=1.0,
        expected_clients_per_round=n,
        quantile_noise_stddev=stddev,
    )
    query = factory._quantile_query(1.0)  # pylint: disable=protected-access
    _, _, tfp_event = query.get_noised_result(
        query.initial_sample_state(), query.initial_global_state()
    )
    event = _one_round_event(
        factory, tff.TensorType(_F32, [3]), [np.zeros([3], _F32)]
    )
    self.assertAllClose(
        event.events[1].events[0].noise_multiplier,
        float(tfp_event.noise_multiplier) / 2,
        rtol=1e-6,
    )

  def test_default_noise_is_andrew_et_al(self):
    event = _one_round_event(
        ldp_aggregators.LDPEncodeFactory(
            1.0, 'quantile', radius=1.0, expected_clients_per_round=40
        ),
        tff.TensorType(_F32, [3]),
        [np.zeros([3], _F32)],
    )
    # stddev = expected / 20 = 2, multiplier 2 / 1 under replace-one.
    self.assertEqual(event.events[1].events[0].noise_multiplier, 2.0)

  def test_guarantee_says_whom_the_range_release_protects(self):
    guarantee = ldp_aggregators.LDPEncodeFactory(
        1.0, 'quantile', radius=1.0, expected_clients_per_round=10
    ).guarantee
    self.assertEqual(guarantee.unit, 'client')
    # The server sees the exact count before the noise: nothing against it.
    self.assertEqual(guarantee.noise, 'central')
    self.assertEqual(
        guarantee.server_view_event(dp_accounting.GaussianDpEvent(1.0)),
        dp_accounting.NonPrivateDpEvent(),
    )
    self.assertEqual(guarantee.neighboring_relation, 'replace_one')
    self.assertIn('in the clear', guarantee.description)
    self.assertIn('not against that server', guarantee.description)


class DpEventTest(tf.test.TestCase):

  def test_fixed_round_event_is_d_pure_epsilon_releases(self):
    eps = 0.7
    value_type = _list_type([3], [2, 2])
    factory = ldp_aggregators.LDPEncodeFactory(eps, radius=1.0)
    self.assertEqual(factory.num_scalars(value_type), 7)
    process = factory.create(value_type)
    state = process.initialize()
    clients = [[np.zeros([3], _F32), np.ones([2, 2], _F32)]] * 2
    output = process.next(state, clients)
    event = guarantees.extract_dp_event(output.state)
    by_hand = dp_accounting.ComposedDpEvent(
        [
            dp_accounting.SelfComposedDpEvent(
                events.PureEpsilonDpEvent(eps), 7
            ),
            dp_accounting.NoOpDpEvent(),
        ]
    )
    self.assertEqual(event, by_hand)
    self.assertIsInstance(event.events[0].event.epsilon, float)
    self.assertIsInstance(event.events[0].count, int)
    self.assertAllClose(_rdp_epsilon(event), _rdp_epsilon(by_hand), rtol=1e-6)
    # The next round's event is the same.
    again = process.next(output.state, clients)
    self.assertEqual(guarantees.extract_dp_event(again.state), by_hand)
    guarantee = factory.guarantee
    self.assertEqual(
        (guarantee.unit, guarantee.noise, guarantee.neighboring_relation),
        ('client', 'local', 'replace_one'),
    )

  def test_initial_state_event_is_a_placeholder(self):
    for mode, kwargs in (
        ('fixed', {}),
        ('minmax', {}),
        ('quantile', dict(expected_clients_per_round=10)),
    ):
      process = ldp_aggregators.LDPEncodeFactory(
          1.0, mode, radius=1.0, **kwargs
      ).create(_list_type([2], [3]))
      state = process.initialize()
      self.assertTrue(state.is_init_state)
      with self.assertRaises(guarantees.ExtractingDpEventFromInitialStateError):
        guarantees.extract_dp_event(state)
      output = process.next(state, [[np.zeros([2], _F32), np.zeros([3], _F32)]])
      self.assertFalse(output.state.is_init_state)
      # Same structure in both states.
      tf.nest.assert_same_structure(
          state.dp_event, output.state.dp_event, check_types=False
      )


class ExactStatisticTest(tf.test.TestCase, parameterized.TestCase):
  """No measurement is an exact statistic of the clients' values.

  `neighbours.exact_statistic_leaves` is the neighbouring-input check of what a
  process measures: a measurement that is deterministic for a given input yet
  changes when one client's value is replaced is an exact client statistic.
  """

  def test_helper_flags_an_exact_statistic(self):
    rng = np.random.default_rng(5)
    values = [np.zeros([3], _F32)] * 3
    neighbour = [np.array([np.nan, 0.0, 0.0], _F32)] + values[1:]

    def run(clients):
      return collections.OrderedDict(
          noised=np.float32(rng.normal()),
          nonfinite_count=np.int64(sum(np.isnan(c).sum() for c in clients)),
          public=np.float32(1.0),
      )

    self.assertEqual(
        neighbours.exact_statistic_leaves(run, values, neighbour),
        ['nonfinite_count'],
    )
    self.assertEqual(
        neighbours.exact_statistic_leaves(
            run, values, neighbour, public=('nonfinite_count',)
        ),
        [],
    )

  @parameterized.product(
      mode=('fixed', 'quantile', 'minmax'), replacement=('far', 'nan')
  )
  def test_measurements_of_neighbouring_inputs(self, mode, replacement):
    value_type = _list_type([4], [3])
    factory = ldp_aggregators.LDPEncodeFactory(
        1.0,
        mode,
        radius=1.0,
        expected_clients_per_round=4,
        quantile_noise_stddev=0.2,
    )
    process = factory.create(value_type)
    rng = np.random.default_rng(6)
    clients = [
        [
            rng.uniform(-0.5, 0.5, [4]).astype(_F32),
            rng.uniform(-0.5, 0.5, [3]).astype(_F32),
        ]
        for _ in range(4)
    ]
    other = (
        np.full([4], 100.0, _F32)
        if replacement == 'far'
        else np.array([np.nan, 0.0, 0.0, 0.0], _F32)
    )
    neighbour = [[other, clients[0][1]]] + clients[1:]

    def run(values):
      # Two rounds: the second measures the range the first one updated.
      first = process.next(process.initialize(), values)
      second = process.next(first.state, values)
      return (first.measurements, second.measurements)

    documented = {
        # Public constants.
        'fixed': ('0/center', '0/radius', '1/center', '1/radius'),
        # The DP estimate: noised, nothing to exempt.
        'quantile': (),
        # The non-private min/max release, charged as NonPrivateDpEvent.
        'minmax': ('1/center', '1/radius'),
    }[mode]
    self.assertEqual(
        neighbours.exact_statistic_leaves(
            run, clients, neighbour, public=documented
        ),
        [],
    )
    if mode == 'minmax' and replacement == 'far':
      # Without its documentation the min/max range is caught.
      self.assertNotEmpty(
          neighbours.exact_statistic_leaves(run, clients, neighbour)
      )


class NonFiniteTest(tf.test.TestCase):

  def test_nonfinite_values_are_encoded_as_the_center(self):
    eps, c, r, n, d = 1.0, 0.0, 1.0, 4, 2000
    rng = np.random.default_rng(2)
    values = [rng.uniform(-1, 1, [d]).astype(_F32) for _ in range(n)]
    values[0][:1000] = np.nan
    values[0][1000] = np.inf
    values[1][1001] = -np.inf
    process = ldp_aggregators.LDPEncodeFactory(eps, radius=r).create(
        _list_type([d], [3])
    )
    clients = [[v, np.zeros([3], _F32)] for v in values]
    output = process.next(process.initialize(), clients)
    self.assertTrue(np.all(np.isfinite(output.result[0])))
    self.assertEqual(list(output.measurements), ['center', 'radius'])
    # Where client 0 had NaN, it reported an encoding of the center c = 0:
    # the mean over the 4 clients is unbiased for the mean of (0, clients
    # 1-3) (z-scores with n = 4; SE of their mean is 1/sqrt(1000)), and
    # nothing shows which scalars were non-finite.
    others = [np.zeros(1000, _F32)] + [v[:1000] for v in values[1:]]
    z = _zscores(output.result[0][:1000], others, c, r, eps)
    self.assertLess(abs(z.mean()), 5 / math.sqrt(1000))
    self.assertNear(z.var(), 1.0, 5 * math.sqrt((np.mean(z**4) - 1) / 1000))

  def test_coordinate_nobody_reports_is_zero(self):
    process = ldp_aggregators.ReportMeanFactory().create(
        tff.TensorType(_F32, [3])
    )
    reports = [
        np.array([np.nan, 1.0, np.nan], _F32),
        np.array([np.nan, 3.0, 4.0], _F32),
    ]
    output = process.next(process.initialize(), reports)
    self.assertAllEqual(output.result, [0.0, 2.0, 4.0])
    # The counts of reports are used inside the mean, never measured.
    self.assertEmpty(output.measurements)


class IndependenceTest(tf.test.TestCase):

  def test_two_clients_with_identical_inputs_are_uncorrelated(self):
    tf.random.set_seed(1)  # a graph-level seed must not couple the clients
    d, eps = 20_000, 1.0
    process = ldp_aggregators.LDPEncodeFactory(eps, radius=1.0).create(
        tff.TensorType(_F32, [d])
    )
    zeros = np.zeros([d], _F32)
    mean = process.next(process.initialize(), [zeros, zeros]).result
    a = float(ldp_mechanisms.two_point_q(eps))  # reports are +-a, mean 0
    # (X_A + X_B)^2 = 2 a^2 + 2 X_A X_B, so X_A X_B / a^2 = 2 m^2 / a^2 - 1:
    # the sample correlation. Independent: mean 0, SE 1/sqrt(d); identical
    # coins would give 1.
    corr = np.mean(2 * mean.astype(np.float64) ** 2 / a**2 - 1)
    self.assertLess(abs(corr), 5 / math.sqrt(d))

  def test_one_client_in_two_rounds_is_uncorrelated(self):
    d, eps = 20_000, 1.0
    process = ldp_aggregators.LDPEncodeFactory(eps, radius=1.0).create(
        tff.TensorType(_F32, [d])
    )
    state = process.initialize()
    zeros = [np.zeros([d], _F32)]
    first = process.next(state, zeros)
    second = process.next(first.state, zeros)
    a = float(ldp_mechanisms.two_point_q(eps))
    corr = np.mean(first.result.astype(np.float64) * second.result) / a**2
    self.assertLess(abs(corr), 5 / math.sqrt(d))


class BadArgumentsTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('eps_zero', dict(epsilon=0.0), ValueError, 'epsilon'),
      ('eps_negative', dict(epsilon=-1.0), ValueError, 'epsilon'),
      ('eps_inf', dict(epsilon=math.inf), ValueError, 'epsilon'),
      ('eps_nan', dict(epsilon=math.nan), ValueError, 'epsilon'),
      ('eps_str', dict(epsilon='1'), TypeError, 'epsilon'),
      ('eps_bool', dict(epsilon=True), TypeError, 'epsilon'),
      ('mode_unknown', dict(range_mode='maxmin'), ValueError, 'range_mode'),
      ('mode_not_str', dict(range_mode=1), ValueError, 'range_mode'),
      ('radius_missing', dict(radius=None), ValueError, 'radius'),
      ('radius_zero', dict(radius=0.0), ValueError, 'radius'),
      ('radius_negative', dict(radius=-1.0), ValueError, 'radius'),
      ('radius_inf', dict(radius=math.inf), ValueError, 'radius'),
      ('radius_one_bad', dict(radius=[1.0, 0.0]), ValueError, r'radius\[1\]'),
      ('radius_empty', dict(radius=[]), ValueError, 'radius'),
      ('radius_str', dict(radius='1'), TypeError, 'radius'),
      ('center_nan', dict(center=math.nan), ValueError, 'center'),
      ('center_dict', dict(center={'a': 1.0}), TypeError, 'center'),
      ('min_radius_zero', dict(min_radius=0.0), ValueError, 'min_radius'),
      ('target_high', dict(quantile_target=1.5), ValueError, 'quantile_target'),
      (
          'lr_zero',
          dict(quantile_learning_rate=0.0),
          ValueError,
          'quantile_learning_rate',
      ),
      (
          'quantile_without_clients',
          dict(range_mode='quantile'),
          ValueError,
          'expected_clients_per_round',
      ),
      (
          'clients_zero',
          dict(expected_clients_per_round=0),
          ValueError,
          'expected_clients_per_round',
      ),
      (
          'noise_zero',
          dict(expected_clients_per_round=10, quantile_noise_stddev=0.0),
          ValueError,
          'quantile_noise_stddev',
      ),
  )
  def test_bad_constructor_argument(self, override, error, name):
    kwargs = dict(epsilon=1.0, range_mode='fixed', radius=1.0)
    kwargs.update(override)
    with self.assertRaisesRegex(error, name):
      ldp_aggregators.LDPEncodeFactory(**kwargs)

  @parameterized.named_parameters(
      ('int_tensor', tff.TensorType(np.int32, [3])),
      (
          'mixed_struct',
          tff.StructType(
              [tff.TensorType(_F32, [2]), tff.TensorType(np.int64, [2])]
          ),
      ),
      ('sequence', tff.SequenceType(tff.TensorType(_F32, [2]))),
      ('federated', tff.FederatedType(tff.TensorType(_F32, [2]), tff.CLIENTS)),
  )
  def test_bad_value_type(self, value_type):
    for factory in (
        ldp_aggregators.LDPEncodeFactory(1.0, radius=1.0),
        ldp_aggregators.ReportMeanFactory(),
    ):
      with self.assertRaisesRegex(TypeError, 'value_type'):
        factory.create(value_type)


class LearningTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_trains_with_unweighted_fed_avg_on_offline_digits(self):
    # sklearn's bundled 8x8 digits: real data, no network. 20 clients x 80.
    digits = datasets.load_digits()
    x = (digits.data / 16.0).astype(_F32)
    y = digits.target.astype(np.int32)
    clients = [
        tf.data.Dataset.from_tensor_slices(
            (x[80 * i : 80 * (i + 1)], y[80 * i : 80 * (i + 1)])
        ).batch(16)
        for i in range(20)
    ]

    def model_fn():
      keras_model = tf.keras.Sequential(
          [
              tf.keras.layers.InputLayer(input_shape=(64,)),
              tf.keras.layers.Dense(10, kernel_initializer='zeros'),
          ]
      )
      return tff.learning.models.from_keras_model(
          keras_model,
          input_spec=clients[0].element_spec,
          loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
          metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
      )

    process = tff.learning.algorithms.build_unweighted_fed_avg(
        model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
        model_aggregator=ldp_aggregators.LDPEncodeFactory(2.0, radius=0.1),
    )
    state = process.initialize()
    losses = []
    for _ in range(6):
      output = process.next(state, clients)
      state = output.state
      train = output.metrics['client_work']['train']
      losses.append(train['loss'])
      self.assertEqual(list(output.metrics['aggregator']), ['center', 'radius'])
    # The aggregator's state carries the round's event through tff.learning:
    # d = 64 x 10 + 10 eps-LDP scalars, fixed range.
    self.assertEqual(
        guarantees.extract_dp_event(state.aggregator),
        dp_accounting.ComposedDpEvent(
            [
                dp_accounting.SelfComposedDpEvent(
                    events.PureEpsilonDpEvent(2.0), 650
                ),
                dp_accounting.NoOpDpEvent(),
            ]
        ),
    )
    # Starting from log(10) = 2.30; observed ~2.27 -> ~1.82 over 6 rounds.
    self.assertLess(losses[-1], 0.9 * losses[0])
    self.assertGreater(train['sparse_categorical_accuracy'], 0.5)


if __name__ == '__main__':
  tf.test.main()
