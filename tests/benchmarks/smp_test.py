"""Tests for tff_priv.benchmarks.smp at tiny scale."""

import pytest
import tensorflow as tf

from tff_priv.benchmarks import smp

pytestmark = pytest.mark.slow


class SmpBenchmarkTest(tf.test.TestCase):

  def test_smp_times_every_process_on_each_source(self):
    lines = []
    smp.run(
        smp.Options(
            shapes='10x3,3',
            clients=2,
            compressions=(0.5,),
            secure_compressions=(0.5,),
            repeats=1,
        ),
        out=lines.append,
    )
    self.assertLen(lines, 3)  # The setting, one table per value source.
    for table in lines[1:]:
      for name in (
          smp.BASELINE,
          'smp_plain_p0.5',
          'smp_secure_p0.5',
          'smp_plain_p0.5_sigma0',
          'client_noise_draws_p0.5',
      ):
        self.assertIn(f'\n{name} ', table)
      self.assertIn(f'{smp.BASELINE}     ', table)
      self.assertIn('client noise draws at p0.5 timed alone', table)

  def test_smp_unknown_value_source(self):
    with self.assertRaisesRegex(ValueError, 'value source'):
      smp.Options(value_sources=('disk',))


if __name__ == '__main__':
  tf.test.main()
