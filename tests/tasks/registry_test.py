"""Tests for tasks.registry: get_task for every task name and option."""

import socket
import tempfile
from unittest import mock

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.tasks import fake_caches
import tff_priv_tasks as tasks

_SPEC = tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=8)
_REQUIRED = (
    'emnist',
    'emnist62',
    'mnist',
    'fashion_mnist',
    'cifar10',
    'cifar100',
    'shakespeare',
    'shakespeare_offline',
    'mnist5k',
    'digits',
    'emnist_shaped',
    'cifar100_shaped',
    'shakespeare_shaped',
)
_CACHED = (
    'emnist',
    'emnist62',
    'mnist',
    'fashion_mnist',
    'cifar10',
    'cifar100',
    'shakespeare',
)


def _client_labels(task):
  data = task.datasets.train_data
  return {
      cid: [
          int(e['label'])
          for e in data.create_tf_dataset_for_client(cid).as_numpy_iterator()
      ]
      for cid in data.client_ids
  }


class NamesAndOptionsTest(tf.test.TestCase, parameterized.TestCase):

  def test_task_names(self):
    self.assertCountEqual(tasks.TASK_NAMES, _REQUIRED)
    self.assertCountEqual(
        tasks.OFFLINE_TASK_NAMES,
        (
            'shakespeare_offline',
            'mnist5k',
            'digits',
            'emnist_shaped',
            'cifar100_shaped',
            'shakespeare_shaped',
        ),
    )

  def test_unknown_name_lists_the_choices(self):
    with self.assertRaises(ValueError) as raised:
      tasks.get_task('svhn', train_client_spec=_SPEC)
    self.assertIn("'svhn'", str(raised.exception))
    for name in _REQUIRED:
      self.assertIn(name, str(raised.exception))

  @parameterized.named_parameters(
      ('unknown_option', dict(name='digits', batch=3), ValueError, 'batch'),
      (
          'option_of_another_task',
          dict(name='shakespeare', num_clients=3),
          ValueError,
          'num_clients',
      ),
      ('bad_model', dict(name='digits', model='vgg'), ValueError, 'model'),
      (
          'colour_model_on_grey',
          dict(name='mnist', model='udp_cnn'),
          ValueError,
          'model',
      ),
      (
          'grey_model_on_colour',
          dict(name='cifar10', model='cnn'),
          ValueError,
          'model',
      ),
      (
          'bad_partition',
          dict(name='digits', partition='pathological'),
          ValueError,
          'partition',
      ),
      (
          'classes_without_shards',
          dict(name='digits', classes_per_client=3),
          ValueError,
          'classes_per_client',
      ),
      (
          'alpha_without_dirichlet',
          dict(name='digits', partition='shards', alpha=0.1),
          ValueError,
          'alpha',
      ),
      (
          'cache_dir_offline',
          dict(name='mnist5k', cache_dir='/tmp'),
          ValueError,
          'cache_dir',
      ),
      ('negative_seed', dict(name='digits', seed=-1), ValueError, 'seed'),
      (
          'download_not_bool',
          dict(name='mnist', download='yes'),
          TypeError,
          'download',
      ),
      ('zero_timeout', dict(name='mnist', timeout=0), ValueError, 'timeout'),
      (
          'bad_spec',
          dict(name='digits', train_client_spec=8),
          TypeError,
          'train_client_spec',
      ),
      (
          'bad_eval_spec',
          dict(name='digits', eval_client_spec=8),
          TypeError,
          'eval_client_spec',
      ),
      (
          'zero_clients',
          dict(name='digits', num_clients=0),
          ValueError,
          'num_clients',
      ),
      (
          'bad_test_fraction',
          dict(name='digits', test_fraction=1.5),
          ValueError,
          'test_fraction',
      ),
  )
  def test_bad_arguments(self, kwargs, error, names):
    kwargs = dict(kwargs)
    kwargs.setdefault('train_client_spec', _SPEC)
    with self.assertRaisesRegex(error, names):
      tasks.get_task(**kwargs)

  def test_task_options_lists_defaults(self):
    self.assertEqual(tasks.task_options('digits')['model'], 'mlp')
    self.assertEqual(tasks.task_options('mnist5k')['num_clients'], 100)
    with self.assertRaises(ValueError):
      tasks.task_options('svhn')


class SyntheticSplitTest(tf.test.TestCase):

  def test_deterministic_for_a_seed(self):
    a = _client_labels(
        tasks.get_task('digits', train_client_spec=_SPEC, seed=4)
    )
    b = _client_labels(
        tasks.get_task('digits', train_client_spec=_SPEC, seed=4)
    )
    c = _client_labels(
        tasks.get_task('digits', train_client_spec=_SPEC, seed=5)
    )
    self.assertEqual(a, b)
    self.assertNotEqual(a, c)

  def test_num_clients_samples_and_shards(self):
    task = tasks.get_task(
        'digits',
        train_client_spec=_SPEC,
        num_clients=12,
        samples_per_client=30,
        partition='shards',
        classes_per_client=3,
    )
    labels = _client_labels(task)
    self.assertLen(labels, 12)
    for client in labels.values():
      self.assertLen(client, 30)
      self.assertEqual(
          sorted(np.bincount(client)[np.bincount(client) > 0]), [10, 10, 10]
      )

  def test_dirichlet(self):
    task = tasks.get_task(
        'digits',
        train_client_spec=_SPEC,
        num_clients=5,
        partition='dirichlet',
        alpha=0.2,
    )
    labels = _client_labels(task)
    # Per-class split: all 1,438 training digits (80% of 1,797) assigned.
    self.assertEqual(sum(len(v) for v in labels.values()), 1438)

  def test_mnist5k_defaults(self):
    task = tasks.get_task('mnist5k', train_client_spec=_SPEC)
    labels = _client_labels(task)
    self.assertLen(labels, 100)
    self.assertEqual({len(v) for v in labels.values()}, {40})
    test_labels = np.concatenate(
        [y.numpy() for _, y in task.datasets.get_centralized_test_data()]
    )
    self.assertAllEqual(np.bincount(test_labels), [100] * 10)
    x, _ = task.datasets.element_type_structure
    self.assertEqual(x.shape.as_list(), [None, 28, 28, 1])

  def test_one_fedavg_round_runs(self):
    task = tasks.get_task('digits', train_client_spec=_SPEC, num_clients=4)
    process = tff.learning.algorithms.build_weighted_fed_avg(
        task.model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
    )
    clients = task.datasets.sample_train_clients(2, random_seed=0)
    examples = sum(int(x.shape[0]) for ds in clients for x, _ in ds)
    output = process.next(process.initialize(), clients)
    train = output.metrics['client_work']['train']
    self.assertEqual(int(train['num_examples']), examples)
    self.assertBetween(examples, 2 * (1438 // 4), 2 * (1438 // 4 + 1))
    self.assertTrue(np.isfinite(float(train['loss'])))


class CachedTasksTest(tf.test.TestCase, parameterized.TestCase):

  def _new_dir(self):
    return tempfile.mkdtemp(dir=self.get_temp_dir())

  @parameterized.parameters(*_CACHED)
  def test_missing_dataset_fails_fast_naming_the_file(self, name):
    root = self._new_dir()
    # Fails fast: no network is tried (a connect would raise).
    with mock.patch.object(
        socket.socket, 'connect', side_effect=AssertionError('network used')
    ):
      with self.assertRaises(tasks.DatasetUnavailableError) as raised:
        tasks.get_task(name, train_client_spec=_SPEC, cache_dir=root)
    self.assertNotEmpty(raised.exception.paths)
    for path in raised.exception.paths:
      self.assertStartsWith(path, root)
      self.assertIn(path, str(raised.exception))

  @parameterized.parameters(
      ('mnist', fake_caches.write_mnist, 'cnn', [None, 28, 28, 1]),
      (
          'fashion_mnist',
          fake_caches.write_fashion_mnist,
          'mlp',
          [None, 28, 28, 1],
      ),
      ('cifar10', fake_caches.write_cifar10, 'udp_cnn', [None, 32, 32, 3]),
  )
  def test_keras_cache_tasks(self, name, write, model, shape):
    root = self._new_dir()
    write(root)
    task = tasks.get_task(
        name,
        train_client_spec=_SPEC,
        cache_dir=root,
        num_clients=2,
        model=model,
    )
    self.assertLen(task.datasets.train_data.client_ids, 2)
    x, _ = task.datasets.element_type_structure
    self.assertEqual(x.shape.as_list(), shape)
    batch = next(iter(task.datasets.get_centralized_test_data()))
    self.assertEqual(batch[0].shape.as_list()[1:], shape[1:])

  @parameterized.parameters(('emnist', 10), ('emnist62', 62))
  def test_emnist_tasks(self, name, classes):
    root = self._new_dir()
    fake_caches.write_emnist(root)
    task = tasks.get_task(name, train_client_spec=_SPEC, cache_dir=root)
    self.assertLen(task.datasets.train_data.client_ids, 3)
    x, _ = next(iter(task.datasets.sample_train_clients(1, random_seed=0)[0]))
    self.assertEqual(x.shape.as_list(), [5, 28, 28, 1])
    with tf.Graph().as_default():
      # pylint: disable-next=protected-access
      keras_model = task.model_fn()._keras_model
      self.assertEqual(keras_model.output_shape, (None, classes))

  def test_cifar100_task(self):
    root = self._new_dir()
    fake_caches.write_cifar100(root)
    task = tasks.get_task('cifar100', train_client_spec=_SPEC, cache_dir=root)
    self.assertCountEqual(task.datasets.train_data.client_ids, ['0', '1'])
    x, y = next(iter(task.datasets.get_centralized_test_data()))
    self.assertEqual(x.shape.as_list(), [2, 32, 32, 3])
    self.assertEqual(y.dtype, tf.int64)

  @pytest.mark.slow
  def test_offline_shakespeare_batches_like_the_online_task(self):
    root = self._new_dir()
    fake_caches.write_shakespeare(root)
    online = tasks.get_task(
        'shakespeare', train_client_spec=_SPEC, cache_dir=root
    )
    offline = tasks.get_task(
        'shakespeare_offline', train_client_spec=_SPEC, max_clients=20
    )
    self.assertEqual(
        offline.datasets.element_type_structure,
        online.datasets.element_type_structure,
    )
    x, y = offline.datasets.element_type_structure
    self.assertEqual(x.shape.as_list(), [None, 80])
    self.assertEqual(y.dtype, tf.int64)
    for task in (online, offline):
      client = task.datasets.sample_train_clients(1, random_seed=0)[0]
      x, y = next(iter(client))
      self.assertEqual(x.shape[1], 80)
      self.assertAllEqual(x[:, 1:], y[:, :-1])  # Targets: inputs shifted by 1.
    with tf.Graph().as_default():
      self.assertEqual(
          [w.shape for w in offline.model_fn().trainable_variables],
          [w.shape for w in online.model_fn().trainable_variables],
      )


if __name__ == '__main__':
  tf.test.main()
