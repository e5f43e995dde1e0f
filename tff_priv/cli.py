"""Command-line conventions of tff_priv's scripts.

Bad usage ends with one line on stderr, `<prog>: error: <message> (see --help)`,
and exit status 2, including flag-parsing errors, which absl would otherwise
report over several lines with status 1.
"""

import sys

from absl import flags


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
