"""Tests for tff_priv.learning.ghost_clipping: norms and clipped sums."""

import os
import subprocess
import sys
import textwrap
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_privacy.privacy.fast_gradient_clipping import clip_grads

from tff_priv.learning import ghost_clipping

_ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)
_LOSS = tf.keras.losses.sparse_categorical_crossentropy


def _conv_model():
  # Strides, valid and same padding, dilation, no bias; the kernel norms of
  # the first two are materialised, of the last two ghost (checked below);
  # one of each form dilated.
  return tf.keras.Sequential(
      [
          tf.keras.layers.InputLayer(input_shape=(11, 11, 2)),
          tf.keras.layers.Conv2D(4, 3, strides=2, activation='relu'),
          tf.keras.layers.Conv2D(5, 2, padding='same', dilation_rate=2),
          tf.keras.layers.Conv2D(16, 3, use_bias=False, activation='tanh'),
          tf.keras.layers.Conv2D(8, 2, padding='same', dilation_rate=2),
          tf.keras.layers.Flatten(),
          tf.keras.layers.Dense(3, activation='softmax'),
      ]
  )


def _per_example_grads(model, x, y):
  grads = []
  for i in range(len(x)):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(_LOSS(y[i : i + 1], model(x[i : i + 1])))
    grads.append(tape.gradient(loss, model.trainable_variables))
  return grads


def _same_pad(size, kernel, stride, dilation):
  out = -(-size // stride)
  total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
  return total // 2, total - total // 2


def _reference_kernel_grads(layer, x, g):
  """[batch, kh, kw, c_in, d] by the definition, in numpy.

  K_b[i, j, c, o] = sum_{h, w} X_b[h s + i r, w s + j r, c] G_b[h, w, o],
  X padded as TensorFlow's 'same' pads.
  """
  x, g = np.asarray(x, np.float64), np.asarray(g, np.float64)
  (kh, kw), (sh, sw), (dh, dw) = (
      layer.kernel_size,
      layer.strides,
      layer.dilation_rate,
  )
  if layer.padding == 'same':
    x = np.pad(
        x,
        [
            (0, 0),
            _same_pad(x.shape[1], kh, sh, dh),
            _same_pad(x.shape[2], kw, sw, dw),
            (0, 0),
        ],
    )
  out_h, out_w = g.shape[1:3]
  k = np.zeros((len(x), kh, kw, x.shape[-1], g.shape[-1]))
  for i in range(kh):
    for j in range(kw):
      window = x[
          :,
          i * dh : i * dh + (out_h - 1) * sh + 1 : sh,
          j * dw : j * dw + (out_w - 1) * sw + 1 : sw,
          :,
      ]
      k[:, i, j] = np.einsum('bhwc,bhwo->bco', window, g)
  return k


def _as_batch_first(kernel_grads):
  """[batch, kh, kw, c_in, d] of a `KernelGrads`."""
  values = np.asarray(kernel_grads.values)
  return np.moveaxis(values, kernel_grads.batch_axis, 0)


def _forms():
  """The forms of the per-example kernel gradients this TensorFlow runs.

  'patches' everywhere, 'grouped' where the CPU kernels take a grouped
  filter gradient (oneDNN; `test_without_onednn` runs the rest without it).
  """
  forms = {
      'patches': mock.patch.object(
          ghost_clipping, 'grouped_filter_grads', return_value=False
      )
  }
  if ghost_clipping.grouped_filter_grads():
    forms['grouped'] = mock.patch.object(
        ghost_clipping, 'grouped_filter_grads', return_value=True
    )
  return forms


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
      forms.append(
          ghost_clipping.use_ghost_form(
              h * w, kh * kw * layer.input_shape[-1], filters
          )
      )
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
        sum(
            min(1.0, clip / n) * g[j].numpy()
            for n, g in zip(norms, per_example)
        )
        for j in range(len(per_example[0]))
    ]
    for form, patch in _forms().items():
      with self.subTest(form=form), patch:
        grads, losses = ghost_clipping.clipped_grad_sum(
            self.model, self.x, self.y, _LOSS, clip
        )
        for got, want in zip(grads, expected):
          self.assertAllClose(got, want, rtol=1e-5, atol=1e-6)
        self.assertAllClose(
            losses, _LOSS(self.y, self.model(self.x)), rtol=1e-6
        )

  def test_a_materialised_kernel_norm_gives_the_kernel_sum_too(self):
    # The two materialised layers' clipped kernel sums are the weighted sums
    # of the per-example gradients their norms computed: no filter gradient
    # of their own. Of the ghost layers, the undilated one takes TF's filter
    # gradient, the dilated one the patch sum. Input patches: the two ghost
    # norms and the dilated ghost layer's sum, plus, where the per-example
    # gradients are not a grouped filter gradient, the two materialised
    # layers' products. (The values: the test above.)
    real = tf.compat.v1.nn.conv2d_backprop_filter
    calls = {'grouped': (3, 3), 'patches': (1, 5)}
    for form, patch in _forms().items():
      filter_grads, patch_calls = calls[form]
      with (
          self.subTest(form=form),
          patch,
          mock.patch.object(
              tf.compat.v1.nn, 'conv2d_backprop_filter', side_effect=real
          ) as filter_grad,
          mock.patch.object(
              ghost_clipping,
              '_input_patches',
              wraps=ghost_clipping._input_patches,
          ) as patches,
      ):
        ghost_clipping.clipped_grad_sum(self.model, self.x, self.y, _LOSS, 1.0)
        self.assertEqual(filter_grad.call_count, filter_grads)
        self.assertEqual(patches.call_count, patch_calls)

  def test_per_example_kernel_grads_equal_the_definition(self):
    # Both forms against the definition, on odd sizes where 'same' pads
    # unevenly, with strides and (unequal) dilations, and with the batch
    # unknown when tracing.
    rng = np.random.default_rng(5)
    for strides, dilation, padding, size in [
        (1, 1, 'same', 9),
        (2, 1, 'valid', 9),
        (2, 1, 'same', 10),
        ((3, 2), 1, 'same', 11),
        (1, 2, 'same', 9),
        (1, 3, 'valid', 10),
        (1, 3, 'same', 10),  # Width 2 dilated: uneven padding.
        (1, (1, 2), 'same', 9),
    ]:
      layer = tf.keras.layers.Conv2D(
          3, (3, 2), strides=strides, dilation_rate=dilation, padding=padding
      )
      x = tf.constant(rng.normal(size=(4, size, size - 1, 2)), tf.float32)
      g = tf.constant(rng.normal(size=layer(x).shape), tf.float32)
      want = _reference_kernel_grads(layer, x, g)
      for form, patch in _forms().items():
        with (
            self.subTest(
                strides=strides, dilation=dilation, padding=padding, form=form
            ),
            patch,
        ):
          got = ghost_clipping._per_example_kernel_grads(layer, x, g)
          traced = tf.function(
              lambda x, g, layer=layer: (
                  ghost_clipping._per_example_kernel_grads(layer, x, g).values
              ),
              input_signature=[
                  tf.TensorSpec([None, *x.shape[1:]]),
                  tf.TensorSpec([None, *g.shape[1:]]),
              ],
          )
          self.assertAllClose(_as_batch_first(got), want, rtol=1e-5, atol=1e-5)
          self.assertAllClose(
              _as_batch_first(got._replace(values=traced(x, g))),
              want,
              rtol=1e-5,
              atol=1e-5,
          )
          self.assertAllClose(
              got.sqr_norms(), np.sum(want**2, axis=(1, 2, 3, 4)), rtol=1e-5
          )
          weights = rng.uniform(size=4)
          self.assertAllClose(
              got.weighted_sum(tf.constant(weights, tf.float32)),
              np.einsum('b,bijco->ijco', weights, want),
              rtol=1e-5,
              atol=1e-5,
          )

  @pytest.mark.slow
  def test_without_onednn(self):
    # TensorFlow's CPU kernels without oneDNN (as on most AMD machines):
    # no grouped filter gradient, no dilated Conv2DBackpropFilter. The
    # per-example kernel gradients and the clipped sum still equal the
    # definition, in a fresh process with TF_ENABLE_ONEDNN_OPTS=0.
    script = textwrap.dedent("""
        import importlib.util
        import sys
        from tff_priv.learning import ghost_clipping
        spec = importlib.util.spec_from_file_location('t', sys.argv[1])
        t = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(t)
        assert not ghost_clipping.grouped_filter_grads()
        case = t.GhostClippingTest(
            'test_clipped_grad_sum_equals_sum_of_clipped_grads')
        case.setUp()
        case.test_clipped_grad_sum_equals_sum_of_clipped_grads()
        case.test_per_example_kernel_grads_equal_the_definition()
        case.test_a_materialised_kernel_norm_gives_the_kernel_sum_too()
        case.test_non_finite_example_adds_nothing()
        print('ok')
    """)
    result = subprocess.run(
        [sys.executable, '-c', script, os.path.abspath(__file__)],
        env={
            **os.environ,
            'TF_ENABLE_ONEDNN_OPTS': '0',
            'PYTHONPATH': _ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''),
        },
        cwd=_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertEqual(result.stdout.split()[-1], 'ok')

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
    model = tf.keras.Sequential(
        [
            tf.keras.layers.InputLayer(input_shape=(5,), dtype=tf.int32),
            tf.keras.layers.Embedding(7, 4),
            tf.keras.layers.Dense(6, activation='tanh'),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(3, activation='softmax'),
        ]
    )
    rng = np.random.default_rng(5)
    x = rng.integers(0, 7, size=(6, 5)).astype(np.int32)
    x[0] = 2  # One id five times in one example.
    y = rng.integers(0, 3, size=6).astype(np.int32)
    per_example = _per_example_grads(model, x, y)
    norms = np.array(
        [
            tf.linalg.global_norm([tf.convert_to_tensor(t) for t in g]).numpy()
            for g in per_example
        ]
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
    model = tf.keras.Sequential(
        [
            tf.keras.layers.InputLayer(input_shape=(6, 6, 4)),
            tf.keras.layers.Conv2D(4, 3, groups=2, name='grouped'),
            tf.keras.layers.Dropout(0.5, name='drop'),
            tf.keras.layers.Flatten(),
            tf.keras.layers.BatchNormalization(name='bn'),
            tf.keras.layers.Dense(2),
        ]
    )
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
    model = tf.keras.Sequential(
        [
            tf.keras.layers.InputLayer(input_shape=(6, 6, 4)),
            tf.keras.layers.Conv2D(4, 3, groups=2, name='grouped'),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(2),
        ]
    )
    with self.assertRaisesRegex(
        NotImplementedError, 'grouped .* in this configuration'
    ):
      ghost_clipping.clipped_grad_sum(
          model,
          np.ones((2, 6, 6, 4), np.float32),
          np.zeros(2, np.int32),
          _LOSS,
          1.0,
      )

  def test_a_layer_called_twice_is_refused(self):
    # The example's gradient of a shared layer is the sum of its calls'
    # terms: the sum of their squared norms is not its squared norm (a
    # clipped contribution could reach sqrt(2) C). Also when the layer sits
    # in a nested model called twice.
    shared = tf.keras.layers.Dense(3, name='shared')
    inputs = tf.keras.Input((3,))
    outputs = tf.keras.layers.Dense(2, name='head')(shared(shared(inputs)))
    model = tf.keras.Model(inputs, outputs)
    self.assertEqual(
        ghost_clipping.unsupported_layers(model),
        ['shared (Dense, called 2 times)'],
    )
    x = np.ones((2, 3), np.float32)
    with self.assertRaisesRegex(
        NotImplementedError, 'shared .* more than once'
    ):
      ghost_clipping.clipped_grad_sum(
          model, x, np.zeros(2, np.int32), _LOSS, 1.0
      )
    block = tf.keras.Sequential(
        [tf.keras.layers.Dense(3, name='inner')], name='block'
    )
    inputs = tf.keras.Input((3,))
    outputs = tf.keras.layers.Dense(2)(block(block(inputs)))
    self.assertEqual(
        ghost_clipping.unsupported_layers(tf.keras.Model(inputs, outputs)),
        ['inner (Dense, called 2 times)'],
    )
    self.assertEmpty(
        ghost_clipping.unsupported_layers(
            tf.keras.Sequential([tf.keras.Input((3,)), block])
        )
    )


if __name__ == '__main__':
  tf.test.main()
