"""The README's quickstart runs as printed and prints what the README says."""

import json
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


def _quickstart_code():
  text = _readme()
  section = text[text.index('## Quickstart'):]
  return re.search(r'```python\n(.*?)```', section, re.S).group(1)


def _run_snippet(code):
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'snippet.py')
    with open(path, 'w') as f:
      f.write(code)
    return subprocess.run(
        [sys.executable, path], cwd=tmp, capture_output=True, text=True,
        timeout=600, env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '3'},
    )


# Appended to a quickstart: prints every leaf of the last round's metrics.
_DUMP_METRICS = """
import json


def _leaves(x, path=''):
  if isinstance(x, dict):
    for k, v in x.items():
      yield from _leaves(v, f'{path}/{k}')
  elif isinstance(x, (list, tuple)):
    for i, v in enumerate(x):
      yield from _leaves(v, f'{path}/{i}')
  else:
    yield path, np.asarray(x).tolist()


print(json.dumps(dict(_leaves(output.metrics))))
"""


class ReadmeTest(unittest.TestCase):

  def test_quickstart_runs_and_prints_what_the_readme_says(self):
    text = _readme()
    section = text[text.index('## Quickstart'):]
    code = _quickstart_code()
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

  def test_quickstart_releases_no_exact_client_statistic(self):
    # Every value the quickstart's loop gets from its last round
    # (output.metrics) is compared across two runs on the same clients and
    # one where every client holds 15 of its 20 examples: a value equal on
    # the two same runs and different on the changed clients is an exact
    # client statistic. Checked to catch tff.learning's default metrics
    # aggregator (the example count, at least).
    code = _quickstart_code()
    line = '    metrics_aggregator=client_metrics.no_client_metrics,\n'
    self.assertIn(line, code)
    self.assertEqual(self._leaks(code), [])
    self.assertIn(
        '/client_work/train/num_examples',
        self._leaks(code.replace(line, '')),
    )

  def _leaks(self, code):
    changed = code.replace(
        '\n# Fed-SMP at eps',
        '\nclients = [c.unbatch().take(15).batch(5) for c in clients]\n'
        '# Fed-SMP at eps',
    )
    self.assertNotEqual(changed, code)
    released = []
    for snippet in (code, code, changed):
      result = _run_snippet(snippet + _DUMP_METRICS)
      self.assertEqual(result.returncode, 0, result.stderr[-3000:])
      released.append(json.loads(result.stdout.strip().splitlines()[-1]))
    self.assertEqual(set(released[0]), set(released[2]))
    return [
        k for k in released[0]
        if released[0][k] == released[1][k] != released[2][k]
    ]

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
