"""Tests of tff_priv.program.runs: a run directory read back."""

import csv
import json
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from tff_priv.program import layout
from tff_priv.program import runs


def _write(root, name, content):
  with open(layout.path(root, name), 'w', newline='') as f:
    if name.endswith('.json'):
      json.dump(content, f)
    else:
      writer = csv.writer(f)
      for row in content:
        writer.writerow(row)


class RunsTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
    self.root = os.path.join(self.tmp, 'run')
    os.makedirs(self.root)
    _write(self.root, layout.CONFIG, {'task': 'digits', 'mechanism': 'udp'})
    _write(
        self.root,
        layout.EVAL_CSV,
        [
            [layout.ROUND, layout.TEST_ACCURACY, layout.RDP_EPSILON],
            [2, 0.5, 'inf'],
            [1, '', 1.5],
        ],
    )
    _write(
        self.root,
        layout.TRAIN_CSV,
        [
            [layout.ROUND, 'uplink_bytes', 'note'],
            [1, 40, 'x'],
        ],
    )

  def test_finished_run_needs_its_summary(self):
    with self.assertRaises(FileNotFoundError):
      runs.read(self.root)
    _write(
        self.root,
        layout.SUMMARY,
        {'privacy': {'guarantees': [{'unit': 'example', 'epsilon': 2.0}]}},
    )
    result = runs.read(self.root)
    self.assertEqual(result.label, 'run')
    self.assertEqual(result.mechanism, 'udp')
    self.assertEqual(result.unit, 'example')
    # Numbers as floats; what is not a number is left out.
    self.assertEqual(result.train_rows, [{'round': 1.0, 'uplink_bytes': 40.0}])
    self.assertEqual(result.eval_rows[0][layout.RDP_EPSILON], float('inf'))
    self.assertNotIn(layout.TEST_ACCURACY, result.eval_rows[1])

  def test_run_in_progress(self):
    result = runs.read(self.root, 'label', finished=False)
    self.assertIsNone(result.summary)
    self.assertEqual(result.label, 'label')
    self.assertEqual(result.unit, 'example')  # udp's factory's guarantee.

  def test_unit_of_a_non_private_run_is_the_registrys(self):
    _write(self.root, layout.CONFIG, {'mechanism': 'none'})
    _write(
        self.root,
        layout.SUMMARY,
        {'privacy': {'guarantees': [{'unit': 'client', 'epsilon': 'inf'}]}},
    )
    self.assertIsNone(runs.read(self.root).unit)

  def test_not_a_run_directory(self):
    with self.assertRaisesRegex(ValueError, 'not a run directory'):
      runs.read(self.tmp, finished=False)

  def test_model(self):
    np.savez(
        layout.path(self.root, layout.FINAL_MODEL),
        trainable_0=np.ones(2),
        trainable_1=np.zeros(3),
        non_trainable_0=np.ones(1),
    )
    result = runs.RunResult('x', self.root, {}, [], [])
    model = result.model()
    self.assertLen(model, 2)
    self.assertAllEqual(model[1], np.zeros(3))


if __name__ == '__main__':
  tf.test.main()
