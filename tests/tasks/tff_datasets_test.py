"""Tests for tasks.tff_datasets: TFF's real loaders on tiny cache files."""

import socket
import tempfile
from unittest import mock

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tests.tasks import fake_caches
from tff_priv_tasks import cache
from tff_priv_tasks import tff_datasets


def _elements(client_data, client_id):
  dataset = client_data.create_tf_dataset_for_client(client_id)
  return list(dataset.as_numpy_iterator())


class TffDatasetsTest(tf.test.TestCase, parameterized.TestCase):

  def _new_dir(self):
    return tempfile.mkdtemp(dir=self.get_temp_dir())

  @parameterized.parameters(True, False)
  def test_emnist_reads_the_written_examples(self, only_digits):
    root = self._new_dir()
    splits = fake_caches.write_emnist(root)
    train, test = tff_datasets.load_emnist(only_digits, cache_dir=root)
    prefix = 'digits_only' if only_digits else 'all'
    expected = splits[f'{prefix}_train']
    self.assertCountEqual(train.client_ids, list(expected))
    self.assertCountEqual(test.client_ids, list(splits[f'{prefix}_test']))
    got = _elements(train, 'f0001_00')
    self.assertLen(got, 5)
    self.assertAllClose(
        np.stack([e['pixels'] for e in got]), expected['f0001_00']['pixels']
    )
    self.assertAllEqual(
        [e['label'] for e in got], expected['f0001_00']['label']
    )
    self.assertEqual(got[0]['label'].dtype, np.int32)

  def test_shakespeare_reads_the_written_snippets(self):
    root = self._new_dir()
    train_text, test_text = fake_caches.write_shakespeare(root)
    train, test = tff_datasets.load_shakespeare(cache_dir=root)
    for data, text in ((train, train_text), (test, test_text)):
      self.assertCountEqual(data.client_ids, list(text))
      for cid, lines in text.items():
        self.assertEqual(
            [e['snippets'].decode() for e in _elements(data, cid)], lines
        )

  def test_cifar100_reads_the_written_images(self):
    root = self._new_dir()
    splits = fake_caches.write_cifar100(root)
    train, test = tff_datasets.load_cifar100(cache_dir=root)
    self.assertCountEqual(train.client_ids, ['0', '1'])
    self.assertCountEqual(test.client_ids, ['0'])
    got = _elements(train, '1')
    self.assertAllEqual(
        np.stack([e['image'] for e in got]), splits['train']['1']['image']
    )
    self.assertAllEqual(
        [e['label'] for e in got], splits['train']['1']['label']
    )
    self.assertEqual(got[0]['image'].dtype, np.uint8)

  @parameterized.parameters(
      ('emnist', lambda d: tff_datasets.load_emnist(True, cache_dir=d)),
      ('shakespeare', lambda d: tff_datasets.load_shakespeare(cache_dir=d)),
      ('cifar100', lambda d: tff_datasets.load_cifar100(cache_dir=d)),
  )
  def test_missing_file_fails_fast_without_network(self, name, load):
    root = self._new_dir()
    # Fails fast: no network is tried (a connect would raise).
    with mock.patch.object(
        socket.socket, 'connect', side_effect=AssertionError('network used')
    ):
      with self.assertRaises(cache.DatasetUnavailableError) as raised:
        load(root)
    expected = tff_datasets.expected_file(name, root)
    self.assertEqual(raised.exception.paths, (expected,))
    self.assertIn(expected, str(raised.exception))
    self.assertIn('.sqlite.lzma', str(raised.exception))
    message = str(raised.exception)
    # scripts/train.py has no download flag: its line offers the file's place
    # and --cache_dir; download=True only on the line for Python callers.
    (train_py,) = [l for l in message.splitlines() if 'scripts/train.py' in l]
    self.assertIn('--cache_dir=DIR', train_py)
    (python,) = [l for l in message.splitlines() if 'download=True' in l]
    self.assertStartsWith(python, 'From Python (tff_priv_tasks.get_task')

  def test_unknown_name(self):
    with self.assertRaisesRegex(ValueError, 'name must be one of'):
      tff_datasets.expected_file('stackoverflow')


if __name__ == '__main__':
  tf.test.main()
