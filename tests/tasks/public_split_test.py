"""Tests of tasks.public_split: the public set held out of a task's clients."""

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

import tff_priv_tasks as tasks


def _digits(num_epochs=1, batch_size=3, max_elements=None):
  spec = tff.simulation.baselines.ClientSpec(
      num_epochs=num_epochs, batch_size=batch_size, max_elements=max_elements
  )
  return tasks.get_task('digits', train_client_spec=spec, seed=0)


def _labels(dataset):
  """The labels of a batched dataset: raw (dict) or preprocessed (x, y)."""
  return np.concatenate(
      [np.asarray(b['label'] if isinstance(b, dict) else b[1]) for b in dataset]
  )


def _num_examples(dataset):
  return len(_labels(dataset))


class HoldOutPublicClientsTest(tf.test.TestCase):

  def test_first_clients_are_public_the_rest_private(self):
    task = _digits()
    ids = list(task.datasets.train_data.client_ids)
    public, private = tasks.hold_out_public_clients(task, 3)
    self.assertEqual(private, ids[3:])
    # D_pub holds exactly the public clients' examples (as multisets of
    # labels), none of a private client's.
    train = task.datasets.train_data
    expected = np.concatenate(
        [
            _labels(train.create_tf_dataset_for_client(c).batch(100))
            for c in ids[:3]
        ]
    )
    self.assertAllEqual(np.sort(_labels(public)), np.sort(expected))

  def test_each_client_is_preprocessed_as_a_client(self):
    # The task's per-client limit (max_elements) and local epochs apply to
    # every public client separately: D_pub has what the 3 clients would
    # train on, which is more than one preprocessing of their union keeps.
    task = _digits(num_epochs=2, batch_size=3, max_elements=4)
    train = task.datasets.train_data
    preprocess = task.datasets.train_preprocess_fn
    ids = list(train.client_ids)[:3]
    public, _ = tasks.hold_out_public_clients(task, 3)
    per_client = [
        _num_examples(preprocess(train.create_tf_dataset_for_client(c)))
        for c in ids
    ]
    union = train.create_tf_dataset_for_client(ids[0])
    for c in ids[1:]:
      union = union.concatenate(train.create_tf_dataset_for_client(c))
    self.assertEqual(_num_examples(public), sum(per_client))
    self.assertLess(_num_examples(preprocess(union)), sum(per_client))

  def test_bad_num_public(self):
    task = _digits()
    with self.assertRaisesRegex(ValueError, 'num_public must be >= 1'):
      tasks.hold_out_public_clients(task, 0)
    with self.assertRaisesRegex(
        ValueError, r'public_clients \(10\) must leave'
    ):
      tasks.hold_out_public_clients(task, 10)
    for bad in (True, 2.0, '2'):
      with self.assertRaisesRegex(TypeError, 'num_public'):
        tasks.hold_out_public_clients(task, bad)


if __name__ == '__main__':
  tf.test.main()
