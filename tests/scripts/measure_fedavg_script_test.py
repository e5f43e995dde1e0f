"""scripts/measure_fedavg.py end to end on the digits task, in a subprocess."""

import re

import pytest
import tensorflow as tf

from tests import script_runs

pytestmark = pytest.mark.slow


class MeasureFedAvgScriptTest(tf.test.TestCase):

  def test_prints_rounds_and_result(self):
    result = script_runs.run(
        'measure_fedavg.py',
        '--task=digits',
        '--rounds=2',
        '--clients_per_round=3',
        '--client_learning_rate=0.1',
    )
    self.assertEqual(result.returncode, 0, result.stderr)
    lines = result.stdout.strip().splitlines()
    self.assertStartsWith(lines[0], 'task=digits ')
    self.assertRegex(lines[1], r'^round 1: [\d.]+ s, train loss [\d.]+$')
    self.assertRegex(lines[2], r'^round 2: ')
    self.assertStartsWith(lines[-1], 'RESULT task=digits test_metrics=')
    accuracy = re.search(r"'sparse_categorical_accuracy': ([\d.]+)", lines[-1])
    self.assertIsNotNone(accuracy, lines[-1])
    self.assertBetween(float(accuracy.group(1)), 0.0, 1.0)

  def test_unexpected_argument(self):
    result = script_runs.run('measure_fedavg.py', 'extra')
    self.assertNotEqual(result.returncode, 0)
    self.assertIn('unexpected arguments', result.stderr)


if __name__ == '__main__':
  tf.test.main()
