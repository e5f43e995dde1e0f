"""scripts/train.py under faults, in subprocesses: each ends in one line."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import pytest

from tests import procfs
from tests import script_runs
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.program import layout

pytestmark = pytest.mark.slow

_TIMEOUT = 600
_COMMON = (
    '--task=digits',
    '--mechanism=ldp',
    '--clients_per_round=3',
    '--batch_size=20',
    '--client_learning_rate=0.1',
    '--eval_every=100',
)


def _start(root, *args):
  return script_runs.start(
      'train.py', *_COMMON, f'--root_output_dir={root}', *args
  )


def _finish(proc):
  out, err = proc.communicate(timeout=_TIMEOUT)
  return proc.returncode, out, err


def _run(root, *args):
  return _finish(_start(root, *args))


def _wait_for(predicate, proc, seconds=_TIMEOUT):
  deadline = time.monotonic() + seconds
  while time.monotonic() < deadline and proc.poll() is None:
    if predicate():
      return True
    time.sleep(0.05)
  return False


def _checkpoints(root):
  path = layout.path(root, layout.CHECKPOINTS)
  if not os.path.isdir(path):
    return []
  prefix = layout.CHECKPOINT_PREFIX
  return sorted(
      int(e[len(prefix) :])
      for e in os.listdir(path)
      if e.startswith(prefix) and e[len(prefix) :].isdigit()
  )


def _releases(root):
  with open(layout.path(root, layout.SUMMARY)) as f:
    summary = json.load(f)
  return ledger_lib.PrivacyLedger.from_json(
      json.dumps(summary['privacy']['ledger'])
  ).num_releases


_last_line = script_runs.last_line


class TrainFaultsTest(unittest.TestCase):
  """Each fault ends the run in one line.

  A second run in a directory in use, a corrupted latest checkpoint, an
  unwritable directory, a broken config.json, SIGINT and SIGTERM mid-run. The
  runs are tiny (the 'digits' task, ldp, 3 clients a round).
  """

  def setUp(self):
    super().setUp()
    self.tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

  def test_second_run_in_a_directory_in_use_exits_2_naming_the_first(self):
    root = os.path.join(self.tmp, 'run')
    first = _start(root, '--total_rounds=30')
    lock = os.path.join(root, '.lock')
    self.assertTrue(
        _wait_for(
            lambda: os.path.exists(lock) and open(lock).read().strip(), first
        )
    )
    code, _, err = _run(root, '--total_rounds=30')
    # Refused before TensorFlow is imported (seconds, not the imports'
    # ~15 s): the same run with a tensorflow that cannot be imported.
    no_tf = os.path.join(self.tmp, 'no_tf', 'tensorflow')
    os.makedirs(no_tf)
    with open(os.path.join(no_tf, '__init__.py'), 'w') as f:
      f.write('raise ImportError("tensorflow was imported")\n')
    early = subprocess.run(
        [
            sys.executable,
            script_runs.script_path('train.py'),
            f'--root_output_dir={root}',
            '--total_rounds=30',
        ],
        capture_output=True,
        text=True,
        cwd=script_runs.ROOT,
        timeout=120,
        env={
            **script_runs.env(),
            'PYTHONPATH': os.pathsep.join(
                [os.path.dirname(no_tf), script_runs.ROOT]
            ),
        },
        check=False,
    )
    first.send_signal(signal.SIGTERM)
    first_code, _, _ = _finish(first)
    self.assertEqual(code, 2, err[-2000:])
    self.assertIn(f'in use by another run (pid {first.pid})', _last_line(err))
    self.assertNotIn('Traceback', err)
    self.assertEqual(early.returncode, 2, early.stderr[-2000:])
    self.assertIn(f'in use by another run (pid {first.pid})', early.stderr)
    self.assertEqual(first_code, 128 + signal.SIGTERM)

  def test_sigint_and_sigterm_stop_with_a_resume_hint_then_resume(self):
    # 12 rounds: at least 9 left after the signalled checkpoint, a run that
    # cannot end before its signal.
    root = os.path.join(self.tmp, 'run')
    for signum, rounds in ((signal.SIGINT, 2), (signal.SIGTERM, 3)):
      proc = _start(root, '--total_rounds=12')
      self.assertTrue(
          _wait_for(
              lambda n=rounds: _checkpoints(root)
              and max(_checkpoints(root)) >= n,
              proc,
          )
      )
      workers = [
          child
          for child in procfs.children(proc.pid)
          if child in procfs.with_cmdline(b'worker_binary')
      ]
      self.assertEqual(len(workers), 1)  # The run computes on TFF's worker.
      proc.send_signal(signum)
      code, _, err = _finish(proc)
      self.assertEqual(code, 128 + signum, err[-2000:])
      self.assertEqual(procfs.wait_gone(workers, 15), [])
      self.assertIn('run the same command to resume', _last_line(err))
      self.assertIn(signal.Signals(signum).name, _last_line(err))
      self.assertNotIn('Traceback', err)
    # The same command resumes and finishes.
    code, out, err = _run(root, '--total_rounds=12', '--noprogress')
    self.assertEqual(code, 0, err[-2000:])
    self.assertIn('summary.json', out)
    # Write-ahead: at least every round once; rounds released after the last
    # checkpoint before a stop are charged again when run again.
    self.assertGreaterEqual(_releases(root), 12)

  def test_corrupted_latest_checkpoint_falls_back_to_an_intact_one(self):
    root = os.path.join(self.tmp, 'run')
    code, _, err = _run(root, '--total_rounds=3', '--noprogress')
    self.assertEqual(code, 0, err[-2000:])
    self.assertEqual(_releases(root), 3)
    latest = os.path.join(
        layout.path(root, layout.CHECKPOINTS),
        f'{layout.CHECKPOINT_PREFIX}3',
    )
    for dirpath, _, files in os.walk(latest):
      for name in files:
        with open(os.path.join(dirpath, name), 'wb') as f:
          f.write(b'\0garbage')
    code, _, err = _run(root, '--total_rounds=3', '--noprogress')
    self.assertEqual(code, 0, err[-2000:])
    self.assertIn('checkpoint 3 is unreadable', err)
    self.assertNotIn('Traceback', err)
    # Round 3 was released before the corruption and again after the
    # fallback to checkpoint 2: both charged.
    self.assertEqual(_releases(root), 4)

  def test_unwritable_directory_and_broken_config_end_in_one_line(self):
    blocker = os.path.join(self.tmp, 'file')
    with open(blocker, 'w') as f:
      f.write('not a directory')
    code, _, err = _run(os.path.join(blocker, 'run'), '--total_rounds=1')
    self.assertEqual(code, 1, err[-2000:])
    self.assertIn('train.py: error: cannot use', _last_line(err))
    self.assertNotIn('Traceback', err)
    broken = os.path.join(self.tmp, 'broken')
    os.makedirs(broken)
    with open(layout.path(broken, layout.CONFIG), 'w') as f:
      f.write('{"format": ')
    code, _, err = _run(broken, '--total_rounds=1')
    self.assertEqual(code, 2, err[-2000:])
    self.assertIn('is not a readable run configuration', _last_line(err))
    self.assertNotIn('Traceback', err)


if __name__ == '__main__':
  unittest.main()
