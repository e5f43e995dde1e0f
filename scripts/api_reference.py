r"""Builds the HTML API reference of tff_priv from its docstrings (pdoc).

One page per public package (`tff_priv.accounting`, `.aggregators`,
`.auditing`, `.learning`, `.program`, `.mechanisms`, ...), each listing the
flat names its `__all__` exports, with their docstrings and signatures, and a
search box. Generated, not checked in (docs/api/ is ignored by git):

    .venv/bin/python scripts/api_reference.py      # -> docs/api/index.html
    .venv/bin/python scripts/api_reference.py --output_dir=/tmp/api

pdoc (https://pdoc.dev) imports the modules it documents: the whole stack
(TensorFlow, TFF) is imported, about 10 s.
"""

import os
import sys

from tff_priv import cli

cli.quiet(sys.argv)  # Before TensorFlow is imported.

# pylint: disable=g-import-not-at-top,g-bad-import-order
import pathlib

from absl import flags
import pdoc

from tff_priv import runtime

# pylint: enable=g-import-not-at-top,g-bad-import-order

_VERBOSE = cli.define_verbose()
_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir',
    os.path.join('docs', 'api'),
    'Where the HTML pages are written (created; index.html is the start).',
)
_CLI = cli.Cli('api_reference.py', doc=__doc__, key_modules=(__name__,))
# The packages a user imports from (each documents its exported names).
MODULES = ('tff_priv',)


def main(argv):
  if len(argv) > 1:
    _CLI.fail(f'unexpected arguments: {argv[1:]}')
  output = pathlib.Path(_OUTPUT_DIR.value)
  try:
    output.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    _CLI.fail(f'cannot create --output_dir {output}: {e.strerror}')
  # TFF starts its local executor's service at import (pdoc would refuse
  # that subprocess); tracked, it is stopped cleanly at exit.
  os.environ.setdefault('PDOC_ALLOW_EXEC', '1')
  runtime.track_workers()
  pdoc.render.configure(docformat='google', show_source=False)
  pdoc.pdoc(*MODULES, output_directory=output)
  print(os.path.join(output, 'index.html'))


def entry():
  _CLI.run(main)


if __name__ == '__main__':
  entry()
