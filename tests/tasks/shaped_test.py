"""Tests for tff_priv_tasks.shaped: synthetic populations of the real shapes."""

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv_tasks import registry
from tff_priv_tasks import shakespeare_offline
from tff_priv_tasks import shaped


def _arrays(dataset):
  elements = list(dataset.as_numpy_iterator())
  return {k: np.stack([e[k] for e in elements]) for k in elements[0]}


class ShapedTest(tf.test.TestCase):

  def test_emnist_shaped_has_emnists_population_and_layout(self):
    train, test = shaped.emnist_shaped(seed=3)
    self.assertLen(train.client_ids, shaped.EMNIST_CLIENTS)
    self.assertEqual(
        set(train.element_type_structure),
        {'label', 'pixels'},
    )
    self.assertEqual(train.element_type_structure['pixels'].shape, (28, 28))
    self.assertEqual(train.element_type_structure['label'].dtype, tf.int32)
    # The counts' mean is EMNIST's (the lognormal is rescaled to it; the clip
    # at 10 and 1,000 moves it by a fraction of an example).
    counts = shaped._counts(
        np.random.RandomState(3),
        shaped.EMNIST_CLIENTS,
        shaped.EMNIST_MEAN_EXAMPLES,
        0.5,
        10,
        1000,
    )
    self.assertAllClose(counts.mean(), shaped.EMNIST_MEAN_EXAMPLES, atol=1.0)
    self.assertGreater(counts.std(), 50)  # Spread, not one size.
    client = _arrays(train.create_tf_dataset_for_client(train.client_ids[7]))
    self.assertLen(client['label'], counts[7])
    self.assertAllInRange(client['pixels'], 0.0, 1.0)
    self.assertAllInRange(client['label'], 0, shaped.EMNIST_CLASSES - 1)
    self.assertEqual(test.cardinality(), shaped.TEST_EXAMPLES)

  def test_a_client_is_the_same_data_on_every_call_and_seeds_differ(self):
    for load in (
        shaped.emnist_shaped,
        shaped.cifar100_shaped,
        shaped.shakespeare_shaped,
    ):
      train, _ = load(seed=1, num_clients=20)
      again, _ = load(seed=1, num_clients=20)
      other, _ = load(seed=2, num_clients=20)
      cid = train.client_ids[4]
      first = _arrays(train.create_tf_dataset_for_client(cid))
      for key, value in _arrays(
          again.create_tf_dataset_for_client(cid)
      ).items():
        self.assertAllEqual(value, first[key])
      changed = _arrays(other.create_tf_dataset_for_client(cid))
      key = 'snippets' if 'snippets' in first else 'label'
      self.assertNotEqual(list(changed[key]), list(first[key]), load.__name__)

  def test_cifar100_shaped_and_shakespeare_shaped_populations(self):
    train, test = shaped.cifar100_shaped()
    self.assertLen(train.client_ids, shaped.CIFAR100_CLIENTS)
    client = _arrays(train.create_tf_dataset_for_client(train.client_ids[0]))
    self.assertEqual(
        client['image'].shape, (shaped.CIFAR100_EXAMPLES, 32, 32, 3)
    )
    self.assertEqual(client['image'].dtype, np.uint8)
    self.assertEqual(client['label'].dtype, np.int64)
    self.assertEqual(test.cardinality(), shaped.TEST_EXAMPLES)
    train, test = shaped.shakespeare_shaped()
    self.assertLen(train.client_ids, shaped.SHAKESPEARE_CLIENTS)
    self.assertEqual(test.client_ids, train.client_ids)
    text = _arrays(train.create_tf_dataset_for_client(train.client_ids[0]))
    vocab = set(shakespeare_offline.CHAR_VOCAB)
    for snippet in text['snippets']:
      self.assertTrue(set(snippet.decode()) <= vocab, snippet)
      self.assertTrue(snippet.endswith(b'.'))

  def test_the_classes_can_be_told_apart(self):
    # Accuracy can move: the nearest class template labels most test images
    # (chance is 1 / 62).
    train, test = shaped.emnist_shaped(seed=0, num_clients=5)
    del train
    images = shaped._Images(
        0, 5, np.full(5, 10, np.int32), shaped.EMNIST_CLASSES, (28, 28), 5.0
    )
    data = _arrays(test.take(500))
    templates = (0.5 + 0.35 * images.templates.numpy()).reshape(
        shaped.EMNIST_CLASSES, -1
    )
    pixels = data['pixels'].reshape(len(data['pixels']), -1)
    distances = ((pixels[:, None, :] - templates[None]) ** 2).sum(-1)
    accuracy = np.mean(distances.argmin(1) == data['label'])
    self.assertGreater(accuracy, 0.5)

  def test_bad_num_clients_is_refused_in_one_line(self):
    with self.assertRaisesRegex(ValueError, 'num_clients must be a positive'):
      shaped.emnist_shaped(num_clients=0)

  def test_the_registry_builds_a_task_on_each(self):
    spec = tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=8)
    for name in ('emnist_shaped', 'cifar100_shaped', 'shakespeare_shaped'):
      task = registry.get_task(name, train_client_spec=spec, num_clients=4)
      self.assertLen(task.datasets.train_data.client_ids, 4)
      cid = task.datasets.train_data.client_ids[0]
      batch = next(
          iter(
              task.datasets.train_preprocess_fn(
                  task.datasets.train_data.create_tf_dataset_for_client(cid)
              )
          )
      )
      self.assertLen(batch, 2, name)  # (x, y), as the model takes it.


if __name__ == '__main__':
  tf.test.main()
