"""scripts/train.py --workers: two mechanisms over two loopback TFF workers."""

import json
import os
import tempfile
import time
import unittest

import pytest

from tests import remote_workers
from tests import script_runs
from tests.scripts import train_runs
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.program import layout
from tff_priv.program import registry

pytestmark = pytest.mark.slow

_TIMEOUT = 600


def _args(root, workers, *args):
  return (
      *train_runs.COMMON,
      f'--root_output_dir={root}',
      f"--workers={','.join(w.address for w in workers)}",
      *args,
  )


def _run(root, workers, *args):
  proc = script_runs.run('train.py', *_args(root, workers, *args))
  return proc.returncode, proc.stdout, proc.stderr


def _summary(root):
  with open(layout.path(root, layout.SUMMARY)) as f:
    return json.load(f)


def _releases(root):
  return ledger_lib.PrivacyLedger.from_json(
      json.dumps(_summary(root)['privacy']['ledger'])
  ).num_releases


class TrainRemoteTest(unittest.TestCase):
  """Two mechanisms over two loopback workers, and a lost worker.

  The workers are `python -m tff_priv.worker` processes on free ports; the runs
  are tiny (the 'digits' task, 3 clients a round): dp_fedavg (central noise) and
  smp (client noise, its secure sum), then ldp's run that loses a worker. Every
  mechanism's computations over remote workers are the same TFF computations as
  in process (tests/runtime_remote_test.py runs training and Fed-SMP's secure
  sum over the workers). After the tests no worker process is left (checked by
  PID and start time).
  """

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    cls.workers = [remote_workers.Worker(), remote_workers.Worker()]

  @classmethod
  def tearDownClass(cls):
    survivors = [p for w in cls.workers for p in w.stop()]
    assert not survivors, f'worker processes left behind: {survivors}'
    super().tearDownClass()

  def test_two_mechanisms_run_two_rounds_over_the_workers(self):
    for mechanism in ('dp_fedavg', 'smp'):
      flags = train_runs.MECHANISM_FLAGS[mechanism]
      with self.subTest(mechanism=mechanism):
        root = os.path.join(self.tmp, mechanism)
        code, out, err = _run(
            root,
            self.workers,
            f'--mechanism={mechanism}',
            *flags,
            '--total_rounds=2',
            '--eval_every=2',
        )
        self.assertEqual(code, 0, err[-2000:])
        self.assertIn('summary.json', out)
        self.assertEqual(_summary(root)['rounds_run'], 2)
        if registry.unit(mechanism) is not None:  # Private: charged.
          self.assertEqual(_releases(root), 2)

  def test_a_lost_worker_ends_the_run_in_one_line_and_the_run_resumes(self):
    workers = [remote_workers.Worker(), remote_workers.Worker()]
    root = os.path.join(self.tmp, 'lost')
    args = (
        '--mechanism=ldp',
        '--ldp_epsilon=2',
        '--ldp_radius=0.05',
        '--total_rounds=16',  # 14 left when the worker is lost.
        '--eval_every=100',
        '--worker_timeout=3',
    )
    try:
      proc = script_runs.start('train.py', *_args(root, workers, *args))
      checkpoints = layout.path(root, layout.CHECKPOINTS)
      deadline = time.monotonic() + _TIMEOUT
      while (
          proc.poll() is None
          and time.monotonic() < deadline
          and not (
              os.path.isdir(checkpoints) and len(os.listdir(checkpoints)) >= 2
          )
      ):
        time.sleep(0.05)
      self.assertIsNone(proc.poll(), 'the run ended before the worker was lost')
      workers[1].kill_worker_binary()
      _, err = proc.communicate(timeout=_TIMEOUT)
      self.assertEqual(proc.returncode, 1, err[-2000:])
      lines = [l for l in err.strip().splitlines() if l.strip()]
      self.assertIn(workers[1].address, lines[-1])
      self.assertIn('run the same command to resume', lines[-1])
      self.assertNotIn('Traceback', err)
      self.assertFalse(os.path.exists(layout.path(root, layout.SUMMARY)))
      # The worker back on its port: the same command finishes the run.
      workers[1].stop()
      workers[1] = remote_workers.Worker(workers[1].port)
      code, _, err = _run(root, workers, *args)
      self.assertEqual(code, 0, err[-2000:])
      self.assertEqual(_summary(root)['rounds_run'], 16)
      # Write-ahead: every round charged; the round in flight when the
      # worker was lost was charged and is charged again when run again.
      self.assertGreaterEqual(_releases(root), 16)
      self.assertLessEqual(_releases(root), 17)
    finally:
      survivors = [p for w in workers for p in w.stop()]
    self.assertEqual(survivors, [])


if __name__ == '__main__':
  unittest.main()
