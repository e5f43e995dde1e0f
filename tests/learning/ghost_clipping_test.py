"""Tests for tff_priv.learning.ghost_clipping: norms and clipped sums."""

from unittest import mock

import numpy as np
import tensorflow as tf
from tensorflow_privacy.privacy.fast_gradient_clipping import clip_grads

from tff_priv.learning import ghost_clipping

_LOSS = lambda y, p: tf.keras.losses.sparse_categorical_crossentropy(y, p)


def _conv_model():
  # Strides, valid and same padding, dilation, no bias; the kernel norms of
  # the first two are materialised, of the last two ghost (checked below);
  # one of each form dilated.
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(11, 11, 2)),
      tf.keras.layers.Conv2D(4, 3, strides=2, activation='relu'),
      tf.keras.layers.Conv2D(5, 2, padding='same', dilation_rate=2),
      tf.keras.layers.Conv2D(16, 3, use_bias=False, activation='tanh'),
      tf.keras.layers.Conv2D(8, 2, padding='same', dilation_rate=2),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(3, activation='softmax'),
  ])


def _per_example_grads(model, x, y):
  grads = []
  for i in range(len(x)):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(_LOSS(y[i : i + 1], model(x[i : i + 1])))
    grads.append(tape.gradient(loss, model.trainable_variables))
  return grads


def _patch_products(layer, x, g):
  """[batch, kh, kw, c_in, d]: A_b^T G_b from the input patches A_b."""
  a = ghost_clipping._conv2d_patches(layer, x)
  flat = tf.einsum('btp,btd->bpd', a, tf.reshape(g, [len(x), -1, g.shape[-1]]))
  return tf.reshape(flat, [len(x), *layer.kernel.shape])


class GhostClippingTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    tf.keras.utils.set_random_seed(3)
    rng = np.random.default_rng(3)
    self.model = _conv_model()
    self.x = rng.normal(size=(6, 11, 11, 2)).astype(np.float32)
    self.x[:3] *= 5.0
    self.y = rng.integers(0, 3, size=6).astype(np.int32)

  def test_both_conv_forms_are_used(self):
    forms = []
    for layer in self.model.layers[:4]:
      _, h, w, filters = layer.output_shape
      kh, kw = layer.kernel_size
      forms.append(ghost_clipping.use_ghost_form(
          h * w, kh * kw * layer.input_shape[-1], filters
      ))
    self.assertEqual(forms, [False, False, True, True])

  def test_conv_norms_equal_per_example_norms(self):
    norms = clip_grads.compute_gradient_norms(
        self.model,
        ghost_clipping.layer_registry(),
        self.x,
        self.y,
        per_example_loss_fn=lambda y, p, w: _LOSS(y, p),
    )
    expected = [
        tf.linalg.global_norm(g).numpy()
        for g in _per_example_grads(self.model, self.x, self.y)
    ]
    self.assertAllClose(norms, expected, rtol=1e-5)

  def test_clipped_grad_sum_equals_sum_of_clipped_grads(self):
    per_example = _per_example_grads(self.model, self.x, self.y)
    norms = np.array([tf.linalg.global_norm(g).numpy() for g in per_example])
    clip = float(np.median(norms))  # Some examples clipped, some not.
    self.assertTrue(np.any(norms > clip * 1.01) and np.any(norms < clip * 0.99))
    expected = [
        sum(min(1.0, clip / n) * g[j].numpy() for n, g in zip(norms, per_example))
        for j in range(len(per_example[0]))
    ]
    grads, losses = ghost_clipping.clipped_grad_sum(
        self.model, self.x, self.y, _LOSS, clip
    )
    for got, want in zip(grads, expected):
      self.assertAllClose(got, want, rtol=1e-5, atol=1e-6)
    self.assertAllClose(losses, _LOSS(self.y, self.model(self.x)), rtol=1e-6)

  def test_a_materialised_kernel_norm_gives_the_kernel_sum_too(self):
    # The two materialised layers' clipped kernel sums are the weighted sums
    # of the per-example gradients their norms computed (by the depthwise
    # convolution: a stride, then a dilation): no filter gradient.
    # Of the ghost layers, the undilated one takes TF's filter gradient, the
    # dilated one the patch sum. (The values: the test above.)
    # Input patches: the two ghost norms and the dilated ghost layer's sum;
    # a materialised layer that fell back to patches would add calls.
    real = tf.compat.v1.nn.conv2d_backprop_filter
    with mock.patch.object(
        tf.compat.v1.nn, 'conv2d_backprop_filter', side_effect=real
    ) as filter_grad, mock.patch.object(
        ghost_clipping, '_conv2d_patches',
        wraps=ghost_clipping._conv2d_patches,
    ) as patches:
      ghost_clipping.clipped_grad_sum(self.model, self.x, self.y, _LOSS, 1.0)
    self.assertEqual(filter_grad.call_count, 1)
    self.assertEqual(patches.call_count, 3)

  def test_depthwise_kernel_grads_equal_the_patch_products(self):
    # Per-example kernel gradients by the depthwise convolution against the
    # patch products, A_b^T G_b, on odd sizes where 'same' pads unevenly;
    # the configurations TF's depthwise convolution cannot take give None.
    rng = np.random.default_rng(5)
    for strides, dilation, padding, size, works in [
        (1, 1, 'same', 9, True),
        (2, 1, 'valid', 9, True),
        (2, 1, 'same', 10, True),
        ((3, 2), 1, 'same', 11, True),
        (1, 2, 'same', 9, True),
        (1, 3, 'valid', 10, True),
        (1, 3, 'same', 10, True),  # Width 2 dilated: uneven padding.
        (1, (1, 2), 'same', 9, False),
    ]:
      with self.subTest(strides=strides, dilation=dilation, padding=padding):
        layer = tf.keras.layers.Conv2D(
            3, (3, 2), strides=strides, dilation_rate=dilation, padding=padding
        )
        x = tf.constant(rng.normal(size=(4, size, size - 1, 2)), tf.float32)
        g = tf.constant(rng.normal(size=layer(x).shape), tf.float32)
        args = ghost_clipping._depthwise_args(layer, x, g)
        self.assertEqual(args is not None, works)
        if not works:
          continue
        got = ghost_clipping._depthwise_kernel_grads(layer, x, g, *args)
        self.assertAllClose(
            got, _patch_products(layer, x, g), rtol=1e-5, atol=1e-5
        )

  def test_kernel_grads_take_the_depthwise_form_for_small_batches(self):
    # Batches of at most _DEPTHWISE_MAX_BATCH take the depthwise form,
    # larger ones the patches; chosen by tf.cond when the batch is unknown.
    rng = np.random.default_rng(6)
    layer = tf.keras.layers.Conv2D(4, 3, padding='same')
    layer.build([None, 7, 7, 2])
    limit = ghost_clipping._DEPTHWISE_MAX_BATCH
    traced = tf.function(
        lambda x, g: ghost_clipping._per_example_kernel_grads(layer, x, g),
        input_signature=[tf.TensorSpec([None, 7, 7, 2]),
                         tf.TensorSpec([None, 7, 7, 4])],
    )
    for batch, depthwise_calls in [(3, 1), (limit, 1), (limit + 1, 0)]:
      x = tf.constant(rng.normal(size=(batch, 7, 7, 2)), tf.float32)
      g = tf.constant(rng.normal(size=(batch, 7, 7, 4)), tf.float32)
      with mock.patch.object(
          ghost_clipping, '_depthwise_kernel_grads',
          wraps=ghost_clipping._depthwise_kernel_grads,
      ) as depthwise:
        got = ghost_clipping._per_example_kernel_grads(layer, x, g)
      self.assertEqual(depthwise.call_count, depthwise_calls)
      want = _patch_products(layer, x, g)
      self.assertAllClose(got, want, rtol=1e-5, atol=1e-5)
      self.assertAllClose(traced(x, g), want, rtol=1e-5, atol=1e-5)

  def _check_bad_example_adds_nothing(self, x_bad, bad):
    grads, losses = ghost_clipping.clipped_grad_sum(
        self.model, x_bad, self.y, _LOSS, 1.0
    )
    keep = np.arange(6) != bad
    want, want_losses = ghost_clipping.clipped_grad_sum(
        self.model, self.x[keep], self.y[keep], _LOSS, 1.0
    )
    for g, w in zip(grads, want):
      self.assertAllClose(g, w, rtol=1e-5, atol=1e-6)
    self.assertEqual(losses[bad], 0.0)
    self.assertAllClose(losses.numpy()[keep], want_losses, rtol=1e-6)

  def test_non_finite_example_adds_nothing(self):
    x_bad = self.x.copy()
    x_bad[1, 0, 0, 0] = np.nan
    self._check_bad_example_adds_nothing(x_bad, 1)

  def test_non_finite_gradient_of_a_finite_input_adds_nothing(self):
    # A huge (finite) input overflows its gradient norm to NaN.
    x_big = self.x.copy()
    x_big[2] = 3e38
    self._check_bad_example_adds_nothing(x_big, 2)

  def test_embedding_and_sequence_dense_sums_equal_sum_of_clipped_grads(self):
    # Embedding (table gradient by segment sum, repeated ids) and a Dense
    # applied to every position of a sequence (rank-3 input).
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(5,), dtype=tf.int32),
        tf.keras.layers.Embedding(7, 4),
        tf.keras.layers.Dense(6, activation='tanh'),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(3, activation='softmax'),
    ])
    rng = np.random.default_rng(5)
    x = rng.integers(0, 7, size=(6, 5)).astype(np.int32)
    x[0] = 2  # One id five times in one example.
    y = rng.integers(0, 3, size=6).astype(np.int32)
    per_example = _per_example_grads(model, x, y)
    norms = np.array(
        [tf.linalg.global_norm(
            [tf.convert_to_tensor(t) for t in g]).numpy() for g in per_example]
    )
    clip = float(np.median(norms))
    self.assertTrue(np.any(norms > clip * 1.01) and np.any(norms < clip * 0.99))
    grads, _ = ghost_clipping.clipped_grad_sum(model, x, y, _LOSS, clip)
    for j, got in enumerate(grads):
      want = sum(
          min(1.0, clip / n) * tf.convert_to_tensor(g[j]).numpy()
          for n, g in zip(norms, per_example)
      )
      self.assertAllClose(got, want, rtol=1e-5, atol=1e-6)

  def test_unsupported_layers(self):
    self.assertEmpty(ghost_clipping.unsupported_layers(self.model))
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(6, 6, 4)),
        tf.keras.layers.Conv2D(4, 3, groups=2, name='grouped'),
        tf.keras.layers.Dropout(0.5, name='drop'),
        tf.keras.layers.Flatten(),
        tf.keras.layers.BatchNormalization(name='bn'),
        tf.keras.layers.Dense(2),
    ])
    self.assertEqual(
        ghost_clipping.unsupported_layers(model),
        ['grouped (Conv2D)', 'drop (Dropout)', 'bn (BatchNormalization)'],
    )

    class Subclassed(tf.keras.Model):

      def __init__(self):
        super().__init__(name='sub')
        self.dense = tf.keras.layers.Dense(2)

      def call(self, x):
        return self.dense(x)

    self.assertEqual(
        ghost_clipping.unsupported_layers(Subclassed()),
        ['sub (Subclassed, not a functional Keras model)'],
    )

  def test_clipped_grad_sum_refuses_an_unsupported_configuration(self):
    # Called directly (without `unsupported_layers` first), a grouped Conv2D
    # is refused in one line (it used to fail deep in TensorFlow, a reshape
    # error).
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(6, 6, 4)),
        tf.keras.layers.Conv2D(4, 3, groups=2, name='grouped'),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(2),
    ])
    with self.assertRaisesRegex(NotImplementedError,
                                'grouped .* in this configuration'):
      ghost_clipping.clipped_grad_sum(
          model, np.ones((2, 6, 6, 4), np.float32), np.zeros(2, np.int32),
          _LOSS, 1.0)

  def test_a_layer_called_twice_is_refused(self):
    # The example's gradient of a shared layer is the sum of its calls'
    # terms: the sum of their squared norms is not its squared norm (a
    # clipped contribution could reach sqrt(2) C). Also when the layer sits
    # in a nested model called twice.
    shared = tf.keras.layers.Dense(3, name='shared')
    inputs = tf.keras.Input((3,))
    outputs = tf.keras.layers.Dense(2, name='head')(shared(shared(inputs)))
    model = tf.keras.Model(inputs, outputs)
    self.assertEqual(ghost_clipping.unsupported_layers(model),
                     ['shared (Dense, called 2 times)'])
    x = np.ones((2, 3), np.float32)
    with self.assertRaisesRegex(NotImplementedError, 'shared .* more than once'):
      ghost_clipping.clipped_grad_sum(
          model, x, np.zeros(2, np.int32), _LOSS, 1.0)
    block = tf.keras.Sequential(
        [tf.keras.layers.Dense(3, name='inner')], name='block')
    inputs = tf.keras.Input((3,))
    outputs = tf.keras.layers.Dense(2)(block(block(inputs)))
    self.assertEqual(
        ghost_clipping.unsupported_layers(tf.keras.Model(inputs, outputs)),
        ['inner (Dense, called 2 times)'])
    self.assertEmpty(ghost_clipping.unsupported_layers(
        tf.keras.Sequential([tf.keras.Input((3,)), block])))


if __name__ == '__main__':
  tf.test.main()
