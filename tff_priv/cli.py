"""Command-line conventions of tff_priv's scripts.

Bad usage ends with one line on stderr, `<prog>: error: <message> (see --help)`,
and exit status 2, including flag-parsing errors, which absl would otherwise
report over several lines with status 1.
"""

import os
import sys

from absl import flags


def exit_now(code: int) -> None:
  """Flushes and exits with `code` without interpreter teardown.

  TFF's import leaves a default execution context whose `__del__` fails
  noisily in teardown ("Exception ignored ... Popen"), which would follow the
  one-line message; no worker has started when a usage error ends a script.
  """
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)  # pylint: disable=protected-access


class Cli:
  """The error and flag-parsing behaviour of one script."""

  def __init__(self, prog: str):
    self.prog = prog

  def fail(self, message: str):
    print(f'{self.prog}: error: {message} (see --help)', file=sys.stderr)
    exit_now(2)

  def parse_flags(self, argv):
    """A `flags_parser` for `absl.app.run`."""
    try:
      return flags.FLAGS(argv)
    except flags.Error as e:
      self.fail(str(e))
