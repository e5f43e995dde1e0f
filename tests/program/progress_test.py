"""Progress on a terminal (a pseudo-terminal) and off one."""

import io
import os
import pty
import select
import sys
from unittest import mock

from absl.testing import absltest

from tff_priv.program import progress


def _read_all(fd) -> str:
  """What the terminal got so far (it reaches the master side shortly)."""
  chunks = []
  while select.select([fd], [], [], 0.5)[0]:
    chunk = os.read(fd, 65536)
    if not chunk:
      break
    chunks.append(chunk)
  return b''.join(chunks).decode(errors='replace')


class ProgressTest(absltest.TestCase):

  def test_a_bar_on_a_terminal_that_reports_no_width(self):
    # A fresh pseudo-terminal reports 0 x 0 (as `script` without a
    # terminal): tqdm then drew nothing at all (row -1); the bar is now drawn,
    # every round.
    master, slave = pty.openpty()
    self.assertEqual(tuple(os.get_terminal_size(slave)), (0, 0))
    stderr = os.fdopen(slave, 'w', buffering=1)
    self.addCleanup(os.close, master)
    self.addCleanup(stderr.close)
    with mock.patch.object(sys, 'stderr', stderr):
      bar = progress.Progress(True, total=3, initial=0)
      seen = []
      for r in range(3):
        bar.update(eps=0.5 * (r + 1), **{'test_acc@1': 0.25})
        stderr.flush()
        seen.append(_read_all(master))
      bar.close()
    for r, text in enumerate(seen, start=1):
      self.assertIn(f'{r}/3', text)
      self.assertIn(f'eps={0.5 * r:.4g}', text)
    self.assertIn('test_acc@1=0.25', seen[-1])

  def test_one_line_per_round_off_a_terminal(self):
    stderr = io.StringIO()
    with mock.patch.object(sys, 'stderr', stderr):
      bar = progress.Progress(True, total=2, initial=0)
      bar.update(eps=1.0, loss=None)
      bar.update(eps=2.0)
      bar.close()
    self.assertEqual(
        stderr.getvalue().splitlines(), ['round 1/2 eps=1', 'round 2/2 eps=2']
    )

  def test_a_line_per_phase_on_a_terminal_and_off_one(self):
    # Loading and tracing take most of the time before round 1: each phase
    # says so as it starts, in a log too (public names and values only).
    master, slave = pty.openpty()
    terminal = os.fdopen(slave, 'w', buffering=1)
    self.addCleanup(os.close, master)
    self.addCleanup(terminal.close)
    with mock.patch.object(sys, 'stderr', terminal):
      progress.starting(True, 'digits', 'dp_fedavg')
      progress.building(True, 'dp_fedavg')
      terminal.flush()
      seen = _read_all(master)
      self.assertIn('tff_priv: loading task digits ...', seen)
      self.assertIn('tff_priv: building the dp_fedavg process', seen)
      progress.starting(False, 'digits', 'dp_fedavg')
      progress.building(False, 'dp_fedavg')
      terminal.flush()
      self.assertEqual(_read_all(master), '')
    log = io.StringIO()
    with mock.patch.object(sys, 'stderr', log):
      progress.starting(True, 'digits', 'dp_fedavg')
      progress.building(True, 'dp_fedavg')
      progress.starting(False, 'digits', 'dp_fedavg')
    self.assertEqual(
        log.getvalue().splitlines(),
        [
            'tff_priv: loading task digits ...',
            'tff_priv: building the dp_fedavg process (TFF traces it) ...',
        ],
    )

  def test_first_round_and_evaluation_shown_off_a_terminal(self):
    log = io.StringIO()
    with mock.patch.object(sys, 'stderr', log):
      bar = progress.Progress(True, total=3, initial=1)  # Resumed at 1.
      bar.first_round()
      bar.update(eps=1.0)
      bar.evaluating(2)
      bar.update(eps=2.0)
      bar.close()
      bar.evaluating(3)  # After the run (a resumed, finished one): nothing.
      progress.Progress(False, total=3, initial=0).evaluating(1)
    self.assertEqual(
        log.getvalue().splitlines(),
        [
            'tff_priv: round 2/3 (TFF compiles it first) ...',
            'round 2/3 eps=1',
            'tff_priv: round 2/3: evaluating ...',
            'round 3/3 eps=2',
        ],
    )

  def test_the_bar_says_evaluating_while_it_evaluates(self):
    master, slave = pty.openpty()
    terminal = os.fdopen(slave, 'w', buffering=1)
    self.addCleanup(os.close, master)
    self.addCleanup(terminal.close)
    with mock.patch.object(sys, 'stderr', terminal):
      bar = progress.Progress(True, total=2, initial=0)
      bar.first_round()
      terminal.flush()
      self.assertIn('round 1: compiling', _read_all(master))
      bar.update(eps=1.0)
      bar.evaluating(1)
      terminal.flush()
      self.assertIn('evaluating', _read_all(master))
      bar.update(eps=2.0)
      terminal.flush()
      self.assertNotIn('evaluating', _read_all(master).split('\r')[-1])
      bar.close()

  def test_shows_progress_reads_the_scripts_flags(self):
    self.assertTrue(progress.shows_progress(['train.py', '--task=digits']))
    for off in (
        '--help',
        '-h',
        '--helpfull',
        '--noprogress',
        '--progress=false',
        '--progress=0',
    ):
      self.assertFalse(progress.shows_progress(['train.py', off]), off)
    self.assertTrue(progress.shows_progress(['train.py', '--progress=true']))


if __name__ == '__main__':
  absltest.main()
