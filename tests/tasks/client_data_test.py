"""Tests for tasks.client_data."""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv_tasks import client_data


def _data():
  rng = np.random.default_rng(0)
  return {
      f'c{i}': collections.OrderedDict(
          label=rng.integers(0, 5, n).astype(np.int32),
          pixels=rng.random((n, 3, 3)).astype(np.float32),
      )
      for i, n in enumerate((3, 1, 4, 2))
  }


def _as_list(dataset):
  return [
      (e['label'], e['pixels'].tolist()) for e in dataset.as_numpy_iterator()
  ]


class InMemoryClientDataTest(tf.test.TestCase):

  def test_all_clients_dataset_equals_tffs(self):
    ours = client_data.InMemoryClientData(_data())
    tffs = tff.simulation.datasets.TestClientData(_data())
    for seed in (0, 1, 2):
      self.assertEqual(
          _as_list(ours.create_tf_dataset_from_all_clients(seed)),
          _as_list(tffs.create_tf_dataset_from_all_clients(seed)),
      )
    self.assertEqual(
        ours.create_tf_dataset_from_all_clients().element_spec,
        tffs.create_tf_dataset_from_all_clients().element_spec,
    )

  def test_per_client_dataset_is_tffs(self):
    ours = client_data.InMemoryClientData(_data())
    tffs = tff.simulation.datasets.TestClientData(_data())
    self.assertEqual(ours.client_ids, tffs.client_ids)
    self.assertEqual(
        _as_list(ours.create_tf_dataset_for_client('c2')),
        _as_list(tffs.create_tf_dataset_for_client('c2')),
    )


class FromPartitionTest(tf.test.TestCase):

  def test_clients_hold_their_indices(self):
    features = collections.OrderedDict(
        label=np.arange(10, dtype=np.int32),
        pixels=np.arange(40, dtype=np.float32).reshape(10, 2, 2),
    )
    parts = [np.array([3, 1]), np.array([0, 2, 4]), np.arange(5, 10)]
    data = client_data.from_partition(features, parts)
    self.assertEqual(
        data.client_ids, ['client_0000', 'client_0001', 'client_0002']
    )
    got = list(
        data.create_tf_dataset_for_client('client_0000').as_numpy_iterator()
    )
    self.assertEqual([e['label'] for e in got], [3, 1])
    self.assertAllEqual(got[1]['pixels'], features['pixels'][1])
    self.assertEqual(list(data.element_type_structure), ['label', 'pixels'])

  def test_empty_part_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'client 1'):
      client_data.from_partition(
          {'label': np.arange(3)}, [np.array([0]), np.array([], np.int64)]
      )


if __name__ == '__main__':
  tf.test.main()
