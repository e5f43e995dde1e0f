"""Tests for tff_priv.aggregators.distortion."""

import collections

from absl.testing import parameterized
import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import neighbours as neighbours_lib
from tff_priv.accounting import accountants
from tff_priv.accounting import guarantees
from tff_priv.aggregators import distortion
from tff_priv.aggregators import udp
from tff_priv.mechanisms import total_variation

_D = 20_000


def _epsilon(event):
  return (
      accountants.make_accountant('rdp', 'replace_one')
      .compose(event)
      .get_epsilon(1e-5)
  )


class DistortionFactoryTest(tf.test.TestCase, parameterized.TestCase):

  def test_given_variance(self):
    factory = distortion.DistortionFactory(
        target_tv=0.3, parameter_variance=0.25
    )
    self.assertIsInstance(factory, tff.aggregators.UnweightedAggregationFactory)
    self.assertNotIsInstance(
        factory, tff.aggregators.WeightedAggregationFactory
    )
    process = factory.create(tff.TensorType(np.float32, [_D]))
    out = process.next(process.initialize(), [np.zeros(_D, np.float32)] * 4)
    noise = out.measurements['noise']
    expected = total_variation.noise_for_tv(0.3, 0.25, _D)
    self.assertAllClose(noise['noise_stddev'], expected)
    self.assertAllClose(noise['tv_upper'], 0.3)
    self.assertAllClose(noise['tv_lower'], 0.3 / 150)
    self.assertAllClose(noise['parameter_variance'], 0.25)
    self.assertCountEqual(
        noise, ['noise_stddev', 'tv_lower', 'tv_upper', 'parameter_variance']
    )
    # The mean of 4 clients' distortion has std sigma_e / 2 (5 SE of a std).
    self.assertAllClose(
        np.std(out.result),
        expected / 2,
        atol=5 * expected / 2 / np.sqrt(2 * _D),
    )

  def test_noise_free_is_the_exact_mean(self):
    # sigma_e = 0 needs no variance (TV is 0 exactly); none is reported.
    rng = np.random.default_rng(1)
    values = [rng.normal(size=100).astype(np.float32) for _ in range(5)]
    process = distortion.DistortionFactory(noise_stddev=0.0).create(
        tff.TensorType(np.float32, [100])
    )
    out = process.next(process.initialize(), values)
    noise = out.measurements['noise']
    self.assertAllClose(out.result, np.mean(values, axis=0), atol=1e-6)
    self.assertEqual(noise['noise_stddev'], 0.0)
    self.assertEqual(noise['tv_upper'], 0.0)
    self.assertNotIn('parameter_variance', noise)

  def test_clip_before_distortion(self):
    value_type = tff.to_type(
        collections.OrderedDict(
            a=tff.TensorType(np.float32, [10, 10]),
            b=tff.TensorType(np.float32, [3]),
        )
    )
    factory = distortion.DistortionFactory(
        noise_stddev=0.0, parameter_variance=1.0, clip=1.0
    )
    process = factory.create(value_type)
    big = collections.OrderedDict(
        a=np.ones((10, 10), np.float32), b=np.zeros(3, np.float32)
    )
    small = collections.OrderedDict(
        a=np.zeros((10, 10), np.float32),
        b=np.array([0.6, 0.0, 0.0], np.float32),
    )
    out = process.next(process.initialize(), [big, small])
    # big (norm 10) is clipped to norm 1 over the whole structure; small
    # (norm 0.6) is kept.
    self.assertAllClose(out.result['a'], np.full((10, 10), 0.1 / 2))
    self.assertAllClose(out.result['b'], [0.3, 0.0, 0.0])
    self.assertNotIn('clipped_count', out.measurements)

  def test_non_finite_upload_is_sent_as_zeros_with_a_clip(self):
    process = distortion.DistortionFactory(noise_stddev=0.0, clip=1.0).create(
        tff.TensorType(np.float32, [3])
    )
    values = [
        np.array([np.nan, 0.0, 0.0], np.float32),
        np.array([np.inf, 0.0, 0.0], np.float32),
        np.array([0.5, 0.0, 0.0], np.float32),
    ]
    out = process.next(process.initialize(), values)
    self.assertAllClose(out.result, [0.5 / 3, 0.0, 0.0])

  @parameterized.named_parameters(
      ('fixed', dict(noise_stddev=0.4, parameter_variance=0.5)),
      ('target_tv', dict(target_tv=0.3, parameter_variance=0.25)),
  )
  def test_dp_event_with_clip(self, kwargs):
    clip = 0.5
    factory = distortion.DistortionFactory(clip=clip, **kwargs)
    guarantee = factory.guarantee
    self.assertEqual(guarantee.unit, 'client')
    self.assertEqual(guarantee.noise, 'local')
    self.assertEqual(guarantee.neighboring_relation, 'replace_one')
    self.assertEqual(guarantees.guarantee_of(factory), guarantee)
    d = 50
    process = factory.create(tff.TensorType(np.float32, [d]))
    state = process.initialize()
    with self.assertRaises(guarantees.ExtractingDpEventFromInitialStateError):
      guarantees.extract_dp_event(state)
    out = process.next(state, [np.ones(d, np.float32)] * 3)
    sigma_e = factory.noise_source(d).noise_stddev
    self.assertAllClose(out.measurements['noise']['noise_stddev'], sigma_e)
    event = guarantees.extract_dp_event(out.state)
    expected = dp_accounting.GaussianDpEvent(sigma_e / (2 * clip))
    self.assertEqual(event, expected)
    self.assertAllClose(_epsilon(event), _epsilon(expected), rtol=1e-6)
    self.assertTrue(np.isfinite(_epsilon(event)))

  def test_dp_event_without_clip_is_non_private(self):
    factory = distortion.DistortionFactory(
        target_tv=0.3, parameter_variance=0.25
    )
    self.assertIn('not a DP guarantee', factory.guarantee.description)
    process = factory.create(tff.TensorType(np.float32, [50]))
    state = process.initialize()
    with self.assertRaises(guarantees.ExtractingDpEventFromInitialStateError):
      guarantees.extract_dp_event(state)
    out = process.next(state, [np.ones(50, np.float32)] * 2)
    event = guarantees.extract_dp_event(out.state)
    self.assertEqual(event, dp_accounting.NonPrivateDpEvent())
    self.assertEqual(_epsilon(event), np.inf)

  @parameterized.named_parameters(
      ('clip', dict(noise_stddev=0.4, parameter_variance=0.5, clip=1.0)),
      ('noise_free_clip', dict(noise_stddev=0.0, clip=1.0)),
      ('target_tv', dict(target_tv=0.3, parameter_variance=0.25)),
  )
  def test_no_exact_statistic_in_measurements(self, kwargs):
    # Two neighbouring client sets: the last client's value is replaced by
    # one far outside the clip.
    d = 100
    rng = np.random.default_rng(4)
    values = [0.01 * rng.normal(size=d).astype(np.float32) for _ in range(3)]
    far = np.full(d, 1e3, np.float32)
    neighbour_pair = (values, values[:2] + [far])
    process = distortion.DistortionFactory(**kwargs).create(
        tff.TensorType(np.float32, [d])
    )
    run = lambda v: process.next(process.initialize(), v).measurements
    self.assertEqual(
        neighbours_lib.exact_statistic_leaves(run, *neighbour_pair), []
    )
    # The check finds one: TFF's clipping factory reports how many clipped.
    clipping = tff.aggregators.clipping_factory(
        1.0, tff.aggregators.UnweightedMeanFactory()
    ).create(tff.TensorType(np.float32, [d]))
    run = lambda v: clipping.next(clipping.initialize(), v).measurements
    self.assertEqual(
        neighbours_lib.exact_statistic_leaves(run, *neighbour_pair),
        ['clipped_count'],
    )

  def test_shares_the_client_noise_state(self):
    process = distortion.DistortionFactory(
        noise_stddev=0.1, parameter_variance=1.0, clip=1.0
    ).create(tff.TensorType(np.float32, [5]))
    state = process.initialize()
    self.assertIsInstance(state, udp.ClientNoiseState)
    self.assertTrue(state.is_init_state)
    out = process.next(state, [np.ones(5, np.float32)])
    self.assertFalse(out.state.is_init_state)

  def test_bad_arguments(self):
    for kwargs, name in (
        (dict(target_tv=0.0), 'target_tv'),
        (dict(target_tv=1.0), 'target_tv'),
        (dict(noise_stddev=-1.0, parameter_variance=1.0), 'noise_stddev'),
        (dict(target_tv=0.5, parameter_variance=0.0), 'parameter_variance'),
        (
            dict(target_tv=0.5, parameter_variance=1.0, tv_bound='middle'),
            'tv_bound',
        ),
        (
            dict(target_tv=0.5, parameter_variance=1.0, tv_bound='lower'),
            'target_tv',
        ),
        (dict(target_tv=0.5, parameter_variance=1.0, clip=0.0), 'clip'),
        (dict(), 'exactly one'),
        (dict(noise_stddev=0.1), 'parameter_variance'),
        (dict(target_tv=0.5), 'parameter_variance'),
    ):
      with self.assertRaisesRegex(ValueError, name):
        distortion.DistortionFactory(**kwargs)
    with self.assertRaisesRegex(TypeError, 'value_type'):
      distortion.DistortionFactory(noise_stddev=0.0).create(
          tff.TensorType(np.int32, [3])
      )


if __name__ == '__main__':
  tf.test.main()
