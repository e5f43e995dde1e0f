"""The README's quickstart runs as printed and prints what the README says."""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import pytest

from tests import readme_snippets

pytestmark = pytest.mark.slow

_ROOT = readme_snippets.ROOT
_readme = readme_snippets.readme
_code_after = readme_snippets.code_after
_quickstart_code = readme_snippets.quickstart_code


_TRAIN_MODEL = '### In `tff.learning.programs.train_model`'
_UDP = '### UDP: the factory with its client work'


def _train_model_code():
  """The train_model example, which continues the quickstart."""
  return _code_after(_TRAIN_MODEL)


def _run_snippet(code):
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'snippet.py')
    with open(path, 'w') as f:
      f.write(code)
    return subprocess.run(
        [sys.executable, path], cwd=tmp, capture_output=True, text=True,
        timeout=600, env=readme_snippets.user_env(),  # As a user runs it.
    )


# Appended to a quickstart (and the train_model example, when it ran): prints
# every leaf of the last round's metrics and of what train_model released.
_DUMP_METRICS = """
import json


def _leaves(x, path=''):
  if isinstance(x, dict):
    for k, v in x.items():
      yield from _leaves(v, f'{path}/{k}')
  elif isinstance(x, (list, tuple)):
    for i, v in enumerate(x):
      yield from _leaves(v, f'{path}/{i}')
  elif hasattr(x, 'trainable'):  # tff.learning.models.ModelWeights
    yield from _leaves([x.trainable, x.non_trainable], path)
  else:
    yield path, np.asarray(x).tolist()


leaves = dict(_leaves(output.metrics))
if 'accounting' in globals():
  leaves.update(_leaves({f'train_model/{k}': v
                         for k, v in released.values().items()}))
print(json.dumps(leaves))
"""


class ReadmeTest(unittest.TestCase):

  def test_quickstart_and_train_model_run_and_print_what_the_readme_says(self):
    text = _readme()
    claimed = [
        re.search(r'It prints `([^`]+)`', text[text.index(h):]).group(1)
        for h in ('## Quickstart', _TRAIN_MODEL)
    ]
    code = _quickstart_code() + _train_model_code()
    result = _run_snippet(code)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertEqual(result.stdout.strip().splitlines()[-2:], claimed)
    # Quiet as a library: no error line from tff_priv or TFF's parts of it,
    # no log line of TF, TFF, gRPC or absl (`runtime.set_context()`).
    self.assertNotIn('Traceback', result.stderr)
    self.assertNotRegex(result.stderr, r'(^|\n)E\d{4} |ERROR')
    self.assertEqual(readme_snippets.log_lines(result.stderr), [])

  def test_quickstart_and_train_model_release_no_exact_client_statistic(self):
    # Every value the quickstart's loop gets from its last round
    # (output.metrics), and every value the train_model example releases, is
    # compared across two runs on the same clients and one where every
    # client holds 15 of its 20 examples: a value equal on the two same runs
    # and different on the changed clients is an exact client statistic.
    # Checked to catch tff.learning's default metrics aggregator (the
    # example count, at least). The quickstart's sampler is seeded here so
    # that its two same runs draw the same clients.
    quickstart = _quickstart_code()
    secret = 'np.random.default_rng()  # Secret'
    self.assertIn(secret, quickstart)
    quickstart = quickstart.replace(secret, 'np.random.default_rng(7)  #')
    line = '    metrics_aggregator=no_client_metrics,\n'
    self.assertIn(line, quickstart)
    self.assertIn(line, _train_model_code())
    released, leaks = self._leaks(quickstart + _train_model_code())
    self.assertEqual(leaks, [])
    self.assertTrue(any(k.startswith('/train_model/') for k in released))
    self.assertIn(
        '/client_work/train/num_examples',
        self._leaks(quickstart.replace(line, ''))[1],
    )

  def test_udp_example_prints_what_the_readme_says_and_leaks_nothing(self):
    # UDP protects one example (replace-one): its neighbouring clients hold
    # as many examples, one of them changed (every client's last one here).
    text = _readme()
    claimed = re.search(r'It prints `([^`]+)`', text[text.index(_UDP):]).group(1)
    quickstart = _quickstart_code().replace(
        'np.random.default_rng()  # Secret', 'np.random.default_rng(7)  #'
    )
    code = quickstart + _code_after(_UDP)
    result = _run_snippet(code)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertEqual(result.stdout.strip().splitlines()[-1], claimed)
    self.assertEqual(readme_snippets.log_lines(result.stderr), [])
    replaced = (
        '\nclient_arrays = [(np.concatenate([x[:19], x[:1] + 1.0]), '
        'np.concatenate([y[:19], (y[:1] + 1) % 3])) for x, y in client_arrays]\n'
        'clients = [tf.data.Dataset.from_tensor_slices(a).batch(5) '
        'for a in client_arrays]\n'
    )
    released, leaks = self._leaks(code, replaced)
    self.assertEqual(leaks, [])
    self.assertTrue(any(k.startswith('/aggregator/') for k in released))

  def _leaks(self, code, change=None):
    change = change or (
        '\nclient_arrays = [(x[:15], y[:15]) for x, y in client_arrays]\n'
        'clients = [c.unbatch().take(15).batch(5) for c in clients]\n'
    )
    changed = code.replace('\nsampler = ', change + 'sampler = ')
    self.assertNotEqual(changed, code)
    released = []
    for snippet in (code, code, changed):
      result = _run_snippet(snippet + _DUMP_METRICS)
      self.assertEqual(result.returncode, 0, result.stderr[-3000:])
      released.append(json.loads(result.stdout.strip().splitlines()[-1]))
    self.assertEqual(set(released[0]), set(released[2]))
    return released[0], [
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
          env={**readme_snippets.user_env(), 'PYTHONPATH': _ROOT},
      )
      self.assertEqual(result.returncode, 0, result.stderr[-3000:])
      # Its progress lines only: no log line of TF, TFF, gRPC or absl.
      self.assertEqual(readme_snippets.log_lines(result.stderr), [])
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
