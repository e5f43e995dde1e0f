"""Tests for tff_priv.benchmarks.ldp at tiny scale."""

import pytest
import tensorflow as tf

from tff_priv.benchmarks import ldp

pytestmark = pytest.mark.slow


class LdpBenchmarkTest(tf.test.TestCase):

  def test_ldp_prints_every_part(self):
    lines = []
    ldp.run(
        ldp.Options(
            flat=True,
            d=1000,
            encode_repeats=2,
            clients=2,
            factory_repeats=1,
            transport_clients=2,
            transport_baseline=True,
        ),
        out=lines.append,
    )
    text = '\n'.join(lines)
    for expected in (
        'ratio encode (in range) / uniform',
        'ratio LDPEncodeFactory / UnweightedMeanFactory',
        'total split+streaming',
        'ratio direct simulation / split+merge+average',
    ):
      self.assertIn(expected, text)
    # The means of both transport paths match the direct mean.
    errors = text.split('max |mean - direct mean of the reports|: ')[1]
    merge = float(errors.split('merge ')[1].split(',')[0])
    self.assertLess(merge, 1e-9)


if __name__ == '__main__':
  tf.test.main()
