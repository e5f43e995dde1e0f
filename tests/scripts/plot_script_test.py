"""scripts/plot.py end to end in a subprocess, on run directories made here."""

import csv
import json
import os
import shutil
import tempfile

import pytest
import tensorflow as tf

from tests import script_runs
from tff_priv.program import layout

_PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'


def _run(*args):
  return script_runs.run('plot.py', *args)


def _write_run(root, mechanism, eps_per_round, rounds=(1, 2, 3)):
  os.makedirs(root)
  with open(layout.path(root, layout.CONFIG), 'w') as f:
    json.dump({'task': 'digits', 'mechanism': mechanism, 'params': {}}, f)
  with open(layout.path(root, layout.EVAL_CSV), 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow([layout.ROUND, layout.TEST_ACCURACY, layout.RDP_EPSILON])
    for r in rounds:
      writer.writerow([r, 0.2 * r, eps_per_round * r])


class PlotScriptTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

  @pytest.mark.slow
  def test_writes_both_pngs(self):
    dirs = []
    for mechanism, eps in (('dp_fedavg', 1.0), ('smp', 0.5), ('none', 'inf')):
      root = os.path.join(self.tmp, mechanism)
      _write_run(root, mechanism, float(eps))
      dirs.append(root)
    out = os.path.join(self.tmp, 'plots')
    result = _run(f'--run_dirs={",".join(dirs)}', f'--output_dir={out}')
    self.assertEqual(result.returncode, 0, result.stderr)
    # Runs without a summary are read through the registry (TensorFlow and
    # TFF imported): the exit stays quiet.
    self.assertNotIn('Exception ignored', result.stderr)
    self.assertNotIn('Traceback', result.stderr)
    paths = result.stdout.split()
    self.assertEqual(
        [os.path.basename(p) for p in paths],
        ['accuracy_vs_round.png', 'accuracy_vs_epsilon.png'],
    )
    for path in paths:
      with open(path, 'rb') as f:
        self.assertEqual(f.read(8), _PNG_SIGNATURE)

  @pytest.mark.slow
  def test_one_evaluation_and_a_far_off_eps(self):
    # One evaluated round each (markers, integer round ticks) and an LDP-FL
    # eps of millions (drawn off the axis of the others).
    dirs = []
    for mechanism, eps in (('dp_fedavg', 2.0), ('smp', 8.0), ('ldp', 3e6)):
      root = os.path.join(self.tmp, mechanism)
      _write_run(root, mechanism, eps, rounds=(1,))
      dirs.append(root)
    out = os.path.join(self.tmp, 'plots')
    result = _run(f'--run_dirs={",".join(dirs)}', f'--output_dir={out}')
    self.assertEqual(result.returncode, 0, result.stderr)
    paths = result.stdout.split()
    self.assertLen(paths, 2)
    for path in paths:
      with open(path, 'rb') as f:
        self.assertEqual(f.read(8), _PNG_SIGNATURE)

  def test_runs_of_one_configuration_and_a_server_view(self):
    # Completed runs (their unit in summary.json: read without TensorFlow).
    dirs = []
    for seed in (1, 2):
      root = os.path.join(self.tmp, f'seed{seed}')
      _write_run(root, 'smp', 4.0)
      with open(layout.path(root, layout.TRAIN_CSV), 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(
            [
                layout.ROUND,
                layout.SESSION,
                layout.RDP_EPSILON,
                layout.SERVER_EPSILON,
            ]
        )
        for r in (1, 2, 3):
          writer.writerow([r, 1, 4.0 * r, 15.0 * r])
      with open(layout.path(root, layout.SUMMARY), 'w') as f:
        json.dump(
            {
                'privacy': {
                    'delta': 1e-5,
                    'guarantees': [{'epsilon': 12.0, 'unit': 'client'}],
                }
            },
            f,
        )
      dirs.append(root)
    out = os.path.join(self.tmp, 'plots')
    result = _run(f'--run_dirs={",".join(dirs)}', f'--output_dir={out}')
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertEqual(result.stderr.strip(), '')
    paths = result.stdout.split()
    self.assertLen(paths, 2)
    for path in paths:
      with open(path, 'rb') as f:
        self.assertEqual(f.read(8), _PNG_SIGNATURE)

  def test_bad_input_exits_2_with_one_line(self):
    for args in ([], [f'--run_dirs={self.tmp}'], ['--bogus=1']):
      result = _run(*args)
      self.assertEqual(result.returncode, 2, args)
      lines = [l for l in result.stderr.splitlines() if 'error' in l]
      self.assertLen(lines, 1, result.stderr)
      self.assertEqual(result.stdout, '')


if __name__ == '__main__':
  tf.test.main()
