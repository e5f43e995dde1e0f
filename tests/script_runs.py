"""Runs the repository's scripts in subprocesses, for the script tests."""

import dataclasses
import json
import os
import subprocess
import sys
import threading

from tests import procfs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 900  # Seconds; a run that takes longer is a failure.


def script_path(name: str) -> str:
  """scripts/<name> in this checkout."""
  return os.path.join(ROOT, 'scripts', name)


def env():
  return {**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2', 'PYTHONPATH': ROOT}


def start(name: str, *args: str) -> subprocess.Popen:
  """scripts/<name> started with `args`, its stdout and stderr piped (text).

  Every script test starts its script through `start` or `run`: the interpreter
  running the tests, the script by its name under scripts/, this checkout's
  library first on the path (not whichever tff_priv is installed), TF's C++ logs
  off, the repository root as the working directory. `Watched` also records the
  TFF workers a run starts, to check that none outlives it.
  """
  return subprocess.Popen(
      [sys.executable, script_path(name), *args],
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
      cwd=ROOT,
      env=env(),
  )


def run(name: str, *args: str, timeout: float = TIMEOUT):
  """scripts/<name> run to its end: a `subprocess.CompletedProcess` (text)."""
  return subprocess.run(
      [sys.executable, script_path(name), *args],
      capture_output=True,
      text=True,
      cwd=ROOT,
      env=env(),
      timeout=timeout,
      check=False,
  )


def run_main(name: str, *cases, timeout: float = TIMEOUT) -> list:
  """scripts/<name>'s main() on each argument list, in one interpreter.

  A `subprocess.CompletedProcess` per case (`tests/script_main.py`): for
  usage cases (flags, refusals), which need not pay an interpreter and
  TensorFlow's import each.
  """
  proc = subprocess.run(
      [
          sys.executable,
          '-m',
          'tests.script_main',
          name,
          json.dumps([list(c) for c in cases]),
      ],
      capture_output=True,
      text=True,
      cwd=ROOT,
      env=env(),
      timeout=timeout,
      check=False,
  )
  if proc.returncode != 0 or not proc.stdout.strip():
    raise AssertionError(
        f'tests.script_main {name} failed ({proc.returncode}): '
        f'{proc.stderr[-3000:]}'
    )
  return [
      subprocess.CompletedProcess(
          [name, *c], r['returncode'], r['stdout'], r['stderr']
      )
      for c, r in zip(cases, json.loads(proc.stdout.strip().splitlines()[-1]))
  ]


def last_line(text: str) -> str:
  """The last non-blank line of `text` ('' if none)."""
  lines = [l for l in text.strip().splitlines() if l.strip()]
  return lines[-1] if lines else ''


@dataclasses.dataclass
class Result:
  """A watched run's end: its status, output, and the workers it started."""

  returncode: int
  stdout: str
  stderr: str
  children: set
  survivors: list


class Watched:
  """A running script whose child processes are recorded while it runs."""

  def __init__(self, name: str, *args: str):
    self.proc = start(name, *args)
    self.children = set()
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._watch, daemon=True)
    self._thread.start()

  def _watch(self):
    while not self._stop.is_set():
      self.children |= procfs.children(self.proc.pid)
      self._stop.wait(0.2)

  def finish(self, gone_within: float = 15.0) -> Result:
    """Waits for the end; `survivors`: children alive `gone_within` s later."""
    try:
      out, err = self.proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
      self.proc.kill()
      out, err = self.proc.communicate()
      err += '\n[test] TIMEOUT: output pipes stayed open (a surviving worker?)'
    self._stop.set()
    self._thread.join()
    return Result(
        self.proc.returncode,
        out,
        err,
        self.children,
        procfs.wait_gone(self.children, gone_within),
    )
