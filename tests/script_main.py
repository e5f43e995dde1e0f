"""Calls one script's main() on several argument lists in one interpreter."""

import contextlib
import importlib.util
import io
import json
import os
import sys


def _code(e: SystemExit) -> int:
  if e.code is None:
    return 0
  return e.code if isinstance(e.code, int) else 1


def run_cases(name: str, cases: list) -> list:
  """[{returncode, stdout, stderr}] of scripts/<name>'s main() on each case.

      python -m tests.script_main <script under scripts/>
          <JSON list of argument lists>

  The script tests' usage cases (bad flags, a refused directory, a second
  invocation) start this once rather than one interpreter per case: the script
  is loaded as a module once, and for each case its flags are reset, parsed (the
  script's own `_CLI.parse_flags`, else absl's) and `main` called, with stdout
  and stderr captured. Prints one JSON list: per case its `returncode` (a
  SystemExit's code, 0 when main returns), `stdout` and `stderr`. A case that
  leaves through `os._exit` (the scripts' failure exit) ends the driver: such a
  case belongs in a subprocess test of its own (`script_runs.run`).
  """
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  path = os.path.join(root, 'scripts', name)
  sys.argv = [path, *(cases[0] if cases else [])]  # Read at import by some.
  spec = importlib.util.spec_from_file_location(f'{name[:-3]}_script', path)
  script = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(script)
  from absl import flags  # pylint: disable=g-import-not-at-top

  parse = getattr(getattr(script, '_CLI', None), 'parse_flags', flags.FLAGS)
  results = []
  for args in cases:
    out, err = io.StringIO(), io.StringIO()
    flags.FLAGS.unparse_flags()
    sys.argv = [path, *args]
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      try:
        script.main(parse([name, *args]))
      except SystemExit as e:
        code = _code(e)
    results.append(
        {'returncode': code, 'stdout': out.getvalue(), 'stderr': err.getvalue()}
    )
  return results


if __name__ == '__main__':
  _results = run_cases(sys.argv[1], json.loads(sys.argv[2]))
  sys.stdout.write(json.dumps(_results) + '\n')
  from tff_priv import cli  # pylint: disable=g-import-not-at-top

  cli.exit_now(0)  # Stops the TFF workers; no teardown noise.
