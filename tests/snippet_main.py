"""Runs Python snippets in one interpreter, each as a script of its own."""

import contextlib
import io
import json
import os
import sys
import tempfile


def run_snippets(codes: list) -> list:
  """The stdout of each snippet, run in turn.

    python -m tests.snippet_main < snippets.json  # A JSON list of code strings.

  For the README's leak checks, whose variants of one snippet (the same input
  twice, a neighbouring input once) need not each pay an interpreter and
  TensorFlow's import: each snippet is executed in fresh globals
  (`__name__ == '__main__'`) in a fresh temporary working directory, its
  stdout captured. Prints one JSON list of the snippets' stdouts; a snippet
  that raises ends the driver with its traceback (exit 1).
  """
  outputs = []
  start = os.getcwd()
  for i, code in enumerate(codes):
    with tempfile.TemporaryDirectory() as tmp:
      os.chdir(tmp)
      out = io.StringIO()
      try:
        with contextlib.redirect_stdout(out):
          exec(
              compile(code, f'snippet_{i}.py', 'exec'),  # pylint: disable=exec-used
              {'__name__': '__main__'},
          )
      finally:
        os.chdir(start)
      outputs.append(out.getvalue())
  return outputs


if __name__ == '__main__':
  _outputs = run_snippets(json.loads(sys.stdin.read()))
  sys.stdout.write(json.dumps(_outputs) + '\n')
  sys.stdout.flush()
  from tff_priv import cli  # pylint: disable=g-import-not-at-top

  cli.exit_now(0)  # Stops the TFF workers; no teardown noise.
