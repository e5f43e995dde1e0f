"""A run's progress on stderr (public values only): its phases, then its rounds.

Phase lines (`phase`, `starting`, `Progress.first_round`,
`Progress.evaluating`) name what the run does and its configured values
only: nothing of the sampled clients (their count, their timings).
"""

import os
import sys

import tqdm

# What a terminal that reports no size (0 x 0, as a fresh pseudo-terminal
# does) is drawn as: tqdm would otherwise draw a 0-column bar on row -1,
# which it never shows.
_DEFAULT_SIZE = os.terminal_size((100, 24))


def _terminal_size() -> os.terminal_size:
  """stderr's terminal size; `_DEFAULT_SIZE` where it reports none."""
  try:
    size = os.get_terminal_size(sys.stderr.fileno())
  except (OSError, ValueError):
    return _DEFAULT_SIZE
  return os.terminal_size(
      (size.columns or _DEFAULT_SIZE.columns, size.lines or _DEFAULT_SIZE.lines)
  )


def phase(enabled: bool, what: str) -> None:
  """`tff_priv: <what> ...` on stderr: what the run does until its next line."""
  if enabled:
    print(f'tff_priv: {what} ...', file=sys.stderr, flush=True)


def shows_progress(argv) -> bool:
  """Whether a script's argv leaves `--progress` on and asks no `--help`."""
  for arg in argv[1:]:
    if arg in (
        '--help',
        '-h',
        '-?',
        '--helpfull',
        '--helpshort',
        '--noprogress',
    ):
      return False
    if arg.startswith('--progress=') and arg.split('=', 1)[1].lower() in (
        'false',
        'f',
        '0',
        'no',
        'n',
    ):
      return False
  return True


def starting(enabled: bool, task: str, mechanism: str) -> None:
  """The phase line as the task loads; `building` follows it.

  (Before round 1 a run spends most of its time loading the task and
  tracing TFF's computations: each says so as it starts.)
  """
  del mechanism  # Named by `building`, once the task is loaded.
  phase(enabled, f'loading task {task}')


def building(enabled: bool, mechanism: str) -> None:
  """The phase line as the mechanism's process is built (TFF traces it)."""
  phase(enabled, f'building the {mechanism} process (TFF traces it)')


class Progress:
  """Per-round progress on stderr: a tqdm bar on a terminal, else one line.

  Shows public values only (the round, eps, the test accuracy of the
  released model, and the clients' training metrics where a run releases
  them). The bar is redrawn every round; while the first round compiles
  and while a model is evaluated its description says so (off a terminal,
  a phase line).

  Args:
    enabled: show progress at all.
    total: the run's rounds.
    initial: the rounds already run (a resumed run).
  """

  def __init__(self, enabled: bool, total: int, initial: int):
    self._tty = sys.stderr.isatty()
    self._enabled = enabled
    self._closed = False
    self._total = total
    self._round = initial
    size = _terminal_size() if self._tty else None
    self._bar = tqdm.tqdm(
        total=total,
        initial=initial,
        unit='round',
        disable=not (enabled and self._tty),
        file=sys.stderr,
        ncols=size.columns if size else None,
        nrows=size.lines if size else None,
        mininterval=0,
    )

  def first_round(self) -> None:
    """The phase line before a session's first round (TFF compiles it first)."""
    if self._round < self._total:
      phase(
          self._enabled and not self._tty,
          f'round {self._round + 1}/{self._total} (TFF compiles it first)',
      )
      self._describe(f'round {self._round + 1}: compiling')

  def evaluating(self, round_num: int) -> None:
    """Round `round_num`'s model is being evaluated (on public test data)."""
    if self._closed:
      return
    phase(
        self._enabled and not self._tty,
        f'round {round_num}/{self._total}: evaluating',
    )
    self._describe(f'round {round_num}: evaluating')

  def _describe(self, what: str) -> None:
    if self._enabled and self._tty:
      self._bar.set_description_str(what, refresh=True)

  def update(self, **postfix):
    """One round done; `postfix`: the values shown (None: not shown)."""
    shown = {k: f'{v:.4g}' for k, v in postfix.items() if v is not None}
    self._round += 1
    self._bar.set_description_str('', refresh=False)
    if self._enabled and not self._tty:
      values = ' '.join(f'{k}={v}' for k, v in shown.items())
      print(
          f'round {self._round}/{self._total} {values}',
          file=sys.stderr,
          flush=True,
      )
    self._bar.set_postfix(shown, refresh=False)
    self._bar.update(1)

  def close(self):
    self._closed = True
    self._bar.close()
