"""Tiny data set files in the exact formats of the Keras and TFF caches."""

import collections
import gzip
import os
import pickle
import sqlite3
import struct
import tempfile

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv_tasks import keras_files
from tff_priv_tasks import tff_datasets

_RNG = np.random.default_rng(0)

# Tests write them into a temporary cache folder so that the real loading code
# (TFF's `load_data`, the Keras-cache readers) runs without network access.
# Keras: `mnist.npz`, `fashion-mnist/*-ubyte.gz` (IDX), the pickled
# `cifar-10-batches-py/*` batches. TFF: `<name>.sqlite` (`write_tff_sqlite`).


def write_mnist(root, n_train=30, n_test=10):
  """mnist.npz as Keras ships it: uint8 images, uint8 labels."""
  arrays = dict(
      x_train=_RNG.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
      y_train=(np.arange(n_train) % 10).astype(np.uint8),
      x_test=_RNG.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
      y_test=(np.arange(n_test) % 10).astype(np.uint8),
  )
  os.makedirs(root, exist_ok=True)
  np.savez(os.path.join(root, 'mnist.npz'), **arrays)
  return arrays


def _write_idx(path, array):
  """An IDX file (LeCun's format): magic, dimensions (big-endian), bytes."""
  magic = 0x800 + array.ndim  # 0x08 = unsigned byte.
  header = struct.pack('>I', magic) + b''.join(
      struct.pack('>I', d) for d in array.shape
  )
  with gzip.open(path, 'wb') as f:
    f.write(header + array.astype(np.uint8).tobytes())


def write_fashion_mnist(root, n_train=20, n_test=10):
  """fashion-mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz."""
  folder = os.path.join(root, 'fashion-mnist')
  os.makedirs(folder, exist_ok=True)
  arrays = dict(
      x_train=_RNG.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
      y_train=(np.arange(n_train) % 10).astype(np.uint8),
      x_test=_RNG.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
      y_test=(np.arange(n_test) % 10).astype(np.uint8),
  )
  for name, key in (
      ('train-images-idx3-ubyte.gz', 'x_train'),
      ('train-labels-idx1-ubyte.gz', 'y_train'),
      ('t10k-images-idx3-ubyte.gz', 'x_test'),
      ('t10k-labels-idx1-ubyte.gz', 'y_test'),
  ):
    _write_idx(os.path.join(folder, name), arrays[key])
  return arrays


def write_cifar10(root, per_batch=4):
  """cifar-10-batches-py: pickled dicts with bytes keys, rows channel-major."""
  folder = os.path.join(root, 'cifar-10-batches-py')
  os.makedirs(folder, exist_ok=True)
  batches = {}
  for name in keras_files.CIFAR10_BATCHES:
    data = _RNG.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
    labels = [int(v) for v in _RNG.integers(0, 10, per_batch)]
    batches[name] = (data, labels)
    with open(os.path.join(folder, name), 'wb') as f:
      pickle.dump(
          {
              b'batch_label': name.encode(),
              b'labels': labels,
              b'data': data,
              b'filenames': [b'x.png'] * per_batch,
          },
          f,
      )
  return batches


def write_tff_sqlite(path, splits):
  """Writes `splits` {split_name: {client_id: OrderedDict of arrays}}.

  Uses TFF's own serializer once per split, then merges the rows of every
  split into the SQLite file at `path`.

  TFF: `<name>.sqlite`, written by TFF's own
  `tff.simulation.datasets.save_to_sql_client_data` (tables `examples` and
  `client_metadata`, serialized `tf.train.Example`s), one split per call,
  merged into one file so that a client can be in the train and test splits
  as in TFF's files.
  """
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with sqlite3.connect(path) as out:
    first = True
    for split, clients in splits.items():
      with tempfile.TemporaryDirectory() as scratch:
        _merge_split(
            out, os.path.join(scratch, 'part.sqlite'), split, clients, first
        )
      first = False


def _merge_split(out, part, split, clients, first):
  """Writes one split with TFF's serializer to `part` and appends its rows."""
  tff.simulation.datasets.save_to_sql_client_data(
      list(clients),
      lambda cid: tf.data.Dataset.from_tensor_slices(clients[cid]),
      part,
      split_names_by_client_id=dict.fromkeys(clients, split),
  )
  out.execute('ATTACH DATABASE ? AS part', (part,))
  if first:
    for table in ('examples', 'client_metadata'):
      sql = out.execute(
          'SELECT sql FROM part.sqlite_master WHERE name = ?', (table,)
      ).fetchone()[0]
      out.execute(sql)
  out.execute('INSERT INTO examples SELECT * FROM part.examples')
  out.execute('INSERT INTO client_metadata SELECT * FROM part.client_metadata')
  out.commit()
  out.execute('DETACH DATABASE part')


def emnist_client(n, seed):
  rng = np.random.default_rng(seed)
  return collections.OrderedDict(
      label=rng.integers(0, 10, n).astype(np.int32),
      pixels=rng.random((n, 28, 28)).astype(np.float32),
  )


def write_emnist(root):
  """emnist_all.sqlite with 3 writers in the digits-only and all splits."""
  splits = {}
  for i, split in enumerate(
      ('digits_only_train', 'digits_only_test', 'all_train', 'all_test')
  ):
    n = 5 if split.endswith('train') else 2
    splits[split] = {
        f'f{w:04d}_00': emnist_client(n, seed=10 * i + w) for w in range(3)
    }
  write_tff_sqlite(
      os.path.join(root, tff_datasets.SQLITE_FILES['emnist']), splits
  )
  return splits


def write_shakespeare(root):
  """shakespeare.sqlite with two roles, snippets as in TFF's data."""
  train = {
      'THE_TEMPEST_MIRANDA': [
          'If by your art, my dearest father, you have',
          'Put the wild waters in this roar, allay them.',
      ],
      'THE_TEMPEST_PROSPERO': ['Be collected:', 'No more amazement.'],
  }
  test = {
      'THE_TEMPEST_MIRANDA': ['O, woe the day!'],
      'THE_TEMPEST_PROSPERO': ['No harm.'],
  }
  as_arrays = lambda d: {
      cid: collections.OrderedDict(
          snippets=np.array([s.encode() for s in lines], dtype=object)
      )
      for cid, lines in d.items()
  }
  write_tff_sqlite(
      os.path.join(root, tff_datasets.SQLITE_FILES['shakespeare']),
      {'train': as_arrays(train), 'test': as_arrays(test)},
  )
  return train, test


def write_cifar100(root):
  """cifar100.sqlite with 2 train and 1 test client."""

  def client(n, seed):
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 100, n).astype(np.int64)
    return collections.OrderedDict(
        coarse_label=label // 5,
        image=rng.integers(0, 256, (n, 32, 32, 3)).astype(np.uint8),
        label=label,
    )

  splits = {
      'train': {'0': client(4, 1), '1': client(3, 2)},
      'test': {'0': client(2, 3)},
  }
  write_tff_sqlite(
      os.path.join(root, tff_datasets.SQLITE_FILES['cifar100']), splits
  )
  return splits
