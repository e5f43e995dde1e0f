"""MNIST, Fashion-MNIST and CIFAR-10 read from the Keras data set cache.

The files are the ones `keras.datasets.<name>.load_data()` downloads, in the
folder it keeps them in ($KERAS_HOME/datasets, default ~/.keras/datasets, or
`cache_dir`), parsed here as Keras parses them but without the network: a
missing file raises `DatasetUnavailableError` at once, and `load`'s
`download=True` calls Keras' own `load_data()` under `cache.bounded_download`.
"""

import gzip
import os
import pickle
from typing import Optional

import numpy as np

from tff_priv_tasks import cache

_KERAS_URL = 'https://storage.googleapis.com/tensorflow/tf-keras-datasets/'
_CIFAR10_URL = 'https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz'
FASHION_MNIST_FILES = (
    'train-images-idx3-ubyte.gz',
    'train-labels-idx1-ubyte.gz',
    't10k-images-idx3-ubyte.gz',
    't10k-labels-idx1-ubyte.gz',
)
CIFAR10_BATCHES = tuple(f'data_batch_{i}' for i in range(1, 6)) + (
    'test_batch',
)

Arrays = tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def expected_files(name: str, cache_dir: Optional[str] = None) -> list[str]:
  """The cached files a Keras data set is read from."""
  root = cache.keras_cache_dir(cache_dir)
  if name == 'mnist':
    return [os.path.join(root, 'mnist.npz')]
  if name == 'fashion_mnist':
    return [os.path.join(root, 'fashion-mnist', f) for f in FASHION_MNIST_FILES]
  if name == 'cifar10':
    folder = os.path.join(root, 'cifar-10-batches-py')
    return [os.path.join(folder, b) for b in CIFAR10_BATCHES]
  raise ValueError(
      f"name must be one of ('mnist', 'fashion_mnist', 'cifar10'), got {name!r}"
  )


def _how_to(name: str, cache_dir: Optional[str]) -> str:
  root = cache.keras_cache_dir(cache_dir)
  if name == 'mnist':
    source = f'Get it from {_KERAS_URL}mnist.npz and put it in {root}/.'
  elif name == 'fashion_mnist':
    source = (
        f'Get the four files from {_KERAS_URL}<file> and put them in '
        f'{root}/fashion-mnist/.'
    )
  else:
    source = (
        f'Get {_CIFAR10_URL} and extract it in {root}/ '
        f'(tar xzf cifar-10-python.tar.gz -C {root}), which creates '
        'cifar-10-batches-py/.'
    )
  return cache.how_to(
      source,
      'tff_priv_tasks.get_task or tff_priv_tasks.keras_files.load',
      'downloads them into the default Keras cache (needs network access '
      'and cache_dir unset)',
  )


def _ensure(
    name: str, cache_dir: Optional[str], download: bool, timeout: float
) -> list[str]:
  paths = expected_files(name, cache_dir)
  if all(os.path.exists(p) for p in paths):
    return paths
  how_to = _how_to(name, cache_dir)
  if not download:
    cache.require_files(name, paths, how_to)
  if cache_dir is not None:
    raise ValueError(
        'download=True fills the default Keras cache; leave cache_dir unset '
        '(or set KERAS_HOME) to download'
    )
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  # pylint: enable=g-import-not-at-top

  loader = {
      'mnist': tf.keras.datasets.mnist.load_data,
      'fashion_mnist': tf.keras.datasets.fashion_mnist.load_data,
      'cifar10': tf.keras.datasets.cifar10.load_data,
  }[name]
  url = _CIFAR10_URL if name == 'cifar10' else _KERAS_URL
  cache.bounded_download(name, url, paths, how_to, loader, timeout)
  cache.require_files(name, paths, how_to)
  return paths


def _mnist_family(images: np.ndarray, labels: np.ndarray):
  images = np.asarray(images)
  if images.ndim != 3 or images.shape[1:] != (28, 28):
    raise ValueError(f'expected (n, 28, 28) images, got {images.shape}')
  return (images.astype(np.float32) / 255.0, np.asarray(labels, np.int32))


def _read_idx(path: str, header_bytes: int) -> np.ndarray:
  with gzip.open(path, 'rb') as f:
    return np.frombuffer(f.read(), np.uint8, offset=header_bytes)


def _read_cifar_batch(path: str) -> tuple[np.ndarray, np.ndarray]:
  with open(path, 'rb') as f:
    batch = pickle.load(f, encoding='bytes')
  data = np.asarray(batch[b'data'], np.uint8)
  images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
  return images, np.asarray(batch[b'labels'], np.int64)


def load(
    name: str,
    cache_dir: Optional[str] = None,
    download: bool = False,
    timeout: float = cache.DEFAULT_TIMEOUT_SECONDS,
) -> Arrays:
  """Reads a Keras data set from its cache.

  The files:

  * mnist: `mnist.npz` (arrays x_train, y_train, x_test, y_test);
  * fashion_mnist:
    `fashion-mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz` (IDX
    files: 16-byte header before images, 8-byte header before labels);
  * cifar10: `cifar-10-batches-py/{data_batch_1..5,test_batch}` (the
    extracted python pickle batches: b'data' (n, 3072) uint8 channel-major,
    b'labels').

  Why these files are parsed here rather than by `keras.datasets.*.load_data`:
  Keras re-checks a SHA-256 of the whole archive on every call and downloads
  again (with no timeout) when the file is missing or differs, and CIFAR-10
  needs the tarball even when the extracted folder is there. The parsing below
  is the same as Keras' (keras/src/datasets/{mnist,fashion_mnist,cifar10}.py),
  without the network. `download=True` calls Keras' own `load_data()` (bounded
  by `cache.bounded_download`) to fill Keras' default cache, then reads it.

  Args:
    name: 'mnist', 'fashion_mnist' or 'cifar10'.
    cache_dir: the folder holding the files (default: Keras' datasets folder).
    download: when files are missing, download them with Keras (bounded by
      `timeout`) instead of failing at once.
    timeout: seconds, for `download=True`.

  Returns:
    ((x_train, y_train), (x_test, y_test)): images float32 in [0, 1]
    (n, 28, 28) with int32 labels for the MNIST family (the `pixels`/`label`
    layout of TFF's EMNIST), uint8 (n, 32, 32, 3) with int64 labels for
    CIFAR-10 (the `image`/`label` layout of TFF's CIFAR-100).

  Raises:
    DatasetUnavailableError: files missing (and not downloadable).
  """
  paths = _ensure(name, cache_dir, download, timeout)
  if name == 'mnist':
    with np.load(paths[0], allow_pickle=False) as f:
      return (
          _mnist_family(f['x_train'], f['y_train']),
          _mnist_family(f['x_test'], f['y_test']),
      )
  if name == 'fashion_mnist':
    x_train, y_train, x_test, y_test = (
        _read_idx(p, 16 if 'images' in p else 8) for p in paths
    )
    return (
        _mnist_family(x_train.reshape(len(y_train), 28, 28), y_train),
        _mnist_family(x_test.reshape(len(y_test), 28, 28), y_test),
    )
  train = [_read_cifar_batch(p) for p in paths[:-1]]
  x_test, y_test = _read_cifar_batch(paths[-1])
  return (
      (
          np.concatenate([x for x, _ in train]),
          np.concatenate([y for _, y in train]),
      ),
      (x_test, y_test),
  )
