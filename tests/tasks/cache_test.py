"""Tests for tasks.cache: the missing-data error and bounded downloads."""

import os
import socket
from unittest import mock

import tensorflow as tf

from tff_priv_tasks import cache


def _closed_loopback_url():
  """An http URL on 127.0.0.1 whose port has no listener (refused at once)."""
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
  return f'http://127.0.0.1:{port}/data.lzma'


class ErrorTest(tf.test.TestCase):

  def test_message_names_files_and_instructions(self):
    error = cache.DatasetUnavailableError(
        'emnist', ['/x/emnist_all.sqlite'], 'Put it in /x/.'
    )
    self.assertIsInstance(error, FileNotFoundError)
    self.assertIn("'emnist'", str(error))
    self.assertIn('/x/emnist_all.sqlite', str(error))
    self.assertIn('Put it in /x/.', str(error))
    self.assertEqual(error.paths, ('/x/emnist_all.sqlite',))
    self.assertEqual(error.dataset, 'emnist')

  def test_how_to_labels_what_train_py_and_python_users_can_do(self):
    lines = cache.how_to(
        'Put f in /x/.', 'tasks.get_task', 'downloads f'
    ).splitlines()
    self.assertEqual(lines[0], 'Put f in /x/.')
    # scripts/train.py has no download flag: its line offers none.
    (train_py,) = [l for l in lines if 'scripts/train.py' in l]
    self.assertIn('--cache_dir=DIR', train_py)
    self.assertNotIn('download=True', train_py)
    # download=True is offered only on the line labelled for Python callers.
    (python,) = [l for l in lines if 'download=True' in l]
    self.assertStartsWith(python, 'From Python (tasks.get_task)')
    self.assertIn('download=True downloads f', python)

  def test_require_files_lists_only_missing_files(self):
    root = self.get_temp_dir()
    present = os.path.join(root, 'present')
    open(present, 'w').close()
    missing = os.path.join(root, 'missing')
    cache.require_files('x', [present], 'how')  # No error.
    with self.assertRaises(cache.DatasetUnavailableError) as raised:
      cache.require_files('x', [present, missing], 'how')
    self.assertEqual(raised.exception.paths, (missing,))


class CacheDirTest(tf.test.TestCase):

  def test_tff_default_is_home_dot_tff(self):
    self.assertEqual(
        cache.tff_cache_dir(), os.path.join(os.path.expanduser('~'), '.tff')
    )
    self.assertEqual(cache.tff_cache_dir('/a/b'), '/a/b')

  def test_keras_default_follows_keras_home(self):
    with mock.patch.dict(os.environ, {'KERAS_HOME': '/k'}):
      self.assertEqual(cache.keras_cache_dir(), '/k/datasets')
    with mock.patch.dict(os.environ, clear=True):
      os.environ['HOME'] = '/home/u'
      self.assertEqual(cache.keras_cache_dir(), '/home/u/.keras/datasets')
    self.assertEqual(cache.keras_cache_dir('/c'), '/c')


class BoundedDownloadTest(tf.test.TestCase):
  """Network traffic in these tests goes to the loopback interface only."""

  def test_reachable_on_loopback(self):
    with socket.socket() as server:
      server.bind(('127.0.0.1', 0))
      server.listen(1)
      port = server.getsockname()[1]
      self.assertTrue(cache.reachable(f'http://127.0.0.1:{port}/', 5.0))
    # A closed port refuses at once (no wait for the 5 s timeout; not timed
    # here: a wall-clock bound fails under load).
    self.assertFalse(cache.reachable(_closed_loopback_url(), 5.0))

  def test_unreachable_host_fails_without_fetching(self):
    fetch = mock.Mock()
    with self.assertRaises(cache.DatasetUnavailableError) as raised:
      cache.bounded_download(
          'x', _closed_loopback_url(), ['/nowhere/f'], 'how', fetch, 2.0
      )
    fetch.assert_not_called()
    self.assertIn('not reachable', str(raised.exception))
    self.assertIn('/nowhere/f', str(raised.exception))

  def test_failed_fetch_removes_partial_file_keeps_old_ones(self):
    root = self.get_temp_dir()
    partial, old = os.path.join(root, 'partial'), os.path.join(root, 'old')
    open(old, 'w').close()

    def fetch():
      with open(partial, 'w') as f:
        f.write('half')
      raise OSError('connection reset')

    with mock.patch.object(cache, 'reachable', return_value=True):
      with self.assertRaises(cache.DatasetUnavailableError) as raised:
        cache.bounded_download('x', 'http://h/', [partial, old], 'how', fetch)
    self.assertFalse(os.path.exists(partial))
    self.assertTrue(os.path.exists(old))
    self.assertIn('connection reset', str(raised.exception))
    # One error, not a chain ending deep inside the download.
    self.assertTrue(raised.exception.__suppress_context__)
    self.assertIsNone(raised.exception.__cause__)

  def test_fetch_runs_with_socket_timeout_which_is_restored(self):
    before = socket.getdefaulttimeout()
    seen = []
    with mock.patch.object(cache, 'reachable', return_value=True):
      result = cache.bounded_download(
          'x',
          'http://h/',
          [],
          'how',
          lambda: seen.append(socket.getdefaulttimeout()) or 42,
          3.0,
      )
    self.assertEqual(result, 42)
    self.assertEqual(seen, [3.0])
    self.assertEqual(socket.getdefaulttimeout(), before)


if __name__ == '__main__':
  tf.test.main()
