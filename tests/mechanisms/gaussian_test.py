"""Tests for tff_priv.mechanisms.gaussian: moments and independence."""

import numpy as np
import tensorflow as tf

from tff_priv.mechanisms import gaussian

_D = 200_000


class GaussianNoiseTest(tf.test.TestCase):

  def test_moments(self):
    value = {'a': tf.zeros([_D // 2]), 'b': tf.fill([_D // 4, 2], 3.0)}
    noisy = gaussian.add_gaussian_noise(value, 0.7)
    self.assertEqual(noisy['b'].shape, (_D // 4, 2))
    noise = np.concatenate(
        [noisy['a'].numpy(), (noisy['b'].numpy() - 3.0).ravel()]
    )
    # Mean: standard error 0.7 / sqrt(D) = 0.0016; 5 SE.
    self.assertLess(abs(noise.mean()), 5 * 0.7 / np.sqrt(_D))
    # Std: standard error ~ 0.7 / sqrt(2 D) = 0.0011; 5 SE.
    self.assertLess(abs(noise.std() - 0.7), 5 * 0.7 / np.sqrt(2 * _D))

  def test_independent_calls(self):
    # Two calls on the same input: correlation of the noise ~ N(0, 1/D);
    # |rho| < 5 / sqrt(D) = 0.011.
    zeros = tf.zeros([_D])
    a = gaussian.add_gaussian_noise(zeros, 1.0).numpy()
    b = gaussian.add_gaussian_noise(zeros, 1.0).numpy()
    self.assertLess(abs(np.corrcoef(a, b)[0, 1]), 5 / np.sqrt(_D))

  def test_zero_stddev_is_identity(self):
    x = tf.random.normal([100])
    self.assertAllEqual(gaussian.add_gaussian_noise(x, 0.0), x)

  def test_float64(self):
    out = gaussian.add_gaussian_noise(tf.zeros([10], tf.float64), 1.0)
    self.assertEqual(out.dtype, tf.float64)


if __name__ == '__main__':
  tf.test.main()
