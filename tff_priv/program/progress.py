"""A run's per-round progress on stderr (public values only)."""

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
  return os.terminal_size((size.columns or _DEFAULT_SIZE.columns,
                           size.lines or _DEFAULT_SIZE.lines))


def starting(enabled: bool, task: str, mechanism: str) -> None:
  """One line on a terminal while the task loads and TFF traces the process.

  (Before round 1 a run spends most of its time tracing TFF's computations,
  with nothing else to show; a log that is not a terminal gets its first line
  at round 1, as before.)
  """
  if enabled and sys.stderr.isatty():
    print(f'building the task {task} and the {mechanism} process '
          '(TFF traces its computations) ...', file=sys.stderr, flush=True)


class Progress:
  """Per-round progress on stderr: a tqdm bar on a terminal, else one line.

  Shows public values only (the round, eps, the test accuracy of the
  released model, and the clients' training metrics where a run releases
  them). The bar is redrawn every round.

  Args:
    enabled: show progress at all.
    total: the run's rounds.
    initial: the rounds already run (a resumed run).
  """

  def __init__(self, enabled: bool, total: int, initial: int):
    self._tty = sys.stderr.isatty()
    self._enabled = enabled
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

  def update(self, **postfix):
    """One round done; `postfix`: the values shown (None: not shown)."""
    shown = {k: f'{v:.4g}' for k, v in postfix.items() if v is not None}
    self._round += 1
    if self._enabled and not self._tty:
      values = ' '.join(f'{k}={v}' for k, v in shown.items())
      print(f'round {self._round}/{self._total} {values}', file=sys.stderr,
            flush=True)
    self._bar.set_postfix(shown, refresh=False)
    self._bar.update(1)

  def close(self):
    self._bar.close()
