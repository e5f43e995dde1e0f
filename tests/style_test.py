"""scripts/test.sh checks the style on every lane and fails on a finding."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_VENV = os.path.join(_ROOT, '.venv')
_CLEAN = '"""A module."""\n\n\ndef f(x):\n  """One line."""\n  return x + 1\n'


@unittest.skipUnless(
    os.path.exists(os.path.join(_VENV, 'bin', 'ruff')),
    'the .venv of scripts/setup.sh',
)
class StyleTest(unittest.TestCase):
  """The lane's style check, run on a copy that holds one module."""

  def _lane(self, code: str) -> subprocess.CompletedProcess:
    tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, tmp)
    os.makedirs(os.path.join(tmp, 'scripts'))
    for name in ('scripts/test.sh', 'pyproject.toml'):
      shutil.copy(os.path.join(_ROOT, name), os.path.join(tmp, name))
    os.symlink(_VENV, os.path.join(tmp, '.venv'))
    with open(os.path.join(tmp, 'module.py'), 'w') as f:
      f.write(code)
    # `--version`: pytest answers without collecting, so only the style runs.
    return subprocess.run(
        ['bash', os.path.join(tmp, 'scripts', 'test.sh'), '--version'],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp,
    )

  def test_a_clean_module_passes(self):
    result = self._lane(_CLEAN)
    self.assertEqual(result.returncode, 0, result.stderr)

  def test_a_long_line_fails_the_lane_naming_ruff(self):
    result = self._lane(_CLEAN + f'Y = {"1 + " * 30}1\n')
    self.assertEqual(result.returncode, 1)
    self.assertIn('E501', result.stdout + result.stderr)
    self.assertIn("ruff's findings are above", result.stderr)

  @unittest.skipUnless(sys.version_info >= (3, 10), 'pyink needs 3.10')
  def test_four_space_indents_fail_the_lane_naming_pyink(self):
    result = self._lane(_CLEAN.replace('\n  ', '\n    '))
    self.assertEqual(result.returncode, 1)
    self.assertIn('pyink would reformat', result.stderr)


if __name__ == '__main__':
  unittest.main()
