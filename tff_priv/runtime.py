"""The TFF execution context used by tff_priv, and the worker process it owns.

TFF 0.87 runs computations in a C++ `worker_binary` that the execution context
starts as a child process on first use and stops only from a `__del__` that
does not run at interpreter exit, so by default the worker outlives the Python
process; this module is the one place that fixes that. `set_context()`
installs a TFF execution context ('simulation', 'native' or 'remote') and
guarantees that every worker binary started in this process is stopped when
the process ends (at exit, on a signal, and on Linux by the parent-death
signal); `track_workers()` gives the exit and parent-death guarantees alone,
in whatever context is current.
"""

import asyncio
import atexit
import contextlib
import ctypes
import ctypes.util
import logging as std_logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
import weakref

from absl import logging

from tff_priv import executors

_CONTEXTS = ('simulation', 'native', 'remote')
_HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1
_STOP_TIMEOUT_SECONDS = 5.0

_lock = threading.Lock()
_workers: list[subprocess.Popen] = []
_installed = False
_previous_handlers: dict[int, object] = {}
_current_kind = None
# Set once the last early worker start (`start_worker=True`) has ended.
_early_start = None

VERBOSE_ENV = 'TFF_PRIV_VERBOSE'
# The C++ log lines `quiet_logs` drops from what is written while TFF
# compiles and while the worker starts: TF's INFO / WARNING / ERROR lines
# ("2026-01-01 00:00:00.000000: I tensorflow/...", what TF_CPP_MIN_LOG_LEVEL=3
# drops: Grappler's, as "E ... Failed to detect the fetch node(s)") and
# absl's INFO / WARNING ones (gRPC's, "I0000 00:00:1700000000.000000   123
# fork_posix.cc:71] ...", and its preamble). Fatal lines, exceptions and
# anything else are kept.
_CPP_LOG_LINE = re.compile(
    rb'(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] '
    rb'|[IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\] '
    rb'|WARNING: All log messages before absl::InitializeLog\(\) is called)'
)
# tff_priv's and tff_priv_tasks' modules (`_QuietFilter`).
# The libraries whose log records below ERROR quiet mode drops (the
# caller's own records, and tff_priv's, pass).
_QUIET_PACKAGES = (
    'tensorflow',
    'tensorflow_federated',
    'tensorflow_privacy',
    'absl',
    'jax',
    'grpc',
    'keras',
)
_quiet = False
# Where `quiet_logs` reads stderr: 'compile' (TF loaded before its C++ logs
# could be turned off), 'fork' (gRPC loaded before its logs could be).
_filtered = set()
_capture_lock = threading.Lock()
_capture = None  # [depth, the real stderr (a dup), the capture file]


def dies_with_this_process():
  """A `preexec_fn`: the forked child dies with SIGKILL when this process dies.

  The kernel sends the signal only for a parent that dies after the prctl
  call: a parent that ended between the fork and it (a worker TFF restarts
  while a stopped run exits) would leave the child running, holding the
  run's output pipes. The child checks for that and exits before exec. It
  also takes SIGINT's default action again, the signal TFF and
  `stop_workers` stop it with: a program started in the background by a
  script (`python train.py &`, nohup) ignores SIGINT, ignored signals survive
  exec, and every stop of its worker then waited for the SIGKILL fallback.
  """
  parent = os.getpid()

  def set_signal():
    libc_name = ctypes.util.find_library('c')
    if not libc_name:
      return
    libc = ctypes.CDLL(libc_name, use_errno=True)
    libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
    libc.signal.restype = ctypes.c_void_p
    libc.signal(signal.SIGINT, None)  # SIG_DFL, the null handler.
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
      os._exit(1)  # pylint: disable=protected-access

  return set_signal


def _verbose_env() -> bool:
  return os.environ.get(VERBOSE_ENV, '').strip().lower() in ('1', 'true', 'yes')


def _library_record(pathname: str) -> bool:
  """Whether a log record comes from one of `_QUIET_PACKAGES`."""
  parts = os.path.normpath(os.path.abspath(pathname)).split(os.sep)
  installed = [
      parts[i + 1]
      for i, p in enumerate(parts[:-1])
      if p in ('site-packages', 'dist-packages')
  ]
  return (
      bool(installed)
      and installed[-1] in _QUIET_PACKAGES
      and (
          # TFF's LoggingReleaseManager writes a run's releases to the log.
          os.path.basename(pathname)
          != 'logging_release_manager.py'
      )
  )


class _QuietFilter(std_logging.Filter):
  """Drops the libraries' records below ERROR; passes everything else."""

  def filter(self, record):
    return (
        not _quiet
        or record.levelno >= std_logging.ERROR
        or not _library_record(record.pathname)
    )


_QUIET_FILTER = _QuietFilter()


def quiet_logs() -> None:
  """Silences TF's, TFF's, gRPC's and absl's logs (warnings and below).

  What `set_context()` does unless verbose. Before TensorFlow loads it turns
  off its C++ logs (`TF_CPP_MIN_LOG_LEVEL=3`, `GRPC_VERBOSITY=ERROR`, over
  the environment's: the lines TF prints as it loads can only be silenced
  so); after, it
  still silences the TFF worker (started later, with this environment), TF's
  and absl's Python loggers, and the C++ log lines TF and gRPC print in
  this process while TFF compiles a computation and starts its worker
  (stderr is read then, and all else written to it passed on). Log records
  of the caller's and tff_priv's own modules, Python errors and exceptions
  are kept.
  """
  global _quiet
  tf_level = os.environ.get('TF_CPP_MIN_LOG_LEVEL', '0').strip()
  if 'tensorflow' in sys.modules and tf_level not in ('2', '3'):
    _filtered.add('compile')
  grpc_level = os.environ.get('GRPC_VERBOSITY', '').strip().upper()
  if 'grpc' in sys.modules and grpc_level not in ('ERROR', 'NONE'):
    _filtered.add('fork')
  # Over a level of the user's (2 still shows TF's start-up "E" lines):
  # verbose leaves them as set.
  os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'
  os.environ['GRPC_VERBOSITY'] = 'ERROR'
  _quiet = True
  for name in ('absl', 'tensorflow', 'tensorflow_federated'):
    logger = std_logging.getLogger(name)
    if _QUIET_FILTER not in logger.filters:
      logger.addFilter(_QUIET_FILTER)


def _set_logs(verbose: bool) -> None:
  """`quiet_logs()`, unless verbose: then undoes it where it can.

  TF's C++ log level is read once.
  """
  global _quiet
  if not (verbose or _verbose_env()):
    quiet_logs()
    return
  _quiet = False
  _filtered.clear()


@contextlib.contextmanager
def _cpp_logs_filtered(when: str):
  """Within: stderr (fd 2) is read, and passed on without `_CPP_LOG_LINE`s.

  Only `when` ('compile', 'fork') is in `_filtered`. Yields the real
  stderr's descriptor. Nests, and spans threads: what any thread writes
  within is passed on, in order, when the last block ends.
  """
  global _capture
  if when not in _filtered:
    yield 2
    return
  with _capture_lock:
    if _capture is None:
      sys.stderr.flush()
      capture = tempfile.TemporaryFile()
      real = os.dup(2)
      os.dup2(capture.fileno(), 2)
      _capture = [0, real, capture]
    _capture[0] += 1
    real = _capture[1]
  try:
    yield real
  finally:
    with _capture_lock:
      _capture[0] -= 1
      if not _capture[0]:
        _, real, capture = _capture
        _capture = None
        sys.stderr.flush()
        os.dup2(real, 2)
        os.close(real)
        capture.seek(0)
        kept = b''.join(
            line
            for line in capture.read().splitlines(True)
            if not _CPP_LOG_LINE.match(line)
        )
        capture.close()
        if kept:
          os.write(2, kept)


def real_stderr() -> int:
  """The process's stderr descriptor, also while `quiet_logs` reads it."""
  with _capture_lock:
    return _capture[1] if _capture is not None else 2


def _quiet_compiler(context) -> None:
  """Compiles in `_cpp_logs_filtered` (TFF runs Grappler in this process)."""
  holders = []
  while context is not None and len(holders) < 8:  # Through the wrappers.
    holders += [context, getattr(context, '_async_context', None)]
    context = getattr(context, '_context', None)
  for holder in holders:
    pipeline = getattr(holder, '_compiler_pipeline', None)
    compile_fn = getattr(pipeline, '_compiler_fn', None)
    if compile_fn is None or getattr(compile_fn, 'quiet', False):
      continue

    def quiet_compile(comp, compile_fn=compile_fn):
      with _cpp_logs_filtered('compile'):
        return compile_fn(comp)

    quiet_compile.quiet = True
    pipeline._compiler_fn = quiet_compile  # pylint: disable=protected-access


def _fileno(stream):
  """`stream`'s file descriptor (None: inherited, or none)."""
  if stream is None or isinstance(stream, int):
    return stream
  try:
    return stream.fileno()
  except (AttributeError, OSError, ValueError):
    return None


class _TrackedPopen(subprocess.Popen):
  """`subprocess.Popen` that registers the process as a TFF worker of ours."""

  def __init__(self, *args, **kwargs):
    # gRPC logs its fork handlers in this process as the worker forks.
    with _cpp_logs_filtered('fork') as real:
      self._start(real, *args, **kwargs)

  def _start(self, real_stderr_fd, *args, **kwargs):
    if sys.platform.startswith('linux') and kwargs.get('preexec_fn') is None:
      # Linux delivers the parent-death signal when the *thread* that forked
      # the child exits. TFF starts its worker from the thread of its sync
      # context's event loop, which lives as long as the context; the atexit
      # and signal hooks below do not depend on this at all.
      kwargs['preexec_fn'] = dies_with_this_process()
    for name in ('stdout', 'stderr'):
      # TFF hands the worker sys.stdout and sys.stderr, which fails on a
      # stream without a file (`contextlib.redirect_stderr(StringIO())`):
      # the worker then writes to the process's own.
      stream = kwargs.get(name)
      if stream is not None and not isinstance(stream, int):
        try:
          stream.fileno()
        except (AttributeError, OSError, ValueError):
          kwargs[name] = getattr(sys, f'__{name}__')
    if real_stderr_fd != 2 and _fileno(kwargs.get('stderr')) in (None, 2):
      kwargs['stderr'] = real_stderr_fd  # Not the capture: the real stderr.
    super().__init__(*args, **kwargs)
    self.started_by = threading.get_ident()
    with _lock:
      _workers.append(self)
    logging.debug('tff_priv.runtime: started TFF worker pid %d', self.pid)


def _running(proc: subprocess.Popen) -> bool:
  """Whether `proc` has not exited; never reaps it (see `stop_workers`)."""
  if proc.returncode is not None:
    return False
  try:
    return (
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        is None
    )
  except ChildProcessError:
    return False


def worker_pids() -> list[int]:
  """PIDs of the TFF workers started by this process that are still running."""
  with _lock:
    return [p.pid for p in _workers if _running(p)]


def stop_workers(timeout: float = _STOP_TIMEOUT_SECONDS) -> None:
  """Stops every TFF worker this process started (SIGINT, then SIGKILL).

  Safe to call more than once and from a signal handler. A stopped worker is
  left unreaped (a zombie until TFF or the exit of this process reaps it):
  TFF's service manager signals and waits on its worker's PID before starting
  a fresh one, which must not fail on a PID that no longer exists. So a
  computation after `stop_workers()` transparently starts a new worker.
  """
  # From a signal handler the interrupted thread may hold the lock: never
  # wait on it for long (the list is only read then).
  locked = _lock.acquire(timeout=1.0)
  try:
    procs = [p for p in list(_workers) if _running(p)]
    if locked:
      _workers[:] = procs
  finally:
    if locked:
      _lock.release()
  # A worker whose start raced this stop (forked, not yet registered) is
  # still a child of this process running TFF's worker binary.
  strays = _untracked_worker_children({p.pid for p in procs})
  _stop(procs, strays, timeout)
  if _lock.acquire(timeout=1.0):
    try:
      _workers[:] = [p for p in _workers if _running(p)]
    finally:
      _lock.release()


def _stop(procs, strays, timeout: float) -> None:
  """SIGINT to `procs` and the PIDs `strays`, then SIGKILL; reaps none."""
  for pid in [p.pid for p in procs] + strays:
    try:
      os.kill(pid, signal.SIGINT)  # How TFF itself asks the worker to stop.
    except ProcessLookupError:
      pass
  deadline = time.monotonic() + timeout
  for p in procs:
    while _running(p) and time.monotonic() < deadline:
      time.sleep(0.02)
    if _running(p):
      os.kill(p.pid, signal.SIGKILL)
      try:
        os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
      except ChildProcessError:
        pass
  for pid in strays:
    while _child_alive(pid) and time.monotonic() < deadline:
      time.sleep(0.02)
    if _child_alive(pid):
      try:
        os.kill(pid, signal.SIGKILL)
      except ProcessLookupError:
        pass


def _proc_stat(pid: int):
  """(state, ppid) of `pid` from /proc, or None."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      fields = f.read().rsplit(')', 1)[1].split()
  except OSError:
    return None
  return fields[0], int(fields[1])


def _child_alive(pid: int) -> bool:
  stat = _proc_stat(pid)
  return stat is not None and stat[0] != 'Z' and stat[1] == os.getpid()


def _untracked_worker_children(tracked: set) -> list[int]:
  """Live children of this process running TFF's worker binary, not tracked."""
  if not os.path.isdir('/proc'):
    return []
  found = []
  for entry in os.listdir('/proc'):
    if not entry.isdigit() or int(entry) in tracked:
      continue
    if not _child_alive(int(entry)):
      continue
    try:
      with open(f'/proc/{entry}/cmdline', 'rb') as f:
        if b'worker_binary' in f.read():
          found.append(int(entry))
    except OSError:
      continue
  return found


def _on_signal(signum, frame):
  stop_workers()
  previous = _previous_handlers.get(signum, signal.SIG_DFL)
  if callable(previous):
    previous(signum, frame)
    return
  if previous == signal.SIG_IGN:
    return
  # Default action: die of the same signal, so the exit status says so.
  signal.signal(signum, signal.SIG_DFL)
  os.kill(os.getpid(), signum)


def _install_signal_handlers() -> None:
  if threading.current_thread() is not threading.main_thread():
    logging.warning(
        'tff_priv.runtime: set_context() called off the main thread; signal '
        'handlers not installed (atexit and parent-death cleanup still apply).'
    )
    return
  for signum in _HANDLED_SIGNALS:
    current = signal.getsignal(signum)
    if current is _on_signal:
      continue
    if signum != signal.SIGTERM and current not in (
        signal.SIG_DFL,
        signal.default_int_handler,
    ):
      # The program handles SIGINT/SIGHUP itself; atexit still stops workers.
      continue
    _previous_handlers[signum] = current
    signal.signal(signum, _on_signal)


def track_workers() -> None:
  """Stops at exit every TFF worker started from now on, whatever the context.

  `set_context()` does this and more (signal handlers, a context); this alone
  leaves the execution context as it is, for code that runs computations in
  TFF's default context (`tff_priv.program.training.run` calls it). Covers
  normal exit, uncaught exceptions and (on Linux) the death of this process;
  a worker started before the call is not tracked. Idempotent.
  """
  _install_worker_tracking()


def _install_worker_tracking() -> None:
  """Routes TFF's worker start through `_TrackedPopen` (idempotent).

  How: TFF's `local_cpp_executor_factory` starts the worker with
  `subprocess.Popen` through the `subprocess` name of its own module. We give
  that module (and only that module) a proxy of `subprocess` whose `Popen`
  records the process and sets the parent-death signal. TFF has no hook for
  this; the proxy is checked against the pinned TFF (0.87) by
  tests/runtime_test.py.
  """
  global _installed
  if _installed:
    return
  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.executor_stacks import (
      executor_factory,
  )
  # pylint: enable=g-import-not-at-top

  current = getattr(executor_factory, 'subprocess', None)
  if current is None or not hasattr(current, 'Popen'):
    raise RuntimeError(
        'tff_priv.runtime: this TensorFlow Federated does not start its worker '
        'through executor_factory.subprocess.Popen; tff_priv supports TFF '
        '0.87 (see requirements-nodeps.txt).'
    )
  # A plain namespace, not a module object: at interpreter shutdown Python
  # clears the dicts of module objects, and TFF's `ServiceManager.__del__`
  # still reads `subprocess.Popen` then.
  proxy = types.SimpleNamespace(**vars(subprocess))
  proxy.Popen = _TrackedPopen
  executor_factory.subprocess = proxy
  atexit.register(_at_exit)
  _installed = True


def _at_exit() -> None:
  # TFF's contexts are finalized after this by `tff_priv._exit`'s hook.
  stop_workers()


def set_context(
    kind: str = 'simulation',
    *,
    default_num_clients: int = 0,
    program: bool = False,
    workers=None,
    timeout: float = 30.0,
    start_worker: bool = False,
    verbose: bool = False,
):
  """Sets TFF's default execution context, with worker cleanup guaranteed.

  Left to TFF, a pipe that reads the script's output never closes and orphans
  pile up. Here every worker binary started in this process is stopped when
  the process ends:

  * normal exit and uncaught exceptions: an `atexit` hook;
  * SIGTERM (and SIGINT / SIGHUP when no handler of the program's own is set):
    a handler that stops the workers, then lets the signal take its usual
    effect (the previous handler runs, or the process dies of the signal);
  * SIGKILL or any other death that runs no Python code: on Linux every worker
    is started with `PR_SET_PDEATHSIG` so the kernel kills it when its parent
    dies (a worker forked while its parent was exiting, which the kernel would
    not signal, exits by itself; `stop_workers` also stops a worker whose start
    raced it, found among this process's children).

  Every context made here keeps `executors.KEPT` executors (one per client
  count) and closes those it drops (`tff_priv.executors`): TFF's own cache
  leaves them on the worker, whose memory then grows with every new count. A
  local synchronous context (`program=False`) also starts a fresh worker after
  `executors.RESTART_AFTER` closed executors, before its next new client count:
  a closed executor still leaves part of its memory on the worker. Such a
  context runs one computation at a time (called from one thread); the
  asynchronous one may run several, which a restart would cut short, and keeps
  its worker.

  Args:
    kind: one of
      * ``'simulation'`` (default): TFF's test C++ context. Secure-aggregation
        intrinsics (`federated_secure_sum`, `federated_secure_sum_bitwidth`,
        ...) are simulated by their plain bodies, as TFF does for its own
        tests, so factories built on `tff.aggregators.SecureSumFactory` run in
        simulation. The values are the ones secure aggregation would produce;
        the cryptography is not run.
      * ``'native'``: TFF's default local C++ context (no secure intrinsics:
        `check_secure_intrinsics` refuses factories that need them, in one
        line).
      * ``'remote'``: TFF workers already running at `workers` ('host:port',
        one each, e.g. started with ``python -m tff_priv.worker --port=P``),
        merged by TFF's mergeable-computation context, which splits each
        computation's clients across the workers and merges their aggregates
        (`tff_priv.remote`). Secure sums are simulated as in 'simulation'.
        tff_priv starts no process for it: the workers are the caller's.
    default_num_clients: the client cardinality used when a computation's
      arguments do not determine it.
    program: False installs TFF's synchronous context (computations return
      values; call it from one thread: it restarts its worker between
      computations, see above); True installs a
      `tff.program.NativeFederatedContext` over the asynchronous one, for
      `tff.program` and `tff.learning.programs.train_model`.
    workers: kind 'remote': the workers' 'host:port' addresses.
    timeout: kind 'remote': seconds to wait for each worker at start, and for
      a worker that stops answering mid-computation before it fails.
    start_worker: kinds 'simulation' and 'native': start TFF's worker now, on
      a thread of its own (the training scripts do), rather than at the first
      computation (it takes about a second to answer, which then overlaps the
      caller's tracing instead of delaying the first computation).
    verbose: keep TF's, TFF's, gRPC's and absl's logs (so does
      `TFF_PRIV_VERBOSE=1` in the environment); else `quiet_logs()`, before TF
      loads if it can (warnings and below are silenced; tff_priv's own
      warnings and every exception stay).

  Returns:
    The installed context.

  Raises:
    ValueError: `kind` is not one of the contexts above, or
      `default_num_clients` is negative, or 'remote' without workers or with
      `start_worker`.
    tff_priv.remote.WorkerLostError (a ConnectionError): kind 'remote' and a
      worker does not answer (one line naming its address).
  """
  if kind not in _CONTEXTS:
    raise ValueError(f'kind must be one of {_CONTEXTS}, got {kind!r}')
  if default_num_clients < 0:
    raise ValueError(
        f'default_num_clients must be >= 0, got {default_num_clients}'
    )
  _set_logs(verbose)  # Before TensorFlow loads, when it has not yet.
  return _install_context(
      kind, default_num_clients, program, workers, timeout, start_worker
  )


def _install_context(
    kind, default_num_clients, program, workers, timeout, start_worker
):
  """`set_context` once its first arguments are checked and the logs set."""
  global _current_kind
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  if (kind == 'remote') != (workers is not None):
    raise ValueError("workers are given with kind='remote', and only then")
  if kind == 'remote' and start_worker:
    raise ValueError(
        "start_worker applies to the local contexts: kind='remote' uses "
        'workers already running'
    )
  _install_worker_tracking()
  _install_signal_handlers()
  if _early_start is not None:
    # A worker still starting for the context we replace would start after
    # the stop below and live until exit.
    _early_start.wait(timeout)
  # Workers of a context we replace would otherwise live until exit.
  stop_workers()
  if kind == 'remote':
    from tff_priv import remote  # pylint: disable=g-import-not-at-top

    context = remote.create_context(
        workers,
        default_num_clients=default_num_clients,
        timeout=timeout,
        program=program,
    )
  else:
    context = _local_context(
        tff, kind, default_num_clients, program, start_worker
    )
  _quiet_compiler(context)
  tff.framework.set_default_context(context)
  _current_kind = kind
  return context


def _local_context(tff, kind, default_num_clients, program, start_worker):
  """The 'simulation' or 'native' context of `set_context`."""
  # TFF's test context simulates the secure intrinsics; the native one has
  # none. train_model and tff.program need the async one, wrapped.
  backend = tff.backends.test if kind == 'simulation' else tff.backends.native
  mode = 'async' if program else 'sync'
  flavour = 'test' if kind == 'simulation' else 'local'
  create = getattr(backend, f'create_{mode}_{flavour}_cpp_execution_context')
  context = create(default_num_clients=default_num_clients)
  # The async context (program=True) may run computations side by side
  # (train_model's evaluations), which a worker restart would cut short.
  executors.close_evicted(
      context.executor_factory,
      restart=None
      if program
      else _worker_restart(context.executor_factory, default_num_clients),
  )
  if start_worker:
    _start_worker_early(context.executor_factory, default_num_clients)
  _refusals_in_one_line(context)
  if program:
    context = tff.program.NativeFederatedContext(context)
  return context


def _refusals_in_one_line(context) -> None:
  """Makes `context` raise a refused round as one line.

  A calibrated factory's refusal of a round past its plan comes out as
  `plan.PlanExceededError` in one line (TFF raises it as a gRPC or TF error of
  many lines, the message inside).
  """
  from tff_priv.aggregators import plan  # pylint: disable=g-import-not-at-top

  # Weakly: the context holds `checked`, which would otherwise hold the
  # context (a cycle only the cyclic GC frees, after TFF's worker is gone).
  invoke_ref = weakref.WeakMethod(context.invoke)

  def invoke(comp, arg):
    return invoke_ref()(comp, arg)

  def refused(e: Exception):
    message = plan.one_line(e)
    return None if message is None else plan.PlanExceededError(message)

  if asyncio.iscoroutinefunction(context.invoke):

    async def checked(comp, arg):
      try:
        return await invoke(comp, arg)
      except Exception as e:  # pylint: disable=broad-except
        error = refused(e)
        if error is None:
          raise
        raise error from None

  else:

    def checked(comp, arg):
      try:
        return invoke(comp, arg)
      except Exception as e:  # pylint: disable=broad-except
        error = refused(e)
        if error is None:
          raise
        raise error from None

  context.invoke = checked


def _service_manager(stack_fn):
  """TFF 0.87's `ServiceManager` (which owns the worker) of a stack function."""
  managers = [
      cell.cell_contents
      for cell in getattr(stack_fn, '__closure__', None) or ()
      if hasattr(cell.cell_contents, 'get_stub')
  ]
  if len(managers) != 1:
    raise RuntimeError(
        'tff_priv.runtime: cannot find the worker of this TFF executor '
        'factory; tff_priv supports TFF 0.87 (see requirements-nodeps.txt).'
    )
  return managers[0]


def _worker_restart(factory, default_num_clients: int):
  """A `restart` for `executors.close_evicted` on the local TFF `factory`.

  It stops the worker of the executor stack function it is given (TFF 0.87's
  `local_cpp_executor_factory` keeps it in the `ServiceManager` that function
  closes over) and returns the stack function of a new TFF factory, whose
  worker starts at its first executor. The old `ServiceManager` reaps the
  stopped worker when the old function is dropped.

  Raises:
    RuntimeError: `factory` is not TFF 0.87's (checked now, not at the
      first restart).
  """
  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.executor_stacks import (
      executor_factory,
  )
  # pylint: enable=g-import-not-at-top

  _service_manager(factory._executor_stack_fn)  # pylint: disable=protected-access

  def restart(stack_fn):
    process = _service_manager(stack_fn)._process  # pylint: disable=protected-access
    if process is not None:
      _stop([process], [], _STOP_TIMEOUT_SECONDS)
    logging.debug('tff_priv.runtime: restarting the TFF worker')
    return executor_factory.local_cpp_executor_factory(
        default_num_clients=default_num_clients
    )._executor_stack_fn  # pylint: disable=protected-access

  return restart


def _start_worker_early(factory, default_num_clients: int) -> None:
  """Starts `factory`'s worker on a thread of its own, now.

  TFF starts the worker (and waits, polling every second, until it answers)
  inside `create_executor` at the first computation. A thread does that here
  while the caller goes on tracing; the factory's `create_executor` takes a
  lock, so the first computation waits for this start instead of racing it
  (TFF's service manager would start a second worker). The thread then stays
  until that worker exits: Linux sends the parent-death signal that ends the
  worker with this process when the thread that forked it exits. A failed
  start is left to the first computation, which starts the worker again and
  raises its error.
  """
  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.types import placements
  # pylint: enable=g-import-not-at-top

  lock = threading.Lock()
  # Through a weak reference: a closure holding the factory would put the
  # context in a reference cycle, finalized by the cyclic GC in any order,
  # so TFF's `ServiceManager.__del__` could signal a worker its `Popen`'s
  # finalizer had already reaped (a ProcessLookupError at exit).
  factory_ref = weakref.ref(factory)
  create = type(factory).create_executor

  def create_executor(cardinalities):
    with lock:
      return create(factory_ref(), cardinalities)

  factory.create_executor = create_executor
  global _early_start
  _early_start = threading.Event()
  done = _early_start

  def start():
    try:
      create_executor({placements.CLIENTS: default_num_clients})
    except Exception as e:  # pylint: disable=broad-except
      logging.debug('tff_priv.runtime: early worker start failed: %s', e)
    finally:
      done.set()
    with _lock:
      started = [p for p in _workers if p.started_by == threading.get_ident()]
    for proc in started:
      try:  # Waits for its exit without reaping it (see `stop_workers`).
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
      except ChildProcessError:
        pass

  threading.Thread(
      target=start, name='tff_priv-worker-start', daemon=True
  ).start()


def release_eager_kernels() -> None:
  """Drops TensorFlow's cache of eager kernels in this process.

  Call it between rounds of a loop that builds its client datasets eagerly
  (`ClientData.create_tf_dataset_for_client` and a preprocessing function, as
  `tff.simulation` and the training program do). Every eager
  `tf.data.Dataset.map` traces its function under a new name, and the
  `MapDataset` kernel that runs it is cached under that name for the life of
  the process: TensorFlow 2.14 removes the function when the dataset is
  dropped, but not its cached kernel. 100 EMNIST-preprocessed clients a round
  grew a process by about 7.8 MB a round; with this call after each round,
  by 0.4 MB (docs/benchmarks.md). The kernels the next round needs are
  built again: the call and the first dataset after it cost about 4 ms.

  TensorFlow has no public call for this; `Context.clear_kernel_cache` has
  been on the eager context since TF 1.x, and tests/runtime_test.py checks it
  on the pinned version.
  """
  # pylint: disable-next=g-import-not-at-top
  from tensorflow.python.eager import context as eager_context

  eager_context.context().clear_kernel_cache()


def check_secure_intrinsics(what: str) -> None:
  """Raises a one-line error if the installed context cannot run secure sums.

  TFF's 'native' local context has no secure-aggregation intrinsics (it fails
  deep inside its worker with "Cannot embed a federated value").

  Args:
    what: the factory that needs them, for the message.

  Raises:
    RuntimeError: the context set by `set_context` is 'native'.
  """
  if _current_kind == 'native':
    raise RuntimeError(
        f"{what} uses TFF's secure-sum intrinsics, which the 'native' context "
        "does not run: use tff_priv.runtime.set_context('simulation') (it "
        'simulates them), or secure=False'
    )
