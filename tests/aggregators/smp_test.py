"""Tests for tff_priv.aggregators.smp (Fed-SMP aggregation)."""

import collections
import math

from absl.testing import parameterized
from dp_accounting import dp_event
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

# Test-only: TFF's own tree analysis finds the aggregation intrinsics of a
# computation (there is no public API for it in TFF 0.87).
from tensorflow_federated.python.core.impl.compiler import tree_analysis

from tests import neighbours as neighbours_lib
from tff_priv.accounting import calibration
from tff_priv.accounting import guarantees
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.aggregators import smp as smp_aggregators
from tff_priv.mechanisms import smp as smp_mechanisms

_D = 10
_VECTOR = tff.TensorType(np.float32, [_D])


def _relative_se_of_std(n):
  """Relative standard error of a sample standard deviation of n Gaussians."""
  return 1.0 / math.sqrt(2.0 * (n - 1))


def _factory(**kwargs):
  args = dict(
      noise_multiplier=1.0,
      clip=1.0,
      compression=0.5,
      expected_clients_per_round=4,
  )
  args.update(kwargs)
  return smp_aggregators.SparsifiedSecureSumFactory(**args)


def _round_indices(state, d, k):
  """The rand_k mask the round that starts from `state` must use."""
  return smp_mechanisms.rand_k_indices(
      smp_mechanisms.round_seed(state.mask_seed, state.round_num), d, k
  ).numpy()


def _reference_mean(values, indices, scale, clip, k_clients):
  """Fed-SMP without noise, in numpy: sum of clip(scale * x[S]) / K, dense."""
  d = values[0].size
  total = np.zeros(d)
  for x in values:
    v = scale * np.asarray(x, np.float64).reshape(-1)[indices]
    v = v * min(1.0, clip / np.linalg.norm(v))
    total[indices] += v
  return total / k_clients


class TypeTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.product(mask=smp_aggregators.MASKS, secure=(True, False))
  def test_type_signatures(self, mask, secure):
    process = _factory(mask=mask, secure=secure).create(_VECTOR)
    self.assertIsInstance(process, tff.templates.AggregationProcess)
    state_type = process.initialize.type_signature.result
    self.assertEqual(state_type.placement, tff.SERVER)
    if mask == 'rand_k':
      self.assertEqual(
          tff.structure.name_list(state_type.member),
          ['round_num', 'mask_seed', 'sum_state', 'dp_event', 'is_init_state'],
      )
      self.assertEqual(
          state_type.member.mask_seed, tff.TensorType(np.int64, [2])
      )
    else:
      self.assertEqual(
          tff.structure.name_list(state_type.member),
          [
              'mask_indices',
              'mask_is_fresh',
              'sum_state',
              'dp_event',
              'is_init_state',
          ],
      )
      self.assertEqual(
          state_type.member.mask_indices, tff.TensorType(np.int32, [5])
      )
    next_type = process.next.type_signature
    self.assertEqual(
        next_type.parameter.value, tff.FederatedType(_VECTOR, tff.CLIENTS)
    )
    self.assertEqual(
        next_type.result.result, tff.FederatedType(_VECTOR, tff.SERVER)
    )
    measurements = next_type.result.measurements.member
    self.assertEqual(
        tff.structure.name_list(measurements), ['uploaded_bits_per_client']
    )

  @parameterized.named_parameters(
      (
          'list',
          [tff.TensorType(np.float32, [2, 3]), tff.TensorType(np.float32, [4])],
      ),
      (
          'ordered_dict',
          collections.OrderedDict(
              b=tff.TensorType(np.float32, [3]),
              a=tff.TensorType(np.float32, [2, 2]),
          ),
      ),
      ('float64', tff.TensorType(np.float64, [3, 3])),
      (
          'unnamed_struct',
          tff.StructType(
              [tff.TensorType(np.float32, [3]), tff.TensorType(np.float32, [2])]
          ),
      ),
  )
  def test_result_type_is_value_type(self, structure):
    value_type = tff.types.to_type(structure)
    for p in (0.5, 1.0):
      process = _factory(compression=p).create(value_type)
      self.assertTrue(
          process.next.type_signature.result.result.member.is_equivalent_to(
              value_type
          )
      )

  def test_structure_is_one_flat_vector_with_one_mask(self):
    # 10 values in two tensors, k = 5: exactly 5 of the 10 coordinates of the
    # result are non-zero, wherever they fall across the two tensors, and they
    # are the round's global mask.
    value_type = tff.types.to_type(
        [tff.TensorType(np.float32, [2, 3]), tff.TensorType(np.float32, [4])]
    )
    process = _factory(noise_multiplier=0.0, clip=100.0, mask_seed=3).create(
        value_type
    )
    state = process.initialize()
    ones = [np.ones([2, 3], np.float32), np.ones([4], np.float32)]
    output = process.next(state, [ones] * 4)
    flat = smp_mechanisms.flatten(output.result).numpy()
    expected = np.zeros(10)
    expected[_round_indices(state, 10, 5)] = 2.0  # scale d/k = 2, 4 of K = 4
    self.assertAllClose(flat, expected)

  @parameterized.named_parameters(
      ('int', tff.TensorType(np.int32, [3])),
      (
          'mixed_dtypes',
          [tff.TensorType(np.float32, [3]), tff.TensorType(np.float64, [3])],
      ),
      (
          'federated',
          tff.FederatedType(tff.TensorType(np.float32, [3]), tff.CLIENTS),
      ),
      ('undefined_shape', tff.TensorType(np.float32, [None])),
      ('sequence', tff.SequenceType(tff.TensorType(np.float32, [3]))),
      (
          'named_struct_without_container',
          tff.StructType([('a', tff.TensorType(np.float32, [3]))]),
      ),
  )
  def test_rejects_value_type(self, value_type):
    with self.assertRaises(TypeError):
      _factory().create(value_type)


class ArgumentTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('compression_zero', dict(compression=0.0), 'compression'),
      ('compression_above_one', dict(compression=1.5), 'compression'),
      ('compression_negative', dict(compression=-0.1), 'compression'),
      ('noise_negative', dict(noise_multiplier=-0.1), 'noise_multiplier'),
      ('noise_nan', dict(noise_multiplier=float('nan')), 'noise_multiplier'),
      ('clip_zero', dict(clip=0.0), 'clip'),
      ('clip_negative', dict(clip=-1.0), 'clip'),
      ('clip_inf', dict(clip=float('inf')), 'clip'),
      (
          'k_zero',
          dict(expected_clients_per_round=0),
          'expected_clients_per_round',
      ),
      (
          'k_half',
          dict(expected_clients_per_round=0.5),
          'expected_clients_per_round',
      ),
      ('mask_unknown', dict(mask='top-k'), 'mask'),
      ('bound_below_clip', dict(clip=1.0, secure_bound=0.99), 'secure_bound'),
      (
          'bound_without_secure',
          dict(secure=False, secure_bound=5.0),
          'secure_bound',
      ),
      ('stddevs_zero', dict(secure_bound_stddevs=0.0), 'secure_bound_stddevs'),
      ('seed_with_top_k', dict(mask='top_k', mask_seed=1), 'mask_seed'),
  )
  def test_value_errors_name_the_argument(self, kwargs, name):
    with self.assertRaisesRegex(ValueError, name):
      _factory(**kwargs)

  @parameterized.named_parameters(
      ('noise_str', dict(noise_multiplier='1'), 'noise_multiplier'),
      ('clip_bool', dict(clip=True), 'clip'),
      (
          'k_none',
          dict(expected_clients_per_round=None),
          'expected_clients_per_round',
      ),
      ('mask_int', dict(mask=1), 'mask'),
      ('secure_int', dict(secure=1), 'secure'),
      ('seed_float', dict(mask_seed=1.5), 'mask_seed'),
  )
  def test_type_errors_name_the_argument(self, kwargs, name):
    with self.assertRaisesRegex(TypeError, name):
      _factory(**kwargs)

  def test_properties_for_accounting(self):
    f = _factory(noise_multiplier=1.1, clip=0.2, expected_clients_per_round=50)
    self.assertEqual(f.noise_multiplier, 1.1)
    self.assertEqual(f.clip, 0.2)
    self.assertEqual(f.expected_clients_per_round, 50.0)
    self.assertEqual(f.compression, 0.5)
    self.assertEqual(f.mask, 'rand_k')
    self.assertTrue(f.secure)
    # Default bound: C plus 6 stds of the noisiest client share (n = 1).
    self.assertAlmostEqual(f.secure_bound, 0.2 + 6 * 1.1 * 0.2)
    self.assertIsNone(_factory(secure=False).secure_bound)


class RandKMaskTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(True, False)
  def test_mask_shared_by_clients_and_fresh_every_round(self, secure):
    # Noise-free, distinct positive client values: a per-client mask would put
    # non-zeros on more than k coordinates. The support must be exactly the
    # round's global mask, with the values of the numpy reference, and change
    # from round to round.
    d, k, k_clients, clip = 40, 10, 3, 5.0
    process = _factory(
        noise_multiplier=0.0,
        clip=clip,
        compression=k / d,
        expected_clients_per_round=k_clients,
        secure=secure,
        mask_seed=7,
    ).create(tff.TensorType(np.float32, [d]))
    rng = np.random.default_rng(0)
    values = [
        rng.uniform(0.1, 1.0, d).astype(np.float32) for _ in range(k_clients)
    ]
    state = process.initialize()
    supports = []
    for _ in range(3):
      indices = _round_indices(state, d, k)
      output = process.next(state, values)
      support = np.flatnonzero(output.result)
      self.assertAllEqual(support, indices)
      self.assertAllClose(
          output.result,
          _reference_mean(values, indices, d / k, clip, k_clients),
          rtol=1e-5,
          atol=1e-6,
      )
      supports.append(support)
      state = output.state
    self.assertEqual(state.round_num, 3)
    self.assertFalse(np.array_equal(supports[0], supports[1]))
    self.assertFalse(np.array_equal(supports[1], supports[2]))

  def test_mask_does_not_depend_on_client_data(self):
    process = _factory(noise_multiplier=0.0, compression=0.3).create(_VECTOR)
    state = process.initialize()
    a = process.next(state, [np.arange(1.0, 11.0, dtype=np.float32)] * 2)
    b = process.next(state, [np.full(_D, -5.0, np.float32)] * 3)
    self.assertAllEqual(np.flatnonzero(a.result), np.flatnonzero(b.result))
    self.assertAllEqual(np.flatnonzero(a.result), _round_indices(state, _D, 3))

  def test_seed_none_gives_fresh_sequences_int_seed_reproducible(self):
    fresh = _factory().create(_VECTOR)
    self.assertNotAllEqual(
        fresh.initialize().mask_seed, fresh.initialize().mask_seed
    )
    fixed = _factory(mask_seed=5).create(_VECTOR)
    self.assertAllEqual(
        fixed.initialize().mask_seed, fixed.initialize().mask_seed
    )

  @parameterized.parameters('rand_k', 'top_k')
  def test_clip_happens_after_sparsification(self, mask):
    # One client, K = 1, no noise. rand_k: x = ones, k = d/2, scaled by 2 and
    # clipped: the result has norm exactly C (clipping first would leave a norm
    # of sqrt(2) C). top_k: a huge coordinate outside the mask must not shrink
    # the kept values (clipping first would divide them by ~100).
    if mask == 'rand_k':
      x = np.ones(_D, np.float32)
    else:
      x = np.full(_D, 0.1, np.float32)
      x[9] = 100.0
    process = _factory(
        noise_multiplier=0.0, clip=1.0, expected_clients_per_round=1, mask=mask
    ).create(_VECTOR)
    state = process.initialize()
    if mask == 'top_k':
      state = smp_aggregators._with_top_k_mask(state, [0, 2, 4, 6, 8])
    result = process.next(state, [x]).result
    if mask == 'rand_k':
      self.assertAllClose(np.linalg.norm(result), 1.0, rtol=1e-6)
      self.assertAllClose(
          result[result != 0], np.full(5, 1 / math.sqrt(5)), rtol=1e-6
      )
    else:
      expected = np.zeros(_D)
      expected[[0, 2, 4, 6, 8]] = 0.1
      self.assertAllClose(result, expected, rtol=1e-6)


class TopKMaskTest(tf.test.TestCase):

  def test_mask_comes_from_state_not_from_client_data(self):
    # The public-data helper picks the mask; two different private datasets
    # give results supported exactly on it, and leave the same state.
    theta = [np.zeros([2, 3], np.float32), np.zeros([4], np.float32)]
    theta_pub = [
        np.array([[0.0, 3.0, 0.0], [-2.0, 0.0, 0.0]], np.float32),
        np.array([0.0, 0.0, 1.0, 0.0], np.float32),
    ]
    mask = smp_mechanisms.top_k_mask_from_public_update(
        theta_pub, theta, 3
    ).numpy()
    self.assertAllEqual(mask, [1, 3, 8])
    value_type = tff.types.to_type(
        [tff.TensorType(np.float32, [2, 3]), tff.TensorType(np.float32, [4])]
    )
    process = _factory(
        noise_multiplier=0.0, clip=100.0, compression=0.3, mask='top_k'
    ).create(value_type)
    state = smp_aggregators._with_top_k_mask(process.initialize(), mask)
    rng = np.random.default_rng(1)
    outputs = []
    for n_clients in (2, 5):
      data = [
          [
              rng.normal(size=[2, 3]).astype(np.float32),
              rng.normal(size=[4]).astype(np.float32),
          ]
          for _ in range(n_clients)
      ]
      output = process.next(state, data)
      self.assertAllEqual(
          np.flatnonzero(smp_mechanisms.flatten(output.result)), mask
      )
      outputs.append(output)
    self.assertAllEqual(outputs[0].state.mask_indices, mask)
    self.assertAllEqual(outputs[1].state.mask_indices, mask)
    self.assertFalse(outputs[0].state.mask_is_fresh)

  def test_next_fails_without_a_fresh_mask(self):
    process = _factory(mask='top_k').create(_VECTOR)
    values = [np.ones(_D, np.float32)]
    with self.assertRaisesRegex(Exception, 'not refreshed'):
      process.next(process.initialize(), values)
    used = process.next(
        smp_aggregators._with_top_k_mask(process.initialize(), [0, 1, 2, 3, 4]),
        values,
    )
    with self.assertRaisesRegex(Exception, 'not refreshed'):
      process.next(used.state, values)

  def test_next_fails_on_index_beyond_dimension(self):
    process = _factory(mask='top_k').create(_VECTOR)
    state = smp_aggregators._with_top_k_mask(
        process.initialize(), [0, 1, 2, 3, _D]
    )
    with self.assertRaisesRegex(Exception, r'\[0, d\)'):
      process.next(state, [np.ones(_D, np.float32)])

  def test_with_top_k_mask_rejects_bad_indices(self):
    state = _factory(mask='top_k').create(_VECTOR).initialize()
    for bad in (
        [0, 1, 2, 3],
        [0, 1, 2, 3, 3],
        [-1, 1, 2, 3, 4],
        [0.5, 1, 2, 3, 4],
    ):
      with self.assertRaises(ValueError, msg=str(bad)):
        smp_aggregators._with_top_k_mask(state, bad)
    rand_k_state = _factory().create(_VECTOR).initialize()
    with self.assertRaises(TypeError):
      smp_aggregators._with_top_k_mask(rand_k_state, [0, 1, 2, 3, 4])


class NoiseTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.product(mask=smp_aggregators.MASKS, secure=(True, False))
  def test_zero_updates_std_of_mean_and_exact_zeros_elsewhere(
      self, mask, secure
  ):
    # K clients send zeros. On kept coordinates the mean is the sum of K
    # independent N(0, sigma^2 C^2 / K) (n = K) divided by K: std sigma C / K
    # (correlated client noise would give sigma C / sqrt(K)). Elsewhere it is
    # exactly 0. Tolerance: 5 relative standard errors of the sample std over
    # the rounds x k kept values.
    d, p, k_clients, sigma, clip, rounds = 1000, 0.4, 8, 1.5, 0.5, 3
    k = smp_mechanisms.num_kept(d, p)
    process = _factory(
        noise_multiplier=sigma,
        clip=clip,
        compression=p,
        expected_clients_per_round=k_clients,
        mask=mask,
        secure=secure,
    ).create(tff.TensorType(np.float32, [d]))
    state = process.initialize()
    zeros = [np.zeros(d, np.float32)] * k_clients
    kept_values = []
    rng = np.random.default_rng(2)
    for _ in range(rounds):
      if mask == 'top_k':
        state = smp_aggregators._with_top_k_mask(
            state, rng.choice(d, k, replace=False)
        )
        indices = state.mask_indices
      else:
        indices = _round_indices(state, d, k)
      output = process.next(state, zeros)
      outside = np.setdiff1d(np.arange(d), indices)
      self.assertTrue(np.all(output.result[outside] == 0.0))
      self.assertTrue(np.all(output.result[indices] != 0.0))
      kept_values.append(output.result[indices])
      state = output.state
      self.assertEqual(
          guarantees.extract_dp_event(state), dp_event.GaussianDpEvent(sigma)
      )
    kept_values = np.concatenate(kept_values)
    n = kept_values.size
    self.assertAllClose(
        np.std(kept_values, ddof=1),
        sigma * clip / k_clients,
        rtol=5 * _relative_se_of_std(n),
    )
    self.assertAllClose(
        np.mean(kept_values),
        0.0,
        atol=5 * sigma * clip / k_clients / math.sqrt(n),
    )

  @parameterized.parameters(True, False)
  def test_noise_of_the_sum_does_not_depend_on_the_client_count(self, secure):
    # n = K/2 and n = 2K clients send zeros: each adds N(0, sigma^2 C^2 / n),
    # so the sum has std sigma C in both rounds (the paper's sigma^2 C^2 / K
    # would give sigma C / sqrt(2) and sigma C sqrt(2), revealing n), and
    # both rounds carry the same event. Tolerance: 5 relative standard errors
    # of the sample std over the kept values.
    d, k_clients, sigma, clip = 4000, 16, 2.0, 0.25
    process = _factory(
        noise_multiplier=sigma,
        clip=clip,
        compression=0.5,
        expected_clients_per_round=k_clients,
        secure=secure,
    ).create(tff.TensorType(np.float32, [d]))
    stds = []
    for reporting in (k_clients // 2, 2 * k_clients):
      state = process.initialize()
      indices = _round_indices(state, d, d // 2)
      output = process.next(state, [np.zeros(d, np.float32)] * reporting)
      summed_noise = output.result[indices] * k_clients
      stds.append(np.std(summed_noise, ddof=1) / clip)
      self.assertAllClose(
          stds[-1], sigma, rtol=5 * _relative_se_of_std(summed_noise.size)
      )
      self.assertEqual(
          guarantees.extract_dp_event(output.state),
          dp_event.GaussianDpEvent(sigma),
      )
    self.assertAllClose(
        stds[0], stds[1], rtol=5 * math.sqrt(2) * _relative_se_of_std(d // 2)
    )


class DpEventTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.product(mask=smp_aggregators.MASKS, secure=(True, False))
  def test_state_event_composes_as_the_event_written_by_hand(
      self, mask, secure
  ):
    sigma = 1.3
    process = _factory(noise_multiplier=sigma, mask=mask, secure=secure).create(
        _VECTOR
    )
    state = process.initialize()
    with self.assertRaises(guarantees.ExtractingDpEventFromInitialStateError):
      guarantees.extract_dp_event(state)
    if mask == 'top_k':
      state = smp_aggregators._with_top_k_mask(state, np.arange(5))
    output = process.next(state, [np.ones(10, np.float32)] * 3)
    event = guarantees.extract_dp_event(output.state)
    by_hand = dp_event.GaussianDpEvent(sigma)
    self.assertEqual(event, by_hand)
    for q in (1.0, 0.1):
      ours, theirs = ledger_lib.PrivacyLedger(), ledger_lib.PrivacyLedger()
      for _ in range(5):
        ours.record_round(output.state, sampling_probability=q)
        theirs.record(
            by_hand if q == 1 else dp_event.PoissonSampledDpEvent(q, by_hand)
        )
      self.assertAllClose(ours.epsilon(1e-5), theirs.epsilon(1e-5), rtol=1e-6)

  @parameterized.parameters(True, False)
  def test_guarantee(self, secure):
    guarantee = _factory(secure=secure).guarantee
    self.assertEqual(guarantee.unit, 'client')
    self.assertEqual(guarantee.neighboring_relation, 'add_or_remove_one')
    self.assertEqual(guarantee.noise, 'secure_sum' if secure else 'central')
    server = guarantee.server_view_event(dp_event.GaussianDpEvent(2.0))
    self.assertEqual(
        server,
        dp_event.GaussianDpEvent(1.0)
        if secure
        else dp_event.NonPrivateDpEvent(),
    )

  @parameterized.product(mask=smp_aggregators.MASKS, secure=(True, False))
  def test_no_exact_client_statistic_in_the_measurements(self, mask, secure):
    # Neighbouring client sets: one client's value replaced by one far outside
    # the clip (and by a set with one client more). A measurement leaf that is
    # the same on two runs of one input and differs between the neighbours is
    # an un-noised client statistic.
    d = 10
    base = [np.full(d, 0.1, np.float32)] * 3
    neighbours = {
        'base': base,
        'far': base[:2] + [np.full(d, 1e3, np.float32)],
        'more': base + [np.full(d, 1e3, np.float32)],
    }
    process = _factory(mask=mask, secure=secure).create(
        tff.TensorType(np.float32, [d])
    )

    def measurements(values):
      state = process.initialize()
      if mask == 'top_k':
        state = smp_aggregators._with_top_k_mask(state, np.arange(5))
      return process.next(state, values).measurements

    for name in ('far', 'more'):
      self.assertEqual(
          neighbours_lib.exact_statistic_leaves(
              measurements, neighbours['base'], neighbours[name]
          ),
          [],
          name,
      )
    # The check finds what TFF's secure sum measures: how many values its
    # bound clipped, an exact client statistic (hence not released here).
    secure = tff.aggregators.SecureSumFactory(1.0, -1.0).create(
        tff.TensorType(np.float32, [d])
    )
    self.assertNotEmpty(
        neighbours_lib.exact_statistic_leaves(
            lambda v: secure.next(secure.initialize(), v).measurements,
            neighbours['base'],
            neighbours['far'],
        )
    )


class OverTargetTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_the_charge_does_not_depend_on_how_many_clients_a_round_drew(self):
    # The audit found the old charge (sigma sqrt(n/K)) over the target in
    # 99.4% of sampler seeds (N = 100, K = 10, 20 rounds, target 8). Now the
    # state's event is the factory's Gaussian(z) whatever the count n, so
    # every seed's ledger is the calibrated one: 20 rounds at z, sampled.
    population, k, rounds, target, delta = 100, 10, 20, 8.0, 1e-5
    q = k / population
    z = calibration.calibrate_noise_multiplier(
        target, delta, rounds, sampling_probability=q
    )
    process = _factory(noise_multiplier=z, expected_clients_per_round=k).create(
        _VECTOR
    )
    events = {
        n: guarantees.extract_dp_event(
            process.next(
                process.initialize(), [np.ones(_D, np.float32)] * n
            ).state
        )
        for n in range(0, 21)
    }
    self.assertEqual(set(events.values()), {dp_event.GaussianDpEvent(z)})
    ledger = ledger_lib.PrivacyLedger()
    for _ in range(rounds):
      ledger.record(
          guarantees.sampled_event(
              events[0], 'add_or_remove_one', sampling_lib.Sampling.poisson(q)
          )
      )
    self.assertLessEqual(ledger.epsilon(delta), target)


class DpFedAvgEquivalenceTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(True, False)
  def test_noise_free_mean_equals_gaussian_fixed(self, secure):
    # compression = 1: mean over K of the clipped updates, as DP-FedAvg.
    # Some clients are clipped, some not. With secure=True the 32-bit
    # quantization of [-B, B] (B = C here) errs by at most B / 2^32 per value.
    d, k_clients, clip = 30, 5, 1.0
    rng = np.random.default_rng(3)
    values = [
        (rng.normal(size=d) * s).astype(np.float32)
        for s in (0.01, 0.1, 0.5, 1.0, 3.0)
    ]
    value_type = tff.TensorType(np.float32, [d])
    ours = _factory(
        noise_multiplier=0.0,
        clip=clip,
        compression=1.0,
        expected_clients_per_round=k_clients,
        secure=secure,
    ).create(value_type)
    theirs = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        0.0, float(k_clients), clip
    ).create(value_type)
    a = ours.next(ours.initialize(), values).result
    b = theirs.next(theirs.initialize(), values).result
    self.assertAllClose(a, b, rtol=1e-5, atol=1e-6)

  def test_noise_matches_gaussian_fixed(self):
    # K clients send zeros; both aggregates are N(0, (sigma C / K)^2) per
    # coordinate. Tolerance: 5 standard errors of the ratio of two
    # independent sample stds (relative SE sqrt(2) / sqrt(2 (n - 1))).
    d, k_clients, sigma, clip = 6000, 10, 1.2, 0.8
    value_type = tff.TensorType(np.float32, [d])
    ours = _factory(
        noise_multiplier=sigma,
        clip=clip,
        compression=1.0,
        expected_clients_per_round=k_clients,
        secure=False,
    ).create(value_type)
    theirs = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        sigma, float(k_clients), clip
    ).create(value_type)
    zeros = [np.zeros(d, np.float32)] * k_clients
    a = ours.next(ours.initialize(), zeros).result
    b = theirs.next(theirs.initialize(), zeros).result
    se = _relative_se_of_std(d)
    ratio = np.std(a, ddof=1) / np.std(b, ddof=1)
    self.assertAllClose(ratio, 1.0, atol=5 * math.sqrt(2) * se)
    self.assertAllClose(
        np.std(a, ddof=1), sigma * clip / k_clients, rtol=5 * se
    )


class SecureMovementTest(tf.test.TestCase, parameterized.TestCase):
  """With `secure=True` the values move only through secure sums.

  Runs in tff_priv.runtime's 'simulation' context (tests/conftest.py), where
  TFF's secure-sum intrinsics run as their plain bodies.
  """

  @parameterized.parameters(0.5, 1.0)
  def test_secure_moves_values_only_with_secure_sum(self, p):
    k = smp_mechanisms.num_kept(_D, p)
    process = _factory(compression=p, secure=True).create(_VECTOR)
    tree = process.next.to_building_block()
    self.assertEqual(tree_analysis.find_unsecure_aggregation_in_tree(tree), [])
    secure_calls = tree_analysis.find_secure_aggregation_in_tree(tree)
    uris = {call.function.uri for call in secure_calls}
    self.assertEqual(uris, {'federated_secure_sum_bitwidth'})
    # The k values travel quantized to int64 [k] through the secure sum.
    quantized = tff.FederatedType(tff.TensorType(np.int64, [k]), tff.CLIENTS)
    self.assertTrue(
        any(
            quantized.is_equivalent_to(call.argument.type_signature[0])
            for call in secure_calls
        )
    )

  def test_plain_mode_uses_federated_sum_for_values(self):
    # The converse, so that the inspection above can fail.
    process = _factory(secure=False).create(_VECTOR)
    tree = process.next.to_building_block()
    self.assertEqual(tree_analysis.find_secure_aggregation_in_tree(tree), [])
    summed = [
        call.argument.type_signature
        for call in tree_analysis.find_unsecure_aggregation_in_tree(tree)
    ]
    self.assertIn(
        tff.FederatedType(tff.TensorType(np.float32, [5]), tff.CLIENTS), summed
    )


class MeasurementTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(
      (0.1, True, 32 * 10), (1.0, True, 32 * 100), (0.1, False, 32 * 10)
  )
  def test_uploaded_bits(self, p, secure, bits):
    process = _factory(compression=p, secure=secure).create(
        tff.TensorType(np.float32, [100])
    )
    output = process.next(process.initialize(), [np.zeros(100, np.float32)])
    self.assertEqual(output.measurements['uploaded_bits_per_client'], bits)

  def test_uploaded_bits_plain_float64(self):
    process = _factory(compression=0.1, secure=False).create(
        tff.TensorType(np.float64, [100])
    )
    output = process.next(process.initialize(), [np.zeros(100, np.float64)])
    self.assertEqual(output.measurements['uploaded_bits_per_client'], 64 * 10)


def _model_fn():
  keras_model = tf.keras.Sequential(
      [tf.keras.layers.Dense(2, input_shape=(3,))]
  )
  return tff.learning.models.from_keras_model(
      keras_model,
      input_spec=(
          tf.TensorSpec([None, 3], tf.float32),
          tf.TensorSpec([None, 1], tf.int32),
      ),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
  )


def _client_data(seed):
  rng = np.random.default_rng(seed)
  return tf.data.Dataset.from_tensor_slices(
      (
          rng.normal(size=[4, 3]).astype(np.float32),
          rng.integers(0, 2, size=[4, 1]).astype(np.int32),
      )
  ).batch(2)


class LearningIntegrationTest(tf.test.TestCase):

  def test_rand_k_as_model_aggregator_of_fed_avg(self):
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        _model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        model_aggregator=_factory(
            noise_multiplier=0.5, clip=1.0, expected_clients_per_round=2
        ),
    )
    output = process.next(
        process.initialize(), [_client_data(0), _client_data(1)]
    )
    measurements = output.metrics['aggregator']
    self.assertEqual(
        guarantees.extract_dp_event(output.state.aggregator),
        dp_event.GaussianDpEvent(0.5),
    )
    self.assertEqual(
        measurements['uploaded_bits_per_client'], 32 * 4
    )  # k = 4 of 8

  def test_top_k_round_driven_from_python(self):
    # The server picks the mask from public quantities only (here a public
    # model theta_pub next to theta^t) and puts it in the aggregator state of
    # the learning process; two different private datasets then move the
    # model exactly on the masked coordinates (server SGD, learning rate 1).
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        _model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.5),
        model_aggregator=_factory(
            noise_multiplier=0.5,
            clip=1.0,
            compression=0.25,
            expected_clients_per_round=2,
            mask='top_k',
        ),
    )
    state = process.initialize()
    theta = state.global_model_weights.trainable
    theta_pub = [
        w + np.reshape(np.arange(w.size) % 3, w.shape).astype(np.float32)
        for w in theta
    ]
    k = len(state.aggregator.mask_indices)
    mask = smp_mechanisms.top_k_mask_from_public_update(
        theta_pub, theta, k
    ).numpy()
    state = state._replace(
        aggregator=smp_aggregators._with_top_k_mask(state.aggregator, mask)
    )
    for seeds in ((0, 1), (2, 3)):
      output = process.next(state, [_client_data(s) for s in seeds])
      moved = smp_mechanisms.flatten(
          output.state.global_model_weights.trainable
      ) - (smp_mechanisms.flatten(theta))
      self.assertAllEqual(np.flatnonzero(moved), mask)
      self.assertAllEqual(output.state.aggregator.mask_indices, mask)


if __name__ == '__main__':
  tf.test.main()
