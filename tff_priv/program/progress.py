"""A run's per-round progress line on stderr (public values only)."""

import sys

import tqdm

class Progress:
  """Per-round progress on stderr: a tqdm bar on a terminal, else one line.

  Shows public values only (the round, eps, the test accuracy of the
  released model, and the clients' training metrics where a run releases
  them).
  """

  def __init__(self, enabled: bool, total: int, initial: int):
    self._tty = sys.stderr.isatty()
    self._enabled = enabled
    self._total = total
    self._round = initial
    self._bar = tqdm.tqdm(
        total=total,
        initial=initial,
        unit='round',
        disable=not (enabled and self._tty),
        file=sys.stderr,
        dynamic_ncols=True,
    )

  def update(self, **postfix):
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
