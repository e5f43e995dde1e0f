"""Tests for tasks.models: architectures and parameter counts of the papers."""

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_federated.python.simulation.baselines.emnist import (
    emnist_models,
)
from tensorflow_federated.python.simulation.baselines.shakespeare import (
    char_prediction_models,
)

from tff_priv_tasks import models


def _dense(n_in, n_out):
  return n_in * n_out + n_out


def _conv(k, c_in, c_out):
  return k * k * c_in * c_out + c_out


class ModelsTest(tf.test.TestCase, parameterized.TestCase):

  def test_mcmahan_cnn_has_the_papers_1663370_parameters(self):
    self.assertEqual(
        models.mcmahan_cnn((28, 28, 1), 10).count_params(), 1_663_370
    )

  @parameterized.parameters(True, False)
  def test_mcmahan_cnn_is_tffs_fedavg_cnn_layer_for_layer(self, only_digits):
    ours = models.mcmahan_cnn((28, 28, 1), 10 if only_digits else 62)
    tffs = emnist_models.create_original_fedavg_cnn_model(only_digits)
    self.assertEqual(
        [w.shape for w in ours.weights], [w.shape for w in tffs.weights]
    )
    self.assertEqual(ours.output_shape, tffs.output_shape)

  def test_mlp_784_256_10_has_203530_parameters(self):
    self.assertEqual(models.mlp((28, 28), 10).count_params(), 203_530)
    self.assertEqual(models.mlp((784,), 10).count_params(), 203_530)

  def test_udp_cifar_cnn_one_conv_with_padding_4(self):
    model = models.udp_cifar_cnn()
    conv = [l for l in model.layers if isinstance(l, tf.keras.layers.Conv2D)]
    self.assertLen(conv, 1)
    self.assertEqual(conv[0].kernel_size, (5, 5))
    # 32 + 2 * 4 - 5 + 1 = 36.
    self.assertEqual(conv[0].output_shape[1:3], (36, 36))
    self.assertEqual(
        model.count_params(), _conv(5, 3, 32) + _dense(36 * 36 * 32, 10)
    )

  def test_small_vgg(self):
    model = models.small_vgg()
    expected = (
        _conv(3, 3, 32)
        + _conv(3, 32, 32)
        + _conv(3, 32, 64)
        + _conv(3, 64, 64)
        + _conv(3, 64, 128)
        + _conv(3, 128, 128)
        + _dense(4 * 4 * 128, 128)
        + _dense(128, 10)
    )
    self.assertEqual(model.count_params(), expected)
    self.assertEqual(expected, 550_570)

  @pytest.mark.slow
  def test_shakespeare_lstm_is_tffs_model(self):
    ours = models.shakespeare_lstm()
    tffs = char_prediction_models.create_recurrent_model(90, 80)
    self.assertEqual(
        [w.shape for w in ours.weights], [w.shape for w in tffs.weights]
    )
    lstm = lambda n_in: 4 * (256 * (n_in + 256) + 256)
    self.assertEqual(
        ours.count_params(), 90 * 8 + lstm(8) + lstm(256) + _dense(256, 90)
    )
    self.assertEqual(models.SHAKESPEARE_VOCAB_SIZE, 90)

  @parameterized.named_parameters(
      (
          'mcmahan_mnist',
          lambda: models.mcmahan_cnn((28, 28, 1), 10),
          (28, 28, 1),
      ),
      ('mcmahan_digits', lambda: models.mcmahan_cnn((8, 8), 10), (8, 8)),
      ('mlp', lambda: models.mlp((8, 8, 1), 10), (8, 8, 1)),
      ('udp', lambda: models.udp_cifar_cnn(num_classes=100), (32, 32, 3)),
      ('vgg', lambda: models.small_vgg(num_classes=100), (32, 32, 3)),
  )
  def test_softmax_outputs(self, build, shape):
    model = build()
    out = model(np.random.default_rng(0).random((3,) + shape, np.float32))
    self.assertAllClose(tf.reduce_sum(out, axis=1), np.ones(3), atol=1e-5)
    self.assertTrue(np.all(out.numpy() >= 0))

  @parameterized.named_parameters(
      ('one_class', lambda: models.mcmahan_cnn((28, 28, 1), 1), ValueError),
      ('string_classes', lambda: models.mlp((28, 28), '10'), TypeError),
      ('zero_dim', lambda: models.small_vgg((0, 32, 3)), ValueError),
      ('empty_shape', lambda: models.udp_cifar_cnn(()), ValueError),
      (
          'zero_hidden',
          lambda: models.mlp((28, 28), 10, hidden_units=0),
          ValueError,
      ),
  )
  def test_bad_arguments(self, build, error):
    with self.assertRaises(error):
      build()


if __name__ == '__main__':
  tf.test.main()
