"""scripts/api_reference.py builds the API reference of every public name."""

import importlib
import os
import tempfile

import pytest
import tensorflow as tf

from tests import script_runs

pytestmark = pytest.mark.slow

# The packages whose flat names (their `__all__`) users import.
_PACKAGES = ('accounting', 'auditing', 'learning', 'program')


class ApiReferenceScriptTest(tf.test.TestCase):

  def test_every_public_name_has_its_page(self):
    with tempfile.TemporaryDirectory() as tmp:
      result = script_runs.run('api_reference.py', f'--output_dir={tmp}/api')
      self.assertEqual(result.returncode, 0, result.stderr[-2000:])
      self.assertEqual(
          result.stdout.strip(), os.path.join(tmp, 'api', 'index.html')
      )
      self.assertNotIn('Exception ignored', result.stderr)
      self.assertNotIn('Traceback', result.stderr)
      for package in _PACKAGES:
        with self.subTest(package):
          with open(
              os.path.join(tmp, 'api', 'tff_priv', f'{package}.html')
          ) as f:
            page = f.read()
          names = importlib.import_module(f'tff_priv.{package}').__all__
          self.assertNotEmpty(names)
          for name in names:
            self.assertIn(f'id="{name}"', page, f'{package}.{name}')

  def test_unwritable_output_is_one_line(self):
    result = script_runs.run(
        'api_reference.py', '--output_dir=/proc/no/such/dir'
    )
    self.assertEqual(result.returncode, 2)
    self.assertIn('cannot create --output_dir', result.stderr)
    self.assertLen(result.stderr.strip().splitlines(), 1)


if __name__ == '__main__':
  tf.test.main()
