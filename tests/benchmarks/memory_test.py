"""Tests for tff_priv.benchmarks.memory."""

import subprocess
import sys
import time

from absl.testing import absltest
import numpy as np

from tff_priv.benchmarks import memory


class MemoryTest(absltest.TestCase):

  def test_a_childs_memory_is_counted(self):
    # A child holding 200 MB raises the tree's resident memory by about that.
    before = memory.tree_rss_mb()
    child = subprocess.Popen(
        [sys.executable, '-c',
         'import sys, numpy as np; a = np.ones(200 * 2**20 // 8); '
         'print(1, flush=True); sys.stdin.read()'],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    self.addCleanup(child.wait)
    self.addCleanup(child.stdin.close)
    child.stdout.readline()  # The array is allocated and touched.
    self.assertBetween(memory.tree_rss_mb() - before, 200.0, 260.0)

  def test_the_peak_of_each_label(self):
    with memory.Sampler(interval=0.01) as sampler:
      sampler.label = 'small'
      time.sleep(0.05)
      sampler.label = 'large'
      block = np.ones(300 * 2**20 // 8)
      time.sleep(0.1)
      del block
      sampler.label = 'small again'
    self.assertBetween(sampler.peaks['large'] - sampler.peaks['small'],
                       290.0, 320.0)
    self.assertLess(sampler.peaks['small again'], sampler.peaks['large'] - 250)


if __name__ == '__main__':
  absltest.main()
