"""Tests for tasks.keras_files on tiny files in the Keras cache formats."""

import os
import socket
import tempfile
from unittest import mock

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tests.tasks import fake_caches
from tff_priv_tasks import cache
from tff_priv_tasks import keras_files


def _assert_train_py_and_python_instructions(test, message):
  """scripts/train.py has no download flag: download=True is for Python only."""
  lines = message.splitlines()
  (train_py,) = [l for l in lines if 'scripts/train.py' in l]
  test.assertIn('--cache_dir=DIR', train_py)
  (python,) = [l for l in lines if 'download=True' in l]
  test.assertStartsWith(python, 'From Python (tff_priv_tasks.get_task')
  test.assertIn('cache_dir unset', python)


class KerasFilesTest(tf.test.TestCase, parameterized.TestCase):

  def _new_dir(self):
    return tempfile.mkdtemp(dir=self.get_temp_dir())

  def test_mnist(self):
    root = self._new_dir()
    arrays = fake_caches.write_mnist(root)
    (x, y), (x_test, y_test) = keras_files.load('mnist', cache_dir=root)
    self.assertEqual(x.dtype, np.float32)
    self.assertEqual(y.dtype, np.int32)
    self.assertAllClose(x, arrays['x_train'] / 255.0)
    self.assertAllEqual(y, arrays['y_train'])
    self.assertAllClose(x_test, arrays['x_test'] / 255.0)
    self.assertAllEqual(y_test, arrays['y_test'])

  def test_fashion_mnist(self):
    root = self._new_dir()
    arrays = fake_caches.write_fashion_mnist(root)
    (x, y), (x_test, y_test) = keras_files.load('fashion_mnist', cache_dir=root)
    self.assertAllClose(x, arrays['x_train'] / 255.0)
    self.assertAllEqual(y, arrays['y_train'])
    self.assertAllClose(x_test, arrays['x_test'] / 255.0)
    self.assertAllEqual(y_test, arrays['y_test'])

  def test_cifar10(self):
    root = self._new_dir()
    batches = fake_caches.write_cifar10(root)
    (x, y), (x_test, y_test) = keras_files.load('cifar10', cache_dir=root)
    self.assertEqual(x.shape, (20, 32, 32, 3))
    self.assertEqual(x.dtype, np.uint8)
    self.assertEqual(y.dtype, np.int64)
    data, labels = batches['data_batch_1']
    # Row layout: 1024 red, then 1024 green, then 1024 blue values, row-major.
    row, col = 5, 7
    for channel in range(3):
      self.assertEqual(
          x[0, row, col, channel], data[0, channel * 1024 + row * 32 + col]
      )
    self.assertAllEqual(y[:4], labels)
    self.assertAllEqual(x_test.shape, (4, 32, 32, 3))
    self.assertAllEqual(y_test, batches['test_batch'][1])

  def test_cifar10_matches_keras_own_batch_reader(self):
    from keras.src.datasets import cifar  # pylint: disable=g-import-not-at-top

    root = self._new_dir()
    fake_caches.write_cifar10(root)
    (x, y), _ = keras_files.load('cifar10', cache_dir=root)
    data, labels = cifar.load_batch(
        os.path.join(root, 'cifar-10-batches-py', 'data_batch_2')
    )
    self.assertAllEqual(x[4:8], data.transpose(0, 2, 3, 1))
    self.assertAllEqual(y[4:8], labels)

  @parameterized.parameters('mnist', 'fashion_mnist', 'cifar10')
  def test_missing_files_fail_fast_without_network(self, name):
    root = self._new_dir()
    # Fails fast: no network is tried (a connect would raise).
    with mock.patch.object(
        socket.socket, 'connect', side_effect=AssertionError('network used')
    ):
      with self.assertRaises(cache.DatasetUnavailableError) as raised:
        keras_files.load(name, cache_dir=root)
    message = str(raised.exception)
    for path in keras_files.expected_files(name, root):
      self.assertIn(path, message)
    self.assertIn('cache_dir', message)
    _assert_train_py_and_python_instructions(self, message)

  def test_partly_missing_names_only_missing_files(self):
    root = self._new_dir()
    fake_caches.write_fashion_mnist(root)
    gone = os.path.join(root, 'fashion-mnist', 't10k-labels-idx1-ubyte.gz')
    os.remove(gone)
    with self.assertRaises(cache.DatasetUnavailableError) as raised:
      keras_files.load('fashion_mnist', cache_dir=root)
    self.assertEqual(raised.exception.paths, (gone,))

  def test_download_with_cache_dir_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'download=True'):
      keras_files.load('mnist', cache_dir=self._new_dir(), download=True)

  def test_unknown_name(self):
    with self.assertRaisesRegex(ValueError, 'name must be one of'):
      keras_files.load('svhn', cache_dir='/tmp')


if __name__ == '__main__':
  tf.test.main()
