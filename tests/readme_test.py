"""The README's quickstart runs as printed and prints what the README says."""

import os
import re
import subprocess
import sys
import tempfile
import unittest

import pytest

pytestmark = pytest.mark.slow

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme():
  with open(os.path.join(_ROOT, 'README.md')) as f:
    return f.read()


class ReadmeTest(unittest.TestCase):

  def test_quickstart_runs_and_prints_what_the_readme_says(self):
    text = _readme()
    section = text[text.index('## Quickstart'):]
    code = re.search(r'```python\n(.*?)```', section, re.S).group(1)
    claimed = re.search(r'It prints `([^`]+)`', section).group(1)
    with tempfile.TemporaryDirectory() as tmp:
      path = os.path.join(tmp, 'quickstart.py')
      with open(path, 'w') as f:
        f.write(code)
      result = subprocess.run(
          [sys.executable, path], cwd=tmp, capture_output=True, text=True,
          timeout=600, env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '3'},
      )
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertEqual(result.stdout.strip().splitlines()[-1], claimed)

  def test_program_snippet_runs_and_writes_its_runs(self):
    text = _readme()
    section = text[text.index('The same program from Python'):]
    code = re.search(r'```python\n(.*?)```', section, re.S).group(1)
    with tempfile.TemporaryDirectory() as tmp:
      path = os.path.join(tmp, 'program.py')
      with open(path, 'w') as f:
        f.write(code + '\nprint(sorted(runs), summary["rounds_run"])\n')
      result = subprocess.run(
          [sys.executable, path], cwd=tmp, capture_output=True, text=True,
          timeout=900,
          env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '3',
               'PYTHONPATH': _ROOT},
      )
      self.assertEqual(result.returncode, 0, result.stderr[-3000:])
      self.assertEqual(
          result.stdout.strip().splitlines()[-1], "['dp_fedavg', 'smp'] 5"
      )
      for run_dir in ('output/smp_digits', 'output/grid/smp',
                      'output/grid/dp_fedavg'):
        self.assertTrue(
            os.path.exists(os.path.join(tmp, run_dir, 'summary.json')), run_dir
        )


if __name__ == '__main__':
  unittest.main()
