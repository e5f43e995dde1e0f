"""Tests for tff_priv.benchmarks.memory."""

import os
import subprocess
import sys
import time

from absl.testing import absltest
import numpy as np

from tff_priv.benchmarks import memory

_PARENT = """
import os
import subprocess, sys
child = subprocess.Popen(
    [sys.executable, '-c',
     'import sys, numpy as np; a = np.ones(200 * 2**20 // 8); '
     'print(1, flush=True); sys.stdin.read()'],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print(1, flush=True)
sys.stdin.read()
child.stdin.close()
child.wait()
"""


class MemoryTest(absltest.TestCase):

  def test_a_childs_memory_is_counted(self):
    # A process whose child holds 200 MB: the tree of that process counts
    # the child's memory. (Not the tree of this process: under pytest-xdist
    # it holds TFF workers of other tests, whose memory moves meanwhile.)
    parent = subprocess.Popen(
        [sys.executable, '-c', _PARENT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    self.addCleanup(parent.wait)
    self.addCleanup(parent.stdin.close)
    parent.stdout.readline()  # The child's array is allocated and touched.
    with open(f'/proc/{parent.pid}/statm') as f:
      own = int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2.0**20
    self.assertBetween(memory.tree_rss_mb(parent.pid) - own, 200.0, 260.0)

  def test_the_peak_of_each_label(self):
    with memory.Sampler(interval=0.01) as sampler:
      sampler.label = 'small'
      time.sleep(0.05)
      sampler.label = 'large'
      block = np.ones(300 * 2**20 // 8)
      time.sleep(0.1)
      del block
      sampler.label = 'small again'
    self.assertBetween(
        sampler.peaks['large'] - sampler.peaks['small'], 290.0, 320.0
    )
    self.assertLess(sampler.peaks['small again'], sampler.peaks['large'] - 250)


if __name__ == '__main__':
  absltest.main()
