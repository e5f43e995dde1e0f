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
        [sys.executable, path],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=600,
        env=readme_snippets.user_env(),  # As a user runs it.
        check=False,
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
  # The model's initial weights (public: its initializers), to tell a
  # coordinate no round changed from a statistic.
  _initial = tff.learning.models.ModelWeights.from_model(model_fn())
  leaves.update(_leaves({'initial_model': [
      [np.asarray(v) for v in _initial.trainable],
      [np.asarray(v) for v in _initial.non_trainable]]}))
print(json.dumps(leaves))
"""


_FEWER_EXAMPLES = (
    '\nclient_arrays = [(x[:15], y[:15]) for x, y in client_arrays]\n'
    'clients = [c.unbatch().take(15).batch(5) for c in clients]\n'
)
_ONE_EXAMPLE_REPLACED = (
    '\nclient_arrays = [(np.concatenate([x[:19], x[:1] + 1.0]), '
    'np.concatenate([y[:19], (y[:1] + 1) % 3])) for x, y in client_arrays]\n'
    'clients = [tf.data.Dataset.from_tensor_slices(a).batch(5) '
    'for a in client_arrays]\n'
)


def _run_snippets_in_one_interpreter(snippets):
  """The stdout of each snippet, all run by one interpreter (as a user's)."""
  result = subprocess.run(
      [sys.executable, '-m', 'tests.snippet_main'],
      input=json.dumps(snippets),
      cwd=_ROOT,
      capture_output=True,
      text=True,
      timeout=1800,
      env={**readme_snippets.user_env(), 'PYTHONPATH': _ROOT},
      check=False,
  )
  if result.returncode != 0:
    raise AssertionError(f'a snippet failed: {result.stderr[-3000:]}')
  return json.loads(result.stdout.strip().splitlines()[-1])


class ReadmeTest(unittest.TestCase):

  def test_quickstart_and_train_model_run_and_print_what_the_readme_says(self):
    text = _readme()
    claimed = [
        re.search(r'It prints `([^`]+)`', text[text.index(h) :]).group(1)
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

  def test_examples_release_no_exact_client_statistic(self):
    # Every value the quickstart's loop gets from its last round
    # (output.metrics), every value the train_model example releases, and
    # every value of the UDP example's loop, is compared across two runs on
    # the same clients and one on changed clients: a value equal on the two
    # same runs and different on the changed clients is an exact client
    # statistic. The quickstart's sampler is seeded here so that its two
    # same runs draw the same clients. The nine runs (three checks of three)
    # share one interpreter (tests/snippet_main.py), as a user's would.
    quickstart = _quickstart_code()
    secret = 'np.random.default_rng()  # Secret'
    self.assertIn(secret, quickstart)
    quickstart = quickstart.replace(secret, 'np.random.default_rng(7)  #')
    # 3 of the 20 rounds: what a round releases does not depend on how many
    # ran (the runs as printed are the tests above).
    plan = 'q, rounds = 0.1, 20\n'
    self.assertIn(plan, quickstart)
    quickstart = quickstart.replace(plan, 'q, rounds = 0.1, 3\n')
    line = '    metrics_aggregator=no_client_metrics,\n'
    self.assertIn(line, quickstart)
    self.assertIn(line, _train_model_code())
    checks = {
        # Every client holds 15 of its 20 examples.
        'train_model': (quickstart + _train_model_code(), _FEWER_EXAMPLES),
        # Checked to catch tff.learning's default metrics aggregator (the
        # example count, at least).
        'default_metrics': (quickstart.replace(line, ''), _FEWER_EXAMPLES),
        # UDP protects one example (replace-one): its neighbouring clients
        # hold as many examples, one of them changed (every client's last).
        'udp': (quickstart + _code_after(_UDP), _ONE_EXAMPLE_REPLACED),
    }
    snippets = []
    for code, change in checks.values():
      changed = code.replace('\nsampler = ', change + 'sampler = ')
      self.assertNotEqual(changed, code)
      snippets += [
          code + _DUMP_METRICS,
          code + _DUMP_METRICS,
          changed + _DUMP_METRICS,
      ]
    outputs = _run_snippets_in_one_interpreter(snippets)
    found = {}
    for i, name in enumerate(checks):
      released = [
          json.loads(out.strip().splitlines()[-1])
          for out in outputs[3 * i : 3 * i + 3]
      ]
      self.assertEqual(set(released[0]), set(released[2]), name)
      found[name] = (
          released[0],
          [
              k
              for k in released[0]
              if released[0][k] == released[1][k] != released[2][k]
          ],
      )
    released, leaks = found['train_model']
    # Fed-SMP noises only the coordinates a round's secret rand-k mask keeps:
    # a weight no mask kept in two runs is its initial value there (the
    # bias's zeros, public), and may be changed in the third. Not a leak.
    leaks = [
        k
        for k in leaks
        if released[k]
        != released.get('/initial_model/' + k.split('/', 3)[3], None)
    ]
    self.assertEqual(leaks, [])
    self.assertTrue(any(k.startswith('/train_model/') for k in released))
    self.assertIn(
        '/client_work/train/num_examples', found['default_metrics'][1]
    )
    released, leaks = found['udp']
    self.assertEqual(leaks, [])
    self.assertTrue(any(k.startswith('/aggregator/') for k in released))

  def test_udp_example_prints_what_the_readme_says(self):
    text = _readme()
    claimed = re.search(r'It prints `([^`]+)`', text[text.index(_UDP) :]).group(
        1
    )
    quickstart = _quickstart_code().replace(
        'np.random.default_rng()  # Secret', 'np.random.default_rng(7)  #'
    )
    result = _run_snippet(quickstart + _code_after(_UDP))
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertEqual(result.stdout.strip().splitlines()[-1], claimed)
    self.assertEqual(readme_snippets.log_lines(result.stderr), [])

  def test_program_snippet_runs_and_writes_its_runs(self):
    text = _readme()
    section = text[text.index('The same program from Python') :]
    code = re.search(r'```python\n(.*?)```', section, re.S).group(1)
    with tempfile.TemporaryDirectory() as tmp:
      path = os.path.join(tmp, 'program.py')
      with open(path, 'w') as f:
        f.write(code + '\nprint(sorted(runs), summary["rounds_run"])\n')
      result = subprocess.run(
          [sys.executable, path],
          cwd=tmp,
          capture_output=True,
          text=True,
          timeout=900,
          env={**readme_snippets.user_env(), 'PYTHONPATH': _ROOT},
          check=False,
      )
      self.assertEqual(result.returncode, 0, result.stderr[-3000:])
      # Its progress lines only: no log line of TF, TFF, gRPC or absl.
      self.assertEqual(readme_snippets.log_lines(result.stderr), [])
      self.assertEqual(
          result.stdout.strip().splitlines()[-1], "['dp_fedavg', 'smp'] 5"
      )
      for run_dir in (
          'output/smp_digits',
          'output/grid/smp',
          'output/grid/dp_fedavg',
      ):
        self.assertTrue(
            os.path.exists(os.path.join(tmp, run_dir, 'summary.json')), run_dir
        )


if __name__ == '__main__':
  unittest.main()
