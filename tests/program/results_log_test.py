"""Tests for tff_priv.program.results_log."""

import os
import tempfile

import tensorflow as tf

from tff_priv.program import results_log


class ResultsLogTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.path = os.path.join(tempfile.mkdtemp(dir=self.get_temp_dir()), 'r.jsonl')

  def test_missing_file_is_empty(self):
    self.assertEqual(results_log.load(self.path), {})

  def test_round_trip_and_infinity(self):
    results_log.append(self.path, {'key': 'a', 'eps': float('inf')})
    results_log.append(self.path, {'key': 'b', 'eps': 1.5})
    loaded = results_log.load(self.path)
    self.assertEqual(list(loaded), ['a', 'b'])
    self.assertEqual(loaded['a']['eps'], float('inf'))

  def test_last_line_cut_short_is_dropped(self):
    results_log.append(self.path, {'key': 'a'})
    with open(self.path, 'a') as f:
      f.write('{"key": "b", "acc')  # A write killed midway.
    self.assertEqual(list(results_log.load(self.path)), ['a'])
    # The next append removes the broken line and starts on a line of its own.
    results_log.append(self.path, {'key': 'c'})
    self.assertEqual(list(results_log.load(self.path)), ['a', 'c'])
    with open(self.path) as f:
      self.assertLen(f.readlines(), 2)

  def test_broken_line_in_the_middle_raises(self):
    with open(self.path, 'w') as f:
      f.write('{"key": "a"}\nnot json\n{"key": "c"}\n')
    with self.assertRaisesRegex(ValueError, r'r\.jsonl:2'):
      results_log.load(self.path)

  def test_record_needs_key(self):
    with self.assertRaisesRegex(ValueError, 'key'):
      results_log.append(self.path, {'acc': 1.0})


if __name__ == '__main__':
  tf.test.main()
