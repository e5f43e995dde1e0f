"""Tests for tff_priv.learning.udp_client_work: the clipped full-batch step."""

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import neighbours as neighbours_lib
from tests import tiny_models
from tff_priv.learning import udp_client_work
from tff_priv_tasks import models

_LOSS = udp_client_work.sparse_categorical_crossentropy()


_tiny_model_fn = tiny_models.softmax_model_fn


def _mlp_model_fn():
  return tff.learning.models.from_keras_model(
      models.mlp(input_shape=(28, 28)),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(),
      input_spec=(
          tf.TensorSpec([None, 28, 28], tf.float32),
          tf.TensorSpec([None], tf.int32),
      ),
  )


def _keras_model_fn(build_keras_model, input_shape, label_dtype=tf.int32):
  def model_fn():
    return tff.learning.models.from_keras_model(
        build_keras_model(),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        input_spec=(
            tf.TensorSpec((None,) + input_shape, tf.float32),
            tf.TensorSpec([None], label_dtype),
        ),
    )

  return model_fn


def _small_cnn():
  # The McMahan CNN's layers at 12x12: the first convolution's kernel norm is
  # materialised, the second's is a ghost norm (`use_ghost_form`).
  return models.mcmahan_cnn(input_shape=(12, 12, 1), num_classes=5)


def _prelu_classifier():
  # PReLU has a trainable slope and no registry function.
  return tf.keras.Sequential(
      [
          tf.keras.layers.InputLayer(input_shape=(6,)),
          tf.keras.layers.Dense(8),
          tf.keras.layers.PReLU(name='slope'),
          tf.keras.layers.Dense(3, activation='softmax'),
      ]
  )


def _shared_layer_classifier():
  # One Dense layer called twice (shared weights): its norm is not the sum
  # of its calls' norms, so ghost clipping does not cover it.
  inputs = tf.keras.Input((6,))
  shared = tf.keras.layers.Dense(6, activation='tanh', name='shared')
  outputs = tf.keras.layers.Dense(3, activation='softmax')(
      shared(shared(inputs))
  )
  return tf.keras.Model(inputs, outputs)


def _per_example_norms(model_fn, weights, x, y):
  """Each example's gradient L2 norm at `weights`, one example at a time."""
  model = model_fn()
  tf.nest.map_structure(
      lambda v, w: v.assign(w),
      tff.learning.models.ModelWeights.from_model(model),
      weights,
  )
  norms = []
  for i in range(len(x)):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(
          _LOSS(y[i : i + 1], model.predict_on_batch(x[i : i + 1]))
      )
    grads = tape.gradient(loss, model.trainable_variables)
    norms.append(tf.linalg.global_norm(grads).numpy())
  return np.array(norms)


def _weights(model_fn, seed=0):
  tf.keras.utils.set_random_seed(seed)
  model = model_fn()
  return tf.nest.map_structure(
      lambda v: v.numpy(), tff.learning.models.ModelWeights.from_model(model)
  )


def _dataset(x, y, batch):
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def _flat(update):
  return np.concatenate([np.ravel(u) for u in update])


class UdpClientWorkTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters('auto', 'ghost', 'per_example')
  def test_update_is_one_clipped_full_batch_step(self, clipping):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(7, 4)).astype(np.float32) * 3
    y = rng.integers(0, 3, size=7).astype(np.int32)
    lr, clip = 0.5, 0.2
    weights = _weights(_tiny_model_fn)
    work = udp_client_work.build_udp_client_work(
        _tiny_model_fn,
        learning_rate=lr,
        clip_norm=clip,
        per_example_loss=_LOSS,
        clipping=clipping,
    )
    out = work.next(work.initialize(), [weights], [_dataset(x, y, batch=3)])
    update = out.result[0].update
    # The same step computed here example by example, in eager mode.
    kernel = tf.Variable(weights.trainable[0])
    bias = tf.Variable(weights.trainable[1])
    grad_sum = [
        np.zeros_like(weights.trainable[0]),
        np.zeros_like(weights.trainable[1]),
    ]
    clipped_any = False
    for i in range(7):
      with tf.GradientTape() as tape:
        probs = tf.nn.softmax(x[i : i + 1] @ kernel + bias)
        loss = _LOSS(y[i : i + 1], probs)
      g = tape.gradient(loss, [kernel, bias])
      norm = np.sqrt(sum(np.sum(t.numpy() ** 2) for t in g))
      clipped_any |= norm > clip
      scale = min(1.0, clip / norm)
      grad_sum = [s + scale * t.numpy() for s, t in zip(grad_sum, g)]
    self.assertTrue(clipped_any)  # The test exercises the clip.
    expected = [lr / 7 * s for s in grad_sum]  # update = w^t - w_i.
    self.assertAllClose(update[0], expected[0], atol=1e-6)
    self.assertAllClose(update[1], expected[1], atol=1e-6)
    self.assertEqual(out.result[0].update_weight, 7.0)
    # Nothing about the clients is measured by default.
    self.assertEmpty(out.measurements['train'])

  @parameterized.named_parameters(
      ('mlp', _mlp_model_fn, (28, 28)),
      ('cnn', _keras_model_fn(_small_cnn, (12, 12, 1)), (12, 12, 1)),
  )
  @pytest.mark.slow
  def test_ghost_update_equals_per_example_update(self, model_fn, shape):
    rng = np.random.default_rng(7)
    n, lr = 11, 0.5
    x = rng.uniform(size=(n,) + shape).astype(np.float32)
    x[: n // 2] *= 4.0  # Spread the gradient norms.
    y = rng.integers(0, 5, size=n).astype(np.int32)
    weights = _weights(model_fn)
    # C between the norms: some examples are clipped, some are not.
    norms = _per_example_norms(model_fn, weights, x, y)
    clip = float(np.median(norms))
    self.assertGreater(np.sum(norms > clip * 1.01), 0)
    self.assertGreater(np.sum(norms < clip * 0.99), 0)
    updates = {}
    for clipping in ('ghost', 'per_example'):
      work = udp_client_work.build_udp_client_work(
          model_fn,
          learning_rate=lr,
          clip_norm=clip,
          per_example_loss=_LOSS,
          clipping=clipping,
          report_train_metrics=True,
      )
      out = work.next(work.initialize(), [weights], [_dataset(x, y, 4)])
      updates[clipping] = out
    ghost, reference = updates['ghost'], updates['per_example']
    self.assertAllClose(
        _flat(ghost.result[0].update),
        _flat(reference.result[0].update),
        rtol=1e-5,
        atol=1e-7,
    )
    # The update is not trivially zero: it moved by a good share of the bound.
    self.assertGreater(
        np.linalg.norm(_flat(reference.result[0].update)),
        0.1 * lr * clip,
    )
    self.assertAllClose(
        ghost.measurements['train']['loss'],
        reference.measurements['train']['loss'],
        rtol=1e-5,
    )

  @parameterized.named_parameters(
      ('unregistered', _prelu_classifier, r'slope \(PReLU\)'),
      (
          'called_twice',
          _shared_layer_classifier,
          r'shared \(Dense, called 2 times\)',
      ),
  )
  @pytest.mark.slow
  def test_unsupported_layer_falls_back_and_says_so(self, build, blocker):
    model_fn = _keras_model_fn(build, (6,))
    rng = np.random.default_rng(8)
    x = rng.normal(size=(5, 6)).astype(np.float32)
    y = rng.integers(0, 3, size=5).astype(np.int32)
    weights = _weights(model_fn)
    base = dict(learning_rate=0.5, clip_norm=0.05, per_example_loss=_LOSS)
    with self.assertLogs(logger='absl', level='WARNING') as logs:
      auto = udp_client_work.build_udp_client_work(model_fn, **base)
    self.assertLen(logs.output, 1)
    self.assertRegex(
        logs.output[0], r'per-example gradients.*: ' + blocker + '$'
    )
    reference = udp_client_work.build_udp_client_work(
        model_fn, clipping='per_example', **base
    )
    data = [_dataset(x, y, 2)]
    self.assertAllEqual(
        _flat(auto.next(auto.initialize(), [weights], data).result[0].update),
        _flat(
            reference.next(reference.initialize(), [weights], data)
            .result[0]
            .update
        ),
    )
    with self.assertRaisesRegex(ValueError, r"clipping='ghost'.*" + blocker):
      udp_client_work.build_udp_client_work(model_fn, clipping='ghost', **base)

  def test_replacing_one_example_moves_update_by_at_most_sensitivity(self):
    # The paper's MLP 784-256-10 on random data.
    rng = np.random.default_rng(2)
    n, lr, clip = 12, 0.5, 0.1
    x = rng.uniform(size=(n, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, size=n).astype(np.int32)
    weights = _weights(_mlp_model_fn)
    work = udp_client_work.build_udp_client_work(
        _mlp_model_fn, learning_rate=lr, clip_norm=clip, per_example_loss=_LOSS
    )
    bound = udp_client_work.udp_sensitivity(lr, clip, n)
    state = work.initialize()
    base = _flat(
        work.next(state, [weights], [_dataset(x, y, 5)]).result[0].update
    )
    distances = []
    for trial in range(4):
      x2, y2 = x.copy(), y.copy()
      i = trial * 3
      x2[i] = rng.uniform(size=(28, 28)) * 10  # A very different example.
      y2[i] = (y[i] + 1 + trial) % 10
      out = work.next(state, [weights], [_dataset(x2, y2, 5)])
      distances.append(np.linalg.norm(_flat(out.result[0].update) - base))
    self.assertLessEqual(max(distances), bound * (1 + 1e-4))
    self.assertGreater(max(distances), 0.0)

  def test_client_without_examples(self):
    weights = _weights(_tiny_model_fn)
    work = udp_client_work.build_udp_client_work(
        _tiny_model_fn, learning_rate=0.1, clip_norm=1.0, per_example_loss=_LOSS
    )
    empty = _dataset(np.zeros((0, 4), np.float32), np.zeros((0,), np.int32), 2)
    full = _dataset(np.ones((3, 4), np.float32), np.zeros((3,), np.int32), 2)
    out = work.next(work.initialize(), [weights, weights], [empty, full])
    self.assertEqual(out.result[0].update_weight, 0.0)
    for t in out.result[0].update:
      self.assertAllEqual(t, np.zeros_like(t))
    self.assertEmpty(out.measurements['train'])

  def test_several_steps(self):
    data = _dataset(np.ones((3, 4), np.float32), np.zeros((3,), np.int32), 2)
    weights = _weights(_tiny_model_fn)
    updates = []
    for steps in (1, 2):
      work = udp_client_work.build_udp_client_work(
          _tiny_model_fn,
          learning_rate=0.1,
          clip_norm=1.0,
          per_example_loss=_LOSS,
          local_steps=steps,
      )
      out = work.next(work.initialize(), [weights], [data])
      updates.append(_flat(out.result[0].update))
    self.assertGreater(np.linalg.norm(updates[1] - updates[0]), 0.0)
    self.assertTrue(np.all(np.isfinite(updates[1])))

  def test_non_finite_example_contributes_a_zero_gradient(self):
    rng = np.random.default_rng(5)
    n, lr, clip = 7, 0.5, 0.2
    x = rng.normal(size=(n, 4)).astype(np.float32) * 3
    y = rng.integers(0, 3, size=n).astype(np.int32)
    weights = _weights(_tiny_model_fn)
    work = udp_client_work.build_udp_client_work(
        _tiny_model_fn,
        learning_rate=lr,
        clip_norm=clip,
        per_example_loss=_LOSS,
        report_train_metrics=True,
    )
    keep = np.arange(n) != 2
    without = work.next(
        work.initialize(), [weights], [_dataset(x[keep], y[keep], 3)]
    )
    for bad in (np.nan, np.inf):
      x_bad = x.copy()
      x_bad[2, 1] = bad
      out = work.next(work.initialize(), [weights], [_dataset(x_bad, y, 3)])
      update = _flat(out.result[0].update)
      self.assertTrue(np.all(np.isfinite(update)))
      # The example counts in |D_i| (n = 7, not 6) but adds no gradient.
      expected = _flat(without.result[0].update) * (n - 1) / n
      self.assertAllClose(update, expected, atol=1e-7)
      self.assertEqual(out.result[0].update_weight, float(n))
      # Its loss does not poison the sum either.
      train = out.measurements['train']
      self.assertAllClose(
          train['loss'],
          without.measurements['train']['loss'] * (n - 1) / n,
          rtol=1e-5,
      )

  def test_non_finite_update_is_zeroed(self):
    # A NaN in the broadcast model makes every gradient non-finite (each one
    # is zeroed) and the update w^t - w_i NaN there: the backstop sends zeros.
    x = np.ones((3, 4), np.float32)
    y = np.array([0, 1, 2], np.int32)
    weights = _weights(_tiny_model_fn)
    weights.trainable[0][0, 0] = np.nan
    work = udp_client_work.build_udp_client_work(
        _tiny_model_fn, learning_rate=0.1, clip_norm=1.0, per_example_loss=_LOSS
    )
    out = work.next(work.initialize(), [weights], [_dataset(x, y, 3)])
    for t in out.result[0].update:
      self.assertAllEqual(t, np.zeros_like(t))
    self.assertEqual(out.result[0].update_weight, 3.0)

  def test_no_exact_statistic_in_measurements(self):
    # Two neighbouring client sets: one example of the first client is
    # replaced by one far outside the clip (replace-one-example adjacency).
    rng = np.random.default_rng(6)
    x = [rng.normal(size=(5, 4)).astype(np.float32) for _ in range(2)]
    y = [rng.integers(0, 3, size=5).astype(np.int32) for _ in range(2)]
    x_far = x[0].copy()
    x_far[0] = 1e3
    neighbours = (
        [_dataset(x[0], y[0], 2), _dataset(x[1], y[1], 2)],
        [_dataset(x_far, y[0], 2), _dataset(x[1], y[1], 2)],
    )
    weights = _weights(_tiny_model_fn)

    def exact_statistics(work):
      run = lambda data: work.next(
          work.initialize(), [weights] * 2, data
      ).measurements
      return neighbours_lib.exact_statistic_leaves(run, *neighbours)

    base = dict(learning_rate=0.5, clip_norm=0.1, per_example_loss=_LOSS)
    private = udp_client_work.build_udp_client_work(_tiny_model_fn, **base)
    self.assertEqual(exact_statistics(private), [])
    # The check finds the opt-in, non-private training loss.
    with_loss = udp_client_work.build_udp_client_work(
        _tiny_model_fn, report_train_metrics=True, **base
    )
    self.assertLen(exact_statistics(with_loss), 1)

  def test_bad_arguments(self):
    base = dict(learning_rate=0.1, clip_norm=1.0, per_example_loss=_LOSS)
    for name, bad in (
        ('learning_rate', 0.0),
        ('clip_norm', -1.0),
        ('clip_norm', 0.0),
        ('local_steps', 0),
    ):
      with self.assertRaisesRegex(ValueError, name):
        udp_client_work.build_udp_client_work(
            _tiny_model_fn, **{**base, name: bad}
        )
    with self.assertRaisesRegex(ValueError, 'clipping'):
      udp_client_work.build_udp_client_work(
          _tiny_model_fn, **{**base, 'clipping': 'fast'}
      )
    with self.assertRaisesRegex(TypeError, 'per_example_loss'):
      udp_client_work.build_udp_client_work(
          _tiny_model_fn, **{**base, 'per_example_loss': 'xent'}
      )
    with self.assertRaisesRegex(TypeError, 'report_train_metrics'):
      udp_client_work.build_udp_client_work(
          _tiny_model_fn, **{**base, 'report_train_metrics': 1}
      )


if __name__ == '__main__':
  tf.test.main()
