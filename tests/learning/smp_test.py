"""Tests for tff_priv.learning.smp (Fed-SMP learning process)."""

import collections

from absl.testing import parameterized
from dp_accounting import dp_event
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

# Test-only: TFF's own tree analysis finds the aggregation intrinsics of a
# computation (there is no public API for it in TFF 0.87).
from tensorflow_federated.python.core.impl.compiler import tree_analysis

from tff_priv.accounting import guarantees
from tff_priv.aggregators import smp as smp_aggregators
from tff_priv.learning import client_metrics
from tff_priv.learning import smp as smp_learning
from tff_priv.mechanisms import smp as smp_mechanisms

_FEATURES, _CLASSES = 4, 3
_D = _FEATURES * _CLASSES + _CLASSES
# A fixed linear labelling: the synthetic data is linearly separable.
_TRUE_W = np.random.default_rng(100).normal(size=[_FEATURES, _CLASSES])


def _model_fn():
  """The softmax regression every process of these tests trains.

  A softmax regression on 4 features and 3 classes (d = 15 trainable values:
  kernel [4, 3] then bias [3]) keeps every process small. Numpy references
  compute softmax-regression gradients and (momentum) SGD independently of TF.
  Runs in tff_priv.runtime's 'simulation' context (tests/conftest.py).
  """
  keras_model = tf.keras.Sequential(
      [tf.keras.layers.Dense(_CLASSES, input_shape=(_FEATURES,))]
  )
  return tff.learning.models.from_keras_model(
      keras_model,
      input_spec=(
          tf.TensorSpec([None, _FEATURES], tf.float32),
          tf.TensorSpec([None], tf.int32),
      ),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
  )


def _examples(seed, n):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=[n, _FEATURES]).astype(np.float32)
  return x, np.argmax(x @ _TRUE_W, axis=1).astype(np.int32)


def _dataset(x, y, batch):
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def _factory(**kwargs):
  args = dict(
      noise_multiplier=0.0,
      clip=100.0,
      compression=0.4,
      expected_clients_per_round=2,
      mask='top_k',
  )
  args.update(kwargs)
  if args['mask'] == 'rand_k':
    args.setdefault('mask_seed', 1)  # A reproducible mask sequence.
  return smp_aggregators.SparsifiedSecureSumFactory(**args)


def _build(**kwargs):
  args = dict(
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.2),
      aggregator_factory=_factory(),
  )
  args.update(kwargs)
  factory = args['aggregator_factory']
  if (
      isinstance(factory, smp_aggregators.SparsifiedSecureSumFactory)
      and factory.mask == 'top_k'
  ):
    args.setdefault('public_data', _dataset(*_examples(7, 10), batch=4))
  return smp_learning.build_fedsmp_process(_model_fn, **args)


def _initial_state(process, seed=0):
  """`process.initialize()` with fixed initial weights (Keras draws its own)."""
  rng = np.random.default_rng(seed)
  weights = tff.learning.models.ModelWeights(
      trainable=[
          rng.normal(scale=0.5, size=[_FEATURES, _CLASSES]).astype(np.float32),
          rng.normal(scale=0.5, size=[_CLASSES]).astype(np.float32),
      ],
      non_trainable=[],
  )
  return process.set_model_weights(process.initialize(), weights)


def _flat(structure):
  return np.concatenate([np.ravel(t) for t in structure]).astype(np.float64)


def _softmax_regression(theta, x, y):
  """(mean cross-entropy, gradient [dW, db]) of logits x W + b, in float64."""
  w, b = (np.asarray(t, np.float64) for t in theta)
  logits = x @ w + b
  logits -= logits.max(axis=1, keepdims=True)
  p = np.exp(logits)
  p /= p.sum(axis=1, keepdims=True)
  loss = -np.mean(np.log(p[np.arange(len(y)), y]))
  residual = p
  residual[np.arange(len(y)), y] -= 1.0
  residual /= len(y)
  return loss, [x.T @ residual, residual.sum(axis=0)]


def _numpy_local_training(theta, batches, epochs, lr, momentum):
  """TFF's sgdm (a <- m a + g; w <- w - lr a; a = 0 at the start) in numpy.

  Returns:
    (trained weights, example-weighted mean of the batch losses seen), i.e.
    what a client's local period yields and what its `loss` metric reports.
  """
  theta = [np.asarray(t, np.float64) for t in theta]
  accumulator = [np.zeros_like(t) for t in theta]
  loss_sum, count = 0.0, 0
  for _ in range(epochs):
    for x, y in batches:
      loss, grad = _softmax_regression(theta, x, y)
      loss_sum += loss * len(y)
      count += len(y)
      accumulator = [momentum * a + g for a, g in zip(accumulator, grad)]
      theta = [t - lr * a for t, a in zip(theta, accumulator)]
  return theta, loss_sum / count


class ArgumentTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      (
          'aggregator_mean',
          dict(aggregator_factory=tff.aggregators.UnweightedMeanFactory()),
          'aggregator_factory',
      ),
      ('aggregator_none', dict(aggregator_factory=None), 'aggregator_factory'),
      (
          'client_optimizer_keras',
          dict(client_optimizer_fn=lambda: tf.keras.optimizers.SGD(0.1)),
          'client_optimizer_fn',
      ),
      (
          'server_optimizer_str',
          dict(server_optimizer_fn='sgd'),
          'server_optimizer_fn',
      ),
      ('local_epochs_float', dict(local_epochs=1.5), 'local_epochs'),
      ('local_epochs_bool', dict(local_epochs=True), 'local_epochs'),
      ('public_data_arrays', dict(public_data=_examples(7, 10)), 'public_data'),
      (
          'public_data_wrong_features',
          dict(
              public_data=_dataset(
                  np.zeros([4, 5], np.float32), np.zeros([4], np.int32), 2
              )
          ),
          'public_data',
      ),
      (
          'public_data_unbatched',
          dict(
              public_data=tf.data.Dataset.from_tensor_slices(_examples(7, 10))
          ),
          'public_data',
      ),
      (
          'metrics_aggregator_str',
          dict(metrics_aggregator='sum'),
          'metrics_aggregator',
      ),
  )
  def test_type_errors_name_the_argument(self, kwargs, name):
    with self.assertRaisesRegex(TypeError, name):
      _build(**kwargs)

  @parameterized.named_parameters(
      ('local_epochs_zero', dict(local_epochs=0), 'local_epochs'),
      ('local_epochs_negative', dict(local_epochs=-2), 'local_epochs'),
      ('public_data_missing', dict(public_data=None), 'public_data'),
      (
          'public_data_empty',
          dict(public_data=_dataset(*_examples(7, 10), batch=4).take(0)),
          'public_data',
      ),
      (
          'public_data_infinite',
          dict(public_data=_dataset(*_examples(7, 10), batch=4).repeat()),
          'public_data',
      ),
      (
          'public_data_with_rand_k',
          dict(
              aggregator_factory=_factory(mask='rand_k'),
              public_data=_dataset(*_examples(7, 10), batch=4),
          ),
          'public_data',
      ),
  )
  def test_value_errors_name_the_argument(self, kwargs, name):
    with self.assertRaisesRegex(ValueError, name):
      _build(**kwargs)

  def test_model_fn_must_be_callable(self):
    with self.assertRaisesRegex(TypeError, 'model_fn'):
      smp_learning.build_fedsmp_process(
          _model_fn(),
          client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
          aggregator_factory=_factory(mask='rand_k'),
      )


class TopKMaskTest(tf.test.TestCase):
  """The round's top_k mask, against references computed outside the process."""

  _LR, _MOMENTUM, _EPOCHS = 0.3, 0.9, 2

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    optimizer = tff.learning.optimizers.build_sgdm(cls._LR, cls._MOMENTUM)
    # 10 public examples in batches of 4, 4, 2 (two shapes of batch).
    cls.public_x, cls.public_y = _examples(7, 10)
    cls.public = _dataset(cls.public_x, cls.public_y, batch=4)
    cls.factory = _factory(compression=0.4)
    cls.k = smp_mechanisms.num_kept(_D, 0.4)
    cls.process = smp_learning.build_fedsmp_process(
        _model_fn,
        client_optimizer_fn=optimizer,
        aggregator_factory=cls.factory,
        public_data=cls.public,
        local_epochs=cls._EPOCHS,
    )
    # The reference public training: TFF's public client work, run as one
    # client on the public data repeated for the local period.
    cls.reference_work = tff.learning.templates.build_model_delta_client_work(
        _model_fn, optimizer, tff.learning.ClientWeighting.UNIFORM
    )

  def _reference(self, state, dataset):
    """(theta_pub, train loss) of TFF's client training from the state."""
    output = self.reference_work.next(
        self.reference_work.initialize(),
        [state.global_model_weights],
        [dataset.repeat(self._EPOCHS)],
    )
    theta = state.global_model_weights.trainable
    theta_pub = [t - u for t, u in zip(theta, output.result[0].update)]
    return theta_pub, output.measurements['train']['loss']

  def _public_batches(self):
    return [(x, y) for x, y in self.public.as_numpy_iterator()]

  def test_mask_is_top_k_of_public_training_each_round(self):
    state = _initial_state(self.process)
    private = [_dataset(*_examples(s, 8), batch=4) for s in (1, 2)]
    masks = []
    for _ in range(3):
      theta = state.global_model_weights.trainable
      theta_pub, loss = self._reference(state, self.public)
      expected = smp_mechanisms.top_k_mask_from_public_update(
          theta_pub, theta, self.k
      ).numpy()
      # Independent reference: momentum SGD in numpy over the same batches.
      numpy_pub, numpy_loss = _numpy_local_training(
          theta, self._public_batches(), self._EPOCHS, self._LR, self._MOMENTUM
      )
      self.assertAllClose(
          _flat(theta_pub), _flat(numpy_pub), rtol=1e-5, atol=1e-6
      )
      numpy_scores = np.abs(_flat(numpy_pub) - _flat(theta))
      self.assertAllEqual(
          expected, np.sort(np.argsort(-numpy_scores)[: self.k])
      )

      output = self.process.next(state, private)
      mask = output.state.aggregator.mask_indices
      self.assertAllEqual(mask, expected)  # Exact.
      self.assertEqual(output.metrics['mask']['mask_size'], self.k)
      public_train = output.metrics['mask']['public_train']
      self.assertAllClose(public_train['loss'], loss, rtol=1e-6)
      self.assertAllClose(public_train['loss'], numpy_loss, rtol=1e-5)
      self.assertEqual(public_train['num_examples'], 10 * self._EPOCHS)
      # Noise-free: the model moves on exactly the mask.
      moved = _flat(output.state.global_model_weights.trainable) - _flat(theta)
      self.assertAllEqual(np.flatnonzero(moved), mask)
      masks.append(mask)
      state = output.state
    # The mask is recomputed from each round's theta (exact per round above),
    # so it is not fixed: with these seeds rounds 1 and 2 differ. (Two
    # consecutive masks may also coincide when theta moves little.)
    self.assertGreater(len({tuple(m) for m in masks}), 1)

  def test_mask_does_not_depend_on_private_data(self):
    state = _initial_state(self.process)
    theta = state.global_model_weights.trainable
    datasets = (
        [_dataset(*_examples(s, 8), batch=4) for s in (1, 2)],
        [_dataset(*_examples(s, 12), batch=3) for s in (3, 4, 5)],
    )
    masks = []
    for private in datasets:
      output = self.process.next(state, private)
      masks.append(output.state.aggregator.mask_indices)
      moved = _flat(output.state.global_model_weights.trainable) - _flat(theta)
      self.assertAllEqual(np.flatnonzero(moved), masks[-1])
    self.assertAllEqual(masks[0], masks[1])
    # The test can fail: a mask taken from the clients' own updates (here the
    # top k of the first client's dense update) differs between the two
    # private datasets.
    client_masks = [
        smp_mechanisms.top_k_mask_from_public_update(
            self._reference(state, private[0])[0], theta, self.k
        ).numpy()
        for private in datasets
    ]
    self.assertNotAllEqual(client_masks[0], client_masks[1])

  def test_public_training_uses_the_client_hparams_of_the_state(self):
    # With the clients' learning rate set to 0 in the state, the public update
    # is 0 everywhere: the mask is the first k coordinates (ties: lower index
    # first) and the model does not move.
    state = _initial_state(self.process)
    hparams = self.process.get_hparams(state)
    hparams['client_work']['learning_rate'] = np.float32(0.0)
    state = self.process.set_hparams(state, hparams)
    output = self.process.next(state, [_dataset(*_examples(1, 8), batch=4)])
    self.assertAllEqual(output.state.aggregator.mask_indices, np.arange(self.k))
    self.assertAllEqual(
        _flat(output.state.global_model_weights.trainable),
        _flat(state.global_model_weights.trainable),
    )


class SignAndLocalPeriodTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('dp_fedavg_one_epoch', 'rand_k', 1.0, 1),
      ('dp_fedavg_two_epochs', 'rand_k', 1.0, 2),
      ('top_k_two_epochs', 'top_k', 0.4, 2),
  )
  @pytest.mark.slow
  def test_model_moves_to_the_client_result(self, mask, compression, epochs):
    # One client (K = 1), no noise, no clipping, server SGD at rate 1: on the
    # round's mask the new model is the client's locally trained model (the
    # paper's theta + Delta with Delta = theta_client - theta), elsewhere it
    # stays. The client makes `epochs` plain SGD steps on its single batch;
    # numpy computes them independently. A sign error would move the model to
    # theta - Delta.
    lr = 0.5
    process = _build(
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(lr),
        aggregator_factory=_factory(
            mask=mask, compression=compression, expected_clients_per_round=1
        ),
        local_epochs=epochs,
    )
    x, y = _examples(3, 6)
    state = _initial_state(process)
    theta = state.global_model_weights.trainable
    if mask == 'rand_k':
      k = smp_mechanisms.num_kept(_D, compression)
      seed = smp_mechanisms.round_seed(
          state.aggregator.mask_seed, state.aggregator.round_num
      )
      indices = smp_mechanisms.rand_k_indices(seed, _D, k).numpy()
    output = process.next(state, [_dataset(x, y, batch=6)])
    if mask == 'top_k':
      indices = output.state.aggregator.mask_indices
    client, _ = _numpy_local_training(theta, [(x, y)], epochs, lr, 0.0)
    expected = _flat(theta)
    expected[indices] = _flat(client)[indices]
    new = _flat(output.state.global_model_weights.trainable)
    self.assertAllClose(new, expected, rtol=1e-5, atol=1e-6)
    self.assertGreater(np.abs(new - _flat(theta)).max(), 1e-2)


class TrainingTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(
      ('rand_k', 'rand_k', 0.4),
      ('top_k', 'top_k', 0.4),
      ('dp_fedavg', 'rand_k', 1.0),
  )
  @pytest.mark.slow
  def test_loss_decreases_noise_free(self, mask, compression):
    # Separable synthetic data, 3 clients, no noise: the loss of the global
    # model on all the clients' data (numpy) falls by a quarter in 4 rounds.
    process = _build(
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.5, 0.5),
        aggregator_factory=_factory(
            mask=mask,
            compression=compression,
            expected_clients_per_round=3,
            clip=10.0,
        ),
        local_epochs=2,
    )
    examples = [_examples(s, 16) for s in (11, 12, 13)]
    data = [_dataset(x, y, batch=8) for x, y in examples]
    all_x = np.concatenate([x for x, _ in examples])
    all_y = np.concatenate([y for _, y in examples])
    state = _initial_state(process)

    def loss(state):
      theta = state.global_model_weights.trainable
      return _softmax_regression(theta, all_x, all_y)[0]

    losses = [loss(state)]
    for _ in range(4):
      state = process.next(state, data).state
      losses.append(loss(state))
    self.assertLess(losses[-1], 0.75 * losses[0], losses)


class MeasurementTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters('rand_k', 'top_k')
  @pytest.mark.slow
  def test_state_and_metrics(self, mask):
    sigma, k_clients, compression = 0.7, 4, 0.4
    process = _build(
        aggregator_factory=_factory(
            mask=mask,
            noise_multiplier=sigma,
            clip=1.0,
            compression=compression,
            expected_clients_per_round=k_clients,
        ),
    )
    self.assertIsInstance(process, tff.learning.templates.LearningProcess)
    state = _initial_state(process, seed=5)
    self.assertIsInstance(state, tff.learning.templates.LearningAlgorithmState)
    self.assertAllEqual(
        _flat(process.get_model_weights(state).trainable),
        _flat(_initial_state(process, seed=5).global_model_weights.trainable),
    )
    self.assertIsInstance(
        state.aggregator,
        smp_aggregators.TopKState
        if mask == 'top_k'
        else smp_aggregators.RandKState,
    )
    k = smp_mechanisms.num_kept(_D, compression)
    # Two of K = 4 clients report: their noise shares still sum to sigma C,
    # and the state's event says so.
    output = process.next(
        state, [_dataset(*_examples(s, 8), batch=4) for s in (1, 2)]
    )
    metrics = output.metrics
    self.assertEqual(
        list(metrics),
        ['distributor', 'client_work', 'aggregator', 'finalizer', 'mask'],
    )
    self.assertEqual(
        guarantees.extract_dp_event(output.state.aggregator),
        dp_event.GaussianDpEvent(sigma),
    )
    self.assertEqual(metrics['aggregator']['uploaded_bits_per_client'], 32 * k)
    self.assertEqual(metrics['mask']['mask_size'], k)
    self.assertEqual('public_train' in metrics['mask'], mask == 'top_k')
    self.assertEqual(metrics['client_work']['train']['num_examples'], 16)
    # The new model moved on at most the k coordinates of the mask.
    moved = _flat(output.state.global_model_weights.trainable) - _flat(
        state.global_model_weights.trainable
    )
    self.assertLessEqual(np.count_nonzero(moved), k)


class ClientMetricsTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_no_client_metrics_leaves_only_secure_aggregation(self):
    # With secure=True and no client metrics, nothing computed from client
    # data reaches the server by a plain sum. The default metrics aggregator
    # (TFF's sum_then_finalize) does sum the clients' metrics in the clear,
    # which this check must see (so that it can fail).
    private = _build(
        aggregator_factory=_factory(mask='rand_k'),
        metrics_aggregator=client_metrics.no_client_metrics,
    )
    tree = private.next.to_building_block()
    self.assertEqual(tree_analysis.find_unsecure_aggregation_in_tree(tree), [])
    self.assertNotEmpty(tree_analysis.find_secure_aggregation_in_tree(tree))
    output = private.next(
        private.initialize(), [_dataset(*_examples(1, 8), batch=4)]
    )
    self.assertEqual(
        output.metrics['client_work'],
        collections.OrderedDict(train=collections.OrderedDict()),
    )
    default = _build(aggregator_factory=_factory(mask='rand_k'))
    tree = default.next.to_building_block()
    self.assertNotEmpty(tree_analysis.find_unsecure_aggregation_in_tree(tree))


if __name__ == '__main__':
  tf.test.main()
