"""The public API: flat package names, and every tff_priv name the docs use."""

import glob
import importlib
import os
import re
import subprocess
import sys

from absl.testing import absltest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGES = ('accounting', 'auditing', 'learning', 'program', 'aggregators')


def _docs():
  paths = [os.path.join(_ROOT, 'README.md')] + sorted(
      glob.glob(os.path.join(_ROOT, 'docs', '*.md'))
  )
  for path in paths:
    with open(path) as f:
      yield os.path.relpath(path, _ROOT), f.read()


def _resolve(dotted: str):
  """The object `dotted` names: the longest importable module, then getattr."""
  parts = dotted.split('.')
  for i in range(len(parts), 0, -1):
    try:
      value = importlib.import_module('.'.join(parts[:i]))
    except ImportError:
      continue
    for attribute in parts[i:]:
      value = getattr(value, attribute)
    return value
  raise ImportError(dotted)


class PublicApiTest(absltest.TestCase):

  def test_import_tff_priv_imports_no_tensorflow(self):
    code = (
        'import sys, tff_priv, tff_priv.accounting, tff_priv.program; '
        'from tff_priv.accounting import PrivacyLedger; '
        "print('tensorflow' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, '-c', code],
        capture_output=True,
        text=True,
        cwd=_ROOT,
        env={**os.environ, 'PYTHONPATH': _ROOT},
        check=True,
    )
    self.assertEqual(result.stdout.strip(), 'False')

  def test_every_exported_name_resolves(self):
    for package in _PACKAGES:
      module = importlib.import_module(f'tff_priv.{package}')
      names = getattr(module, '__all__', None) or [
          n for n in vars(module) if not n.startswith('_')
      ]
      self.assertNotEmpty(names, package)
      for name in names:
        self.assertIsNotNone(getattr(module, name), f'{package}.{name}')
      with self.assertRaisesRegex(AttributeError, 'no attribute'):
        _ = module.no_such_name

  def test_every_name_the_readme_and_docs_import_exists(self):
    # `from tff_priv.x import a, b as c` lines in code blocks, and every
    # `tff_priv.x.y` path in backticks.
    names = []
    for doc, text in _docs():
      for module, imported in re.findall(
          r'^from (tff_priv[\w.]*) import ([\w, ]+(?: as \w+)?)$',
          text,
          re.M,
      ):
        for name in imported.split(','):
          names.append((doc, f"{module}.{name.strip().split(' as ')[0]}"))
      names += [(doc, d) for d in re.findall(r'`(tff_priv(?:\.\w+)+)', text)]
    missing = []
    for doc, dotted in names:
      try:
        _resolve(dotted)
      except (ImportError, AttributeError) as e:
        missing.append(f'{doc}: {dotted} ({type(e).__name__}: {e})')
    self.assertEqual(missing, [])
    self.assertGreater(len(names), 50)


if __name__ == '__main__':
  absltest.main()
