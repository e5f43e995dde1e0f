"""Tests for tasks.offline_images: the packaged MNIST 5k and 8x8 digits."""

import numpy as np
import tensorflow as tf

from tff_priv_tasks import offline_images


class Mnist5kTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.images, cls.labels = offline_images.load_mnist5k()

  def test_5000_examples_500_per_class(self):
    self.assertEqual(self.images.shape, (5000, 28, 28))
    self.assertEqual(self.images.dtype, np.float32)
    self.assertEqual(self.labels.shape, (5000,))
    self.assertEqual(self.labels.dtype, np.int32)
    self.assertAllEqual(np.bincount(self.labels), [500] * 10)

  def test_pixels_in_unit_interval_and_use_the_range(self):
    self.assertGreaterEqual(self.images.min(), 0.0)
    self.assertLessEqual(self.images.max(), 1.0)
    self.assertEqual(self.images.min(), 0.0)
    self.assertEqual(self.images.max(), 1.0)  # 255 / 255 occurs in MNIST.

  def test_looks_like_mnist(self):
    # MNIST's training-set pixel mean is 0.1307 (the usual normalisation
    # constant); a 5,000-image subset is within 0.01 of it. MNIST digits are
    # centred in a 20x20 box inside 28x28: the 2-pixel frame is nearly blank
    # (a few digits touch it), the centre 14x14 is about 3x the mean.
    self.assertAllClose(self.images.mean(), 0.1307, atol=0.01)
    frame = np.ones((28, 28), bool)
    frame[2:26, 2:26] = False
    self.assertLess(self.images[:, frame].mean(), 0.01)
    self.assertGreater(self.images[:, 7:21, 7:21].mean(), 0.25)

  def test_deterministic(self):
    images, labels = offline_images.load_mnist5k()
    self.assertAllEqual(images, self.images)
    self.assertAllEqual(labels, self.labels)


class DigitsTest(tf.test.TestCase):

  def test_digits(self):
    images, labels = offline_images.load_digits()
    self.assertEqual(images.shape, (1797, 8, 8))
    self.assertEqual(images.dtype, np.float32)
    self.assertEqual(labels.dtype, np.int32)
    self.assertLen(np.unique(labels), 10)
    self.assertEqual(images.min(), 0.0)
    self.assertEqual(images.max(), 1.0)  # 16 / 16.


if __name__ == '__main__':
  tf.test.main()
