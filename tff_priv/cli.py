"""Command-line conventions of tff_priv's scripts.

Bad usage ends with one line on stderr, `<prog>: error: <message> (see --help)`,
and exit status 2, including flag-parsing errors, which absl would otherwise
report over several lines with status 1. `Cli.run` is the scripts' entry
point: a failing exit leaves without interpreter teardown, in which TFF's
default execution context fails noisily ("Exception ignored ... Popen")
after the one line.
"""

import logging as std_logging
import os
import re
import signal
import sys
import threading
from typing import Any, Callable, Optional, Sequence

from absl import app
from absl import flags
from absl import logging as absl_logging


def quiet_environment(argv: list[str]) -> bool:
  """Silences TF's and gRPC's C++ logs unless `--verbose` is in argv.

  Returns whether it is (verbose). Must run before TensorFlow is imported
  (the C++ logger reads the environment once). `--verbose` also keeps
  `runtime.set_context` verbose (`TFF_PRIV_VERBOSE=1`).
  """
  verbose = '--verbose' in argv
  if verbose:
    os.environ.setdefault('TFF_PRIV_VERBOSE', '1')
  else:
    # Over a level of the user's: 2 still shows TF's start-up "E" lines.
    os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'
    # gRPC (TFF's worker channel) logs INFO lines such as its fork notice.
    os.environ['GRPC_VERBOSITY'] = 'ERROR'
  return verbose


def quiet(argv: list[str]) -> bool:
  """`quiet_environment`, and absl's and TF's Python logs at ERROR.

  Unless `--verbose` is in argv. For a script's first lines, before TensorFlow
  is imported (TFF's INFO lines, such as Keras model conversions, go through
  absl). Returns verbose; the script defines the `--verbose` flag
  (`define_verbose`).
  """
  verbose = quiet_environment(argv)
  if not verbose:
    absl_logging.set_verbosity(absl_logging.ERROR)
    std_logging.getLogger('tensorflow').setLevel(std_logging.ERROR)
  return verbose


def define_verbose():
  """The `--verbose` flag of a script that calls `quiet`."""
  return flags.DEFINE_bool(
      'verbose', False, "TF's, TFF's and absl's logs (quiet by default)."
  )


def silence_output() -> int:
  """Sends what any thread writes to stdout / stderr to /dev/null.

  Returns a descriptor of the real stderr. For a stop: TFF's and gRPC's threads
  report the workers the stop ends (finalizers disposing values on a worker
  already gone print "Exception ignored in ..." tracebacks; gRPC logs from C++).
  Everything the process writes from here on is dropped, but for what the caller
  writes to the returned file descriptor (a duplicate of stderr).
  """
  sys.stdout.flush()
  sys.stderr.flush()
  runtime = sys.modules.get('tff_priv.runtime')
  # Not the file `runtime.quiet_logs` may be reading stderr into just now.
  real = os.dup(runtime.real_stderr() if runtime is not None else 2)
  devnull = os.open(os.devnull, os.O_WRONLY)
  os.dup2(devnull, 1)
  os.dup2(devnull, 2)
  os.close(devnull)
  sys.unraisablehook = lambda unraisable: None
  return real


def _remove_autograph_files() -> None:
  """Deletes this process's autograph sources, as TF's atexit hooks would.

  TF's autograph writes each function it converts to a temporary
  `__autograph_generated_file*.py` and deletes it at exit with an `atexit`
  hook, which `os._exit` skips: without this every run of a script would leave
  dozens of them in the temporary directory. They are the files of the
  modules autograph loaded (in `sys.modules` under that prefix), no other
  process's.
  """
  # `dict.copy` runs no Python code, so it is atomic; `list(d.items())`
  # allocates a tuple per item, and a garbage collection it triggers may run
  # a finalizer that imports (TFF's do), changing `sys.modules` mid-listing.
  for name, module in sys.modules.copy().items():
    path = getattr(module, '__file__', None)
    if name.startswith('__autograph_generated_file') and path:
      try:
        os.remove(path)
      except OSError:
        pass  # Gone already (a cleaned temporary directory).


def exit_now(code: int) -> None:
  """Stops tff_priv's TFF workers, flushes, and exits without teardown."""
  runtime = sys.modules.get('tff_priv.runtime')
  if runtime is not None:
    runtime.stop_workers()  # Idempotent.
  _remove_autograph_files()
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)  # pylint: disable=protected-access


class OneLineStop:
  """A block that SIGINT / SIGTERM end with one line and exit 128 + the signal.

  Ctrl-C in a TFF program otherwise prints a KeyboardInterrupt traceback
  from each thread TFF runs (and from its workers' finalizers): the handler
  silences output first (`silence_output`), stops tff_priv's TFF workers,
  runs `cleanup`, writes `<prog>: stopped by SIGINT; <message()>` and leaves
  without interpreter teardown. Outside the main thread it does nothing.

    with cli.OneLineStop('own_loop.py', lambda: 'nothing was saved'):
      ...  # The user's loop.
  """

  def __init__(
      self,
      prog: str,
      message: Callable[[], str],
      cleanup: Optional[Callable[[], None]] = None,
  ):
    self._prog, self._message, self._cleanup = prog, message, cleanup
    self._previous = {}

  def _on_signal(self, signum, frame):
    del frame
    stderr = silence_output()  # TFF's threads report the stop.
    runtime = sys.modules.get('tff_priv.runtime')
    if runtime is not None:
      runtime.stop_workers()
    if self._cleanup is not None:
      self._cleanup()
    os.write(
        stderr,
        (
            f'{self._prog}: stopped by {signal.Signals(signum).name}; '
            f'{self._message()}\n'
        ).encode(),
    )
    os._exit(128 + signum)  # pylint: disable=protected-access

  def __enter__(self) -> 'OneLineStop':
    if threading.current_thread() is threading.main_thread():
      for signum in (signal.SIGINT, signal.SIGTERM):
        self._previous[signum] = signal.signal(signum, self._on_signal)
    return self

  def __exit__(self, *exc) -> bool:
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}
    return False


_HELP_FLAGS = ('--help', '-h', '-?', '--helpfull', '--helpshort')


class Cli:
  """The error and flag-parsing behaviour of one script.

  Args:
    prog: the name in error lines.
    doc: the script's docstring, shown by `--help` also when the script
      runs as a console command (whose `__main__` is pip's stub).
    key_modules: the script's module name and the modules whose flags it
      uses (e.g. `run_flags`): their flags are listed by `--help`, not only
      by `--helpfull`.
  """

  def __init__(
      self,
      prog: str,
      *,
      doc: Optional[str] = None,
      key_modules: Sequence[Any] = (),
  ):
    self.prog = prog
    self._doc = doc
    self._key_modules = tuple(key_modules)

  def _main_module_help(self) -> None:
    """Makes `--help` show the script's docstring and its key flags."""
    main = sys.modules.get('__main__')
    if self._doc and main is not None and not getattr(main, '__doc__', None):
      # A console command (pip's stub is `__main__`): its usage lines name
      # the command, not the clone's `.venv/bin/python scripts/<prog>`.
      command = os.path.basename(sys.argv[0])
      main.__doc__ = re.sub(
          r'(?:(?:\S*/)?python[\d.]*\s+)?scripts/' + re.escape(self.prog),
          command,
          self._doc,
      )
    for module in self._key_modules:
      for flag in flags.FLAGS.get_key_flags_for_module(module):
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)

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
    """`absl.app.run(main)` with this script's flag parsing.

    Bad usage and failing exits as the module docstring says. `--help`
    (and `-h`, `-?`, `--helpfull`, `--helpshort`) exits 0 after the help,
    not absl's 1.
    """
    asked_help = any(a in _HELP_FLAGS for a in sys.argv[1:])
    self._main_module_help()
    if 'tensorflow_federated' in sys.modules:
      # Its exit hook also finalises TFF's default context while modules are
      # intact: no "Exception ignored in ... ServiceManager.__del__" at exit.
      from tff_priv import runtime  # pylint: disable=g-import-not-at-top

      runtime.track_workers()
    try:
      app.run(main, flags_parser=self.parse_flags)
    except SystemExit as e:
      if 'tensorflow_federated' in sys.modules:
        # Imported by `main` (a run's files read through TF): the same exit
        # hook, registered now, still runs before interpreter teardown.
        from tff_priv import runtime  # pylint: disable=g-import-not-at-top

        runtime.track_workers()
      if asked_help and e.code == 1:
        exit_now(0)  # Without teardown (TFF's noisy __del__), as failures.
      if e.code not in (None, 0):
        exit_now(e.code if isinstance(e.code, int) else 1)
      raise
