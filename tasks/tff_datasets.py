"""TFF's federated data sets (EMNIST, Shakespeare, CIFAR-100), cache first.

These are TFF's own loaders, `tff.simulation.datasets.{emnist, shakespeare,
cifar100}.load_data`, with their natural client splits (EMNIST: writers;
Shakespeare: speaking roles; CIFAR-100: TFF's Pachinko allocation over 500
train / 100 test clients). TFF reads the decompressed SQLite file
`<cache_dir>/<name>.sqlite` (default cache_dir ~/.tff) and downloads
`<name>.sqlite.lzma` on a miss with no timeout. Here the file is checked
first: missing means `DatasetUnavailableError` at once, unless
`download=True`, which runs TFF's download under `cache.bounded_download`.
"""

import os
from typing import Optional

from tff_priv_tasks import cache

_ORIGIN = 'https://storage.googleapis.com/tff-datasets-public/'
# data set -> SQLite file name in TFF's cache (the origin's name minus .lzma).
SQLITE_FILES = {
    'emnist': 'emnist_all.sqlite',
    'shakespeare': 'shakespeare.sqlite',
    'cifar100': 'cifar100.sqlite',
}


def expected_file(name: str, cache_dir: Optional[str] = None) -> str:
  """The SQLite file TFF's `load_data` reads for data set `name`."""
  if name not in SQLITE_FILES:
    raise ValueError(f'name must be one of {tuple(SQLITE_FILES)}, got {name!r}')
  return os.path.join(cache.tff_cache_dir(cache_dir), SQLITE_FILES[name])


def _load(name, cache_dir, download, timeout, load_data):
  path = expected_file(name, cache_dir)
  root = os.path.dirname(path)
  url = _ORIGIN + SQLITE_FILES[name] + '.lzma'
  how_to = cache.how_to(
      f'Get {url}, decompress it (xz -d {SQLITE_FILES[name]}.lzma) and put '
      f'{SQLITE_FILES[name]} in {root}/.',
      'tff_priv_tasks.get_task or tff_priv_tasks.tff_datasets.load_*',
      f'downloads {SQLITE_FILES[name]} (needs network access)',
  )
  if os.path.exists(path):
    return load_data(cache_dir=root)
  if not download:
    cache.require_files(name, [path], how_to)
  return cache.bounded_download(
      name, url, [path], how_to, lambda: load_data(cache_dir=root), timeout
  )


def load_emnist(
    only_digits: bool = True,
    cache_dir: Optional[str] = None,
    download: bool = False,
    timeout: float = cache.DEFAULT_TIMEOUT_SECONDS,
):
  """`tff.simulation.datasets.emnist.load_data`, failing fast on a cache miss.

  Args:
    only_digits: 10 digit classes (3,383 writers) or all 62 (3,400 writers).
    cache_dir: folder of `emnist_all.sqlite` (default ~/.tff).
    download: download on a miss (bounded by `timeout`) instead of failing.
    timeout: seconds.

  Returns:
    (train, test) `tff.simulation.datasets.ClientData`, elements
    OrderedDict(label=int32 [], pixels=float32 [28, 28]).
  """
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  return _load(
      'emnist',
      cache_dir,
      download,
      timeout,
      lambda cache_dir: tff.simulation.datasets.emnist.load_data(
          only_digits=only_digits, cache_dir=cache_dir
      ),
  )


def load_shakespeare(
    cache_dir: Optional[str] = None,
    download: bool = False,
    timeout: float = cache.DEFAULT_TIMEOUT_SECONDS,
):
  """`tff.simulation.datasets.shakespeare.load_data`, failing fast on a miss.

  Returns (train, test) ClientData of OrderedDict(snippets=string []), one
  client per (play, role), 715 clients.
  """
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  return _load(
      'shakespeare',
      cache_dir,
      download,
      timeout,
      tff.simulation.datasets.shakespeare.load_data,
  )


def load_cifar100(
    cache_dir: Optional[str] = None,
    download: bool = False,
    timeout: float = cache.DEFAULT_TIMEOUT_SECONDS,
):
  """`tff.simulation.datasets.cifar100.load_data`, failing fast on a miss.

  Returns (train, test) ClientData of OrderedDict(coarse_label=int64 [],
  image=uint8 [32, 32, 3], label=int64 []); 500 train, 100 test clients.
  """
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  return _load(
      'cifar100',
      cache_dir,
      download,
      timeout,
      tff.simulation.datasets.cifar100.load_data,
  )
