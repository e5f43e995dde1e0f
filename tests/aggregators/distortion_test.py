"""Tests for tff_priv.aggregators.distortion."""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.aggregators import distortion
from tff_priv.mechanisms import total_variation

_D = 20_000


class DistortionFactoryTest(tf.test.TestCase):

  def test_given_variance(self):
    factory = distortion.DistortionFactory(target_tv=0.3, parameter_variance=0.25)
    self.assertIsInstance(factory, tff.aggregators.UnweightedAggregationFactory)
    process = factory.create(tff.TensorType(np.float32, [_D]))
    out = process.next(process.initialize(), [np.zeros(_D, np.float32)] * 4)
    noise = out.measurements['noise']
    expected = total_variation.noise_for_tv(0.3, 0.25, _D)
    self.assertAllClose(noise['noise_stddev'], expected)
    self.assertAllClose(noise['tv_upper'], 0.3)
    self.assertAllClose(noise['tv_lower'], 0.3 / 150)
    self.assertFalse(noise['variance_estimated'])
    # The mean of 4 clients' distortion has std sigma_e / 2 (5 SE of a std).
    self.assertAllClose(
        np.std(out.result), expected / 2, atol=5 * expected / 2 / np.sqrt(2 * _D)
    )

  def test_estimated_variance(self):
    rng = np.random.default_rng(0)
    values = [rng.normal(size=_D).astype(np.float32) * 0.5 for _ in range(30)]
    factory = distortion.DistortionFactory(target_tv=0.2)
    process = factory.create(tff.TensorType(np.float32, [_D]))
    out = process.next(process.initialize(), values)
    noise = out.measurements['noise']
    self.assertTrue(noise['variance_estimated'])
    # Across-client variance: population 0.25, unbiasedness aside the biased
    # estimator gives 0.25 (29/30) on average; 2% tolerance at D = 20000.
    self.assertAllClose(noise['parameter_variance'], 0.25 * 29 / 30, rtol=0.02)
    self.assertAllClose(
        noise['noise_stddev'],
        total_variation.noise_for_tv(0.2, float(noise['parameter_variance']), _D),
        rtol=1e-5,
    )

  def test_noise_free_measures_variance(self):
    # sigma_e = 0 needs no variance (TV is 0 exactly); the variance is then
    # estimated as a measurement, and the result is the exact mean.
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
    self.assertTrue(noise['variance_estimated'])
    self.assertAllClose(
        noise['parameter_variance'], np.mean(np.var(values, axis=0)), rtol=1e-4
    )

  def test_clip_before_distortion(self):
    value_type = tff.to_type(
        collections.OrderedDict(a=tff.TensorType(np.float32, [10, 10]))
    )
    factory = distortion.DistortionFactory(
        noise_stddev=0.0, parameter_variance=1.0, clip=1.0
    )
    process = factory.create(value_type)
    out = process.next(
        process.initialize(), [collections.OrderedDict(a=np.ones((10, 10), np.float32))] * 3
    )
    self.assertAllClose(np.linalg.norm(out.result['a']), 1.0)  # Clipped 10 -> 1.
    self.assertEqual(out.measurements['clipped_count'], 3)

  def test_bad_arguments(self):
    for kwargs, name in (
        (dict(target_tv=0.0), 'target_tv'),
        (dict(target_tv=1.0), 'target_tv'),
        (dict(noise_stddev=-1.0, parameter_variance=1.0), 'noise_stddev'),
        (dict(target_tv=0.5, parameter_variance=0.0), 'parameter_variance'),
        (dict(target_tv=0.5, tv_bound='middle'), 'tv_bound'),
        (dict(target_tv=0.5, tv_bound='lower'), 'target_tv'),
        (dict(target_tv=0.5, clip=0.0), 'clip'),
        (dict(), 'exactly one'),
        (dict(noise_stddev=0.1), 'parameter_variance'),
    ):
      with self.assertRaisesRegex(ValueError, name):
        distortion.DistortionFactory(**kwargs)
    with self.assertRaisesRegex(TypeError, 'value_type'):
      distortion.DistortionFactory(target_tv=0.5).create(
          tff.TensorType(np.int32, [3])
      )


if __name__ == '__main__':
  tf.test.main()
