"""Where cached data sets live, and the one error raised when one is missing.

TFF's `tff.simulation.datasets.*.load_data` and `keras.datasets.*.load_data`
download on a cache miss, with no timeout: on a machine without network a
miss hangs or fails deep inside urllib. The tasks never let that happen by
accident: `require_files` checks the cached files first and raises
`DatasetUnavailableError` at once, and a download happens only when the
caller asks for it (`download=True`), through `bounded_download`.
"""

from collections.abc import Callable, Sequence
import os
import socket
import threading
import time
from typing import Optional, TypeVar
import urllib.parse

DEFAULT_TIMEOUT_SECONDS = 10.0
_T = TypeVar('_T')


class DatasetUnavailableError(FileNotFoundError):
  """A requested data set is neither cached nor downloadable.

  Attributes:
    dataset: the task/data set name.
    paths: the files that were expected.
  """

  def __init__(self, dataset: str, paths: Sequence[str], how_to: str):
    self.dataset = dataset
    self.paths = tuple(paths)
    listed = '\n'.join(f'  {p}' for p in self.paths)
    super().__init__(
        f"data set '{dataset}' is not available on this machine.\n"
        f'Expected file(s):\n{listed}\n{how_to}'
    )

  def __str__(self):
    return self.args[0]


def tff_cache_dir(cache_dir: Optional[str] = None) -> str:
  """TFF's data set cache: `cache_dir`, else ~/.tff (as in TFF's download)."""
  if cache_dir is None:
    return os.path.join(os.path.expanduser('~'), '.tff')
  return os.path.abspath(os.path.expanduser(cache_dir))


def keras_cache_dir(cache_dir: Optional[str] = None) -> str:
  """Keras' data set folder: `cache_dir`, else $KERAS_HOME/datasets.

  $KERAS_HOME defaults to ~/.keras, as in `keras.utils.get_file`.
  """
  if cache_dir is not None:
    return os.path.abspath(os.path.expanduser(cache_dir))
  keras_home = os.environ.get(
      'KERAS_HOME', os.path.join(os.path.expanduser('~'), '.keras')
  )
  return os.path.join(keras_home, 'datasets')


def how_to(source: str, python_call: str, download_note: str) -> str:
  """The instructions of a missing data set's error, for both kinds of user.

  Args:
    source: where the file(s) come from and where to put them.
    python_call: the Python call that reads them (e.g.
      "tff_priv_tasks.get_task(...)").
    download_note: what `download=True` does there.

  Returns:
    The instructions: the source, then what a user of scripts/train.py can
    do (it has no download flag: place the files, or pass --cache_dir), then
    the Python options (cache_dir=DIR, download=True), each labelled.
  """
  return (
      f'{source}\n'
      'With scripts/train.py (it does not download): put the file(s) there, '
      'or in the same layout in a folder DIR and pass --cache_dir=DIR.\n'
      f'From Python ({python_call}): cache_dir=DIR reads them from DIR; '
      f'download=True {download_note}.'
  )


def require_files(dataset: str, paths: Sequence[str], how_to: str) -> None:
  """Raises `DatasetUnavailableError` unless every path exists (no network).

  At once, with no network attempt, when a file is missing; the message names
  every expected path, where to put it and where it comes from.
  """
  missing = [p for p in paths if not os.path.exists(p)]
  if missing:
    raise DatasetUnavailableError(dataset, missing, how_to)


def reachable(url: str, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> bool:
  """Whether a TCP connection to the URL's host opens within `timeout` seconds.

  The connection (name resolution included) runs in a daemon thread that is
  abandoned at the deadline: socket timeouts do not bound `getaddrinfo`.

  Args:
    url: an http(s) URL.
    timeout: seconds.

  Returns:
    True if the connection opened in time.
  """
  parsed = urllib.parse.urlparse(url)
  port = parsed.port or (443 if parsed.scheme == 'https' else 80)
  result = []

  def connect():
    try:
      with socket.create_connection((parsed.hostname, port), timeout=timeout):
        result.append(True)
    except OSError:
      result.append(False)

  thread = threading.Thread(target=connect, daemon=True)
  thread.start()
  thread.join(timeout)
  return bool(result and result[0])


def bounded_download(
    dataset: str,
    url: str,
    paths: Sequence[str],
    how_to: str,
    fetch: Callable[[], _T],
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> _T:
  """Runs `fetch()` (a library download) with a deadline on the network.

  The host is probed first with a deadline (DNS included, which socket
  timeouts do not cover) and every socket operation of the download gets the
  same timeout, so a dead network fails in about `timeout` seconds with the
  same error instead of a traceback from deep inside the download.

  Args:
    dataset: name for the error message.
    url: the URL `fetch` downloads from (its host is probed first).
    paths: the files `fetch` writes; the ones that did not exist before are
      removed if it fails, so a partial file is never taken for a cached one.
    how_to: the error's instructions.
    fetch: the download (e.g. TFF's or Keras' load_data).
    timeout: seconds for the probe and for each socket operation.

  Returns:
    What `fetch` returns.

  Raises:
    DatasetUnavailableError: the host is unreachable or the download failed.
  """
  start = time.monotonic()
  if not reachable(url, timeout):
    raise DatasetUnavailableError(
        dataset,
        paths,
        f'{how_to}\n(download=True: {url} was not reachable within '
        f'{timeout:g} s)',
    )
  existed = {p: os.path.exists(p) for p in paths}
  previous = socket.getdefaulttimeout()
  socket.setdefaulttimeout(timeout)
  try:
    return fetch()
  except Exception as e:  # pylint: disable=broad-except
    for p, was_there in existed.items():
      if not was_there and os.path.isfile(p):
        os.remove(p)
    message = (
        f'{how_to}\n(download=True: downloading {url} failed after '
        f'{time.monotonic() - start:.1f} s: {type(e).__name__}: {e})'
    )
    raise DatasetUnavailableError(dataset, paths, message) from None
  finally:
    socket.setdefaulttimeout(previous)
