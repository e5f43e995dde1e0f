"""Command-line conventions of tff_priv's scripts.

Bad usage ends with one line on stderr, `<prog>: error: <message> (see --help)`,
and exit status 2, including flag-parsing errors, which absl would otherwise
report over several lines with status 1. `Cli.run` is the scripts' entry
point: a failing exit leaves without interpreter teardown, in which TFF's
default execution context fails noisily ("Exception ignored ... Popen")
after the one line.
"""

import os
import sys
from typing import Callable

from absl import app
from absl import flags


def exit_now(code: int) -> None:
  """Stops tff_priv's TFF workers, flushes, and exits without teardown."""
  runtime = sys.modules.get('tff_priv.runtime')
  if runtime is not None:
    runtime.stop_workers()  # Idempotent.
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)  # pylint: disable=protected-access


class Cli:
  """The error and flag-parsing behaviour of one script."""

  def __init__(self, prog: str):
    self.prog = prog

  def fail(self, message: str):
    print(f'{self.prog}: error: {message} (see --help)', file=sys.stderr)
    sys.exit(2)

  def parse_flags(self, argv):
    """A `flags_parser` for `absl.app.run`."""
    try:
      return flags.FLAGS(argv)
    except flags.Error as e:
      self.fail(str(e))

  def run(self, main: Callable[[list[str]], None]) -> None:
    """`absl.app.run(main)` with this script's flag parsing; see the module docstring."""
    try:
      app.run(main, flags_parser=self.parse_flags)
    except SystemExit as e:
      if e.code not in (None, 0):
        exit_now(e.code if isinstance(e.code, int) else 1)
      raise
