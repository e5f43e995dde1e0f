"""Tests for tff_priv.benchmarks.harness."""

import math

import tensorflow as tf

from tff_priv.benchmarks import harness


class RoundRobinTest(tf.test.TestCase):

  def test_calls_in_turn_warmup_untimed(self):
    seen = []
    calls = {name: lambda name=name: seen.append(name) for name in 'abc'}
    times = harness.round_robin(calls, 2, warmup=1)
    self.assertEqual(seen, list('abc') * 3)
    self.assertEqual(list(times), list('abc'))
    for seconds in times.values():
      self.assertLen(seconds, 2)
      self.assertTrue(all(s >= 0 for s in seconds))

  def test_before_runs_before_each_call(self):
    seen = []
    calls = {'a': lambda: seen.append('a'), 'b': lambda: seen.append('b')}
    harness.round_robin(
        calls, 1, warmup=0, before={'b': lambda: seen.append('before b')}
    )
    self.assertEqual(seen, ['a', 'before b', 'b'])

  def test_bad_counts(self):
    with self.assertRaisesRegex(ValueError, 'repeats'):
      harness.round_robin({'a': lambda: None}, 0)
    with self.assertRaisesRegex(ValueError, 'warmup'):
      harness.round_robin({'a': lambda: None}, 1, warmup=-1)


class SummaryTest(tf.test.TestCase):

  def test_ratio_spread_floor(self):
    self.assertEqual(harness.median([3.0, 1.0, 2.0]), 2.0)
    self.assertEqual(harness.ratio([4.0, 5.0, 9.0], [2.0, 1.0, 3.0]), 2.5)
    self.assertEqual(harness.spread([2.0, 1.0, 3.0]), 1.0)
    self.assertEqual(harness.floor(2.0, 0.5), 1.25)

  def test_format_and_shapes(self):
    self.assertEqual(
        harness.format_seconds([1.0, 2.0, 3.0]),
        'median   2000.00 ms (min 1000.00, max 3000.00)',
    )
    self.assertEqual(harness.parse_shapes('784x256,256'), [[784, 256], [256]])


class StepTest(tf.test.TestCase):

  def test_timed_step(self):
    result, cost = harness.timed_step(lambda: sum(range(1000)))
    self.assertEqual(result, 499500)
    self.assertGreaterEqual(cost.wall, 0.0)
    self.assertGreaterEqual(cost.cpu, 0.0)
    self.assertTrue(math.isnan(cost.peak_gb) or cost.peak_gb > 0)

  def test_noise_draws(self):
    draws = harness.noise_draws([[tf.zeros([3])], [tf.zeros([3])]], 1.0)
    self.assertIsNone(draws())


if __name__ == '__main__':
  tf.test.main()
