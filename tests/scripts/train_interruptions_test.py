"""scripts/train.py killed and resumed, on a full disk, and with no worker."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import numpy as np
import pytest

from tests import script_runs
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.program import layout

pytestmark = pytest.mark.slow

_TARGET = 8.0
_ROUNDS = 8
_COMMON = (
    '--task=digits',
    '--clients_per_round=3',
    '--batch_size=20',
    '--eval_every=100',
    f'--total_rounds={_ROUNDS}',
    '--checkpoint_every=3',
    f'--epsilon={_TARGET}',
    '--noprogress',
)
_FLAGS = {
    'dp_fedavg': ('--clip=1.0', '--client_learning_rate=0.1'),
}


def _args(root, mechanism):
  return (
      *_COMMON,
      f'--mechanism={mechanism}',
      *_FLAGS[mechanism],
      f'--root_output_dir={root}',
  )


def _written_round(root):
  try:
    with open(layout.path(root, layout.PRIVACY)) as f:
      return json.load(f)['round']
  except (OSError, ValueError, KeyError):
    return 0


def _kill_after(root, mechanism, kill_round):
  """Starts a run and SIGKILLs it once round `kill_round` is charged."""
  proc = script_runs.start('train.py', *_args(root, mechanism))
  deadline = time.monotonic() + script_runs.TIMEOUT
  while proc.poll() is None and time.monotonic() < deadline:
    if _written_round(root) >= kill_round:
      proc.send_signal(signal.SIGKILL)
      break
    time.sleep(0.02)
  proc.communicate(timeout=60)
  return proc.returncode


class _KillResume:
  """kill -9 after a random round, then the same command: <= the target.

  A central-noise mechanism calibrated by --epsilon (dp_fedavg) is killed
  (SIGKILL) after a round drawn at random (a fixed seed), then run again with
  the same command: the rounds after its last checkpoint run again and are
  charged again, and the rounds left are noised for the budget left, so the
  finished run's epsilon is at most its target. A client-noise mechanism's
  kill -9 is in train_script_test.py (smp); every other mechanism's resume at
  its target runs in process (tests/program/resume_test.py, training_test.py).
  """

  def assertBetween(self, value, low, high):  # noqa: N802 # pylint: disable=invalid-name
    self.assertGreaterEqual(value, low)
    self.assertLessEqual(value, high)

  MECHANISMS = ()

  def test_killed_at_a_random_round_then_resumed_meets_the_target(self):
    rng = np.random.default_rng(38)
    for mechanism in self.MECHANISMS:
      with self.subTest(mechanism=mechanism):
        kill_round = int(rng.integers(2, _ROUNDS))
        root = os.path.join(tempfile.mkdtemp(), 'run')
        self.addCleanup(shutil.rmtree, os.path.dirname(root), True)
        self.assertEqual(
            _kill_after(root, mechanism, kill_round), -signal.SIGKILL
        )
        killed_at = _written_round(root)
        result = script_runs.run('train.py', *_args(root, mechanism))
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        with open(layout.path(root, layout.SUMMARY)) as f:
          summary = json.load(f)
        privacy = summary['privacy']
        ledger = ledger_lib.PrivacyLedger.from_json(
            json.dumps(privacy['ledger'])
        )
        # Every round released was charged; rounds after the checkpoint
        # (every 3rd round) run again.
        self.assertGreaterEqual(ledger.num_releases, _ROUNDS)
        self.assertLessEqual(privacy['rdp_epsilon'], _TARGET)
        self.assertGreater(privacy['rdp_epsilon'], _TARGET - 0.05)
        self.assertEqual(privacy['target_epsilon'], _TARGET)
        first, second = summary['sessions']
        # The last checkpoint (every 3rd round; the killed round's own save
        # may not have happened).
        self.assertEqual(second['start_round'] % 3, 0)
        self.assertBetween(second['start_round'], killed_at - 3, killed_at)
        if second['start_round'] < killed_at:  # Rounds run again.
          self.assertGreater(
              second['noise_multiplier'], first['noise_multiplier']
          )
        print(
            f'{mechanism}: killed after round {killed_at}, resumed at '
            f'{second["start_round"]}: eps {privacy["rdp_epsilon"]:.4f} '
            f'(target {_TARGET}), {ledger.num_releases} releases, z '
            f'{first["noise_multiplier"]:.4f} -> '
            f'{second["noise_multiplier"]:.4f}'
        )


class CentralNoiseKillResumeTest(_KillResume, unittest.TestCase):
  MECHANISMS = ('dp_fedavg',)


def _mount_tmpfs(path, size):
  os.makedirs(path, exist_ok=True)
  return (
      subprocess.run(
          ['mount', '-t', 'tmpfs', '-o', f'size={size}', 'tmpfs', path],
          capture_output=True,
          check=False,
      ).returncode
      == 0
  )


class FullDiskTest(unittest.TestCase):
  """A full disk: one line, no temporary folder left, a resume after.

  A run on a small tmpfs ends in one line when the disk is full, leaves no
  temporary folder, and resumes once there is room.
  """

  def test_a_full_disk_ends_in_one_line_and_the_run_resumes(self):
    mount = tempfile.mkdtemp()
    if not _mount_tmpfs(mount, '400k'):
      self.skipTest('cannot mount a tmpfs here (needs root)')
    self.addCleanup(subprocess.run, ['umount', '-l', mount], check=False)
    root = os.path.join(mount, 'run')
    result = script_runs.run(
        'train.py', *_args(root, 'dp_fedavg'), '--checkpoint_every=1'
    )
    self.assertEqual(result.returncode, 1, result.stderr[-2000:])
    line = script_runs.last_line(result.stderr)
    self.assertRegex(
        line,
        r'^train\.py: error: .*No space left on device; '
        r'.* kept: run the same command to resume',
    )
    self.assertNotIn('Traceback', result.stderr)
    self.assertNotIn('Errno', result.stderr)
    leftovers = [
        os.path.join(d, n)
        for d, dirs, files in os.walk(root)
        for n in dirs + files
        if 'temp' in n or '.tmp' in n
    ]
    self.assertEqual(leftovers, [])
    charged = _written_round(root)
    # Room again: the same command resumes and ends within the target.
    subprocess.run(['mount', '-o', 'remount,size=64m', mount], check=True)
    result = script_runs.run(
        'train.py', *_args(root, 'dp_fedavg'), '--checkpoint_every=1'
    )
    self.assertEqual(result.returncode, 0, result.stderr[-2000:])
    with open(layout.path(root, layout.SUMMARY)) as f:
      privacy = json.load(f)['privacy']
    self.assertLessEqual(privacy['rdp_epsilon'], _TARGET)
    ledger = ledger_lib.PrivacyLedger.from_json(json.dumps(privacy['ledger']))
    self.assertGreaterEqual(ledger.num_releases, _ROUNDS)
    self.assertGreaterEqual(charged, 1)


class OneLineFaultsTest(unittest.TestCase):

  def test_a_damaged_ledger_is_refused_in_one_line(self):
    root = os.path.join(tempfile.mkdtemp(), 'run')
    result = script_runs.run(
        'train.py', *_args(root, 'dp_fedavg'), '--total_rounds=1'
    )
    self.assertEqual(result.returncode, 0, result.stderr[-2000:])
    with open(layout.path(root, layout.PRIVACY), 'w') as f:
      f.write('{"round": 1, "priv')
    result = script_runs.run(
        'train.py', *_args(root, 'dp_fedavg'), '--total_rounds=1'
    )
    self.assertEqual(result.returncode, 2, result.stderr[-2000:])
    self.assertRegex(
        script_runs.last_line(result.stderr),
        r'^train\.py: error: .*privacy_ledger\.json is damaged',
    )
    self.assertNotIn('Traceback', result.stderr)
    with open(layout.path(root, layout.PRIVACY)) as f:
      self.assertEqual(f.read(), '{"round": 1, "priv')

  def test_no_worker_fails_within_seconds_naming_nothing_unwritten(self):
    root = os.path.join(tempfile.mkdtemp(), 'run')
    start = time.monotonic()
    result = script_runs.run(
        'train.py', *_args(root, 'dp_fedavg'), '--workers=127.0.0.1:1'
    )
    seconds = time.monotonic() - start
    self.assertEqual(result.returncode, 1, result.stderr[-2000:])
    self.assertLess(seconds, 15)
    self.assertEqual(
        result.stderr.strip(),
        'train.py: error: no TFF worker answers at 127.0.0.1:1 (Connection '
        'refused); start one there with: python -m tff_priv.worker '
        '--port=PORT (nothing was run)',
    )
    self.assertFalse(os.path.exists(root))


if __name__ == '__main__':
  unittest.main()
