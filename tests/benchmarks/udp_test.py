"""Tests for tff_priv.benchmarks.udp at tiny scale."""

import pytest
import tensorflow as tf

from tff_priv.benchmarks import udp

pytestmark = pytest.mark.slow


class UdpBenchmarkTest(tf.test.TestCase):

  def test_udp_times_every_process(self):
    lines = []
    times = udp.run(
        udp.Options(shapes='10x3,3', clients=2, repeats=2), out=lines.append
    )
    self.assertEqual(
        list(times),
        [udp.BASELINE, 'udp_weighted', 'udp_unweighted', udp.DRAWS],
    )
    for seconds in times.values():
      self.assertLen(seconds, 2)
    self.assertLen(lines, 1)
    self.assertIn('floor for client-side noise', lines[0])
    self.assertIn('d = 33, K = 2', lines[0])


if __name__ == '__main__':
  tf.test.main()
