"""How a script that runs the training program behaves: quiet, resumable.

`main(prog, body, root_output_dir)` runs `body()` (which calls
`training.run` or `grid.run`) with the conventions every tff_priv script
keeps: quiet logs, one-line errors and exit codes, resumable stops, and the
clients run on `--workers` when given (all in `main`'s docstring).
`quiet_environment()` must run before TensorFlow is imported.
"""

import os
import signal
import sys
from typing import Callable, TypeVar

from absl import flags
from absl import logging

T = TypeVar('T')

WORKERS = flags.DEFINE_list(
    'workers',
    [],
    "TFF workers 'host:port,...' (each started with python -m tff_priv.worker "
    '--port=PORT) that run the clients of every round; empty: this machine.',
)
WORKER_TIMEOUT = flags.DEFINE_float(
    'worker_timeout',
    60.0,
    'Seconds a --workers worker may not answer (at start or mid-run) before '
    'the run stops.',
    lower_bound=0.1,
)


def quiet_environment(argv: list[str]) -> bool:
  """TF's and gRPC's C++ logs off unless --verbose.

  `tff_priv.cli.quiet_environment`.
  """
  from tff_priv import cli  # pylint: disable=g-import-not-at-top

  return cli.quiet_environment(argv)


def refuse_busy_directory(prog: str, argv: list[str]) -> None:
  """Exits 2 in one line when `--root_output_dir` is in use by another run.

  Runs before TensorFlow is imported (seconds), so a second run in a busy
  directory is refused at once; the run itself takes the lock later
  (`run_dir.lock`), which stays the check that counts.
  """
  import fcntl  # pylint: disable=g-import-not-at-top

  from tff_priv.program import layout  # pylint: disable=g-import-not-at-top

  root = None
  for i, arg in enumerate(argv):
    if arg.startswith('--root_output_dir='):
      root = arg.split('=', 1)[1]
    elif arg == '--root_output_dir' and i + 1 < len(argv):
      root = argv[i + 1]
  path = layout.path(root, layout.LOCK) if root else None
  if path is None or not os.path.exists(path):
    return
  with open(path, 'a+') as f:
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      f.seek(0)
      holder = f.read().strip() or 'unknown'
      print(
          f'{prog}: error: {root} is in use by another run (pid {holder}); '
          'wait for it to end or use another root_output_dir',
          file=sys.stderr,
      )
      sys.exit(2)
    fcntl.flock(f, fcntl.LOCK_UN)


def probe_workers(prog: str, argv: list[str], seconds: float = 5.0) -> None:
  """Exits 1 in one line when a `--workers` address takes no connection.

  Runs before TensorFlow is imported, so an unreachable worker is reported
  in seconds: each address must accept a TCP connection within `seconds`
  (retried, for a worker still starting). The run itself then connects
  through TFF (`remote.create_context`).
  """
  import socket  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top

  workers = []
  for i, arg in enumerate(argv):
    if arg.startswith('--workers='):
      workers = arg.split('=', 1)[1].split(',')
    elif arg == '--workers' and i + 1 < len(argv):
      workers = argv[i + 1].split(',')
  for address in [w.strip() for w in workers if w.strip()]:
    host, _, port = address.rpartition(':')
    if not host or not port.isdigit():
      continue  # The flag's own check names it, in one line.
    deadline = time.monotonic() + seconds
    while True:
      try:
        with socket.create_connection((host, int(port)), timeout=seconds):
          break
      except OSError as e:
        if time.monotonic() >= deadline:
          print(
              f'{prog}: error: no TFF worker answers at {address} '
              f'({e.strerror or e}); start one there with: python -m '
              'tff_priv.worker --port=PORT (nothing was run)',
              file=sys.stderr,
          )
          sys.exit(1)
        time.sleep(0.2)


def kept_outputs(root_output_dir: str) -> str:
  """What a stopped run leaves to resume from, naming only what exists."""
  from tff_priv.program import layout  # pylint: disable=g-import-not-at-top

  kept = [
      name
      for name in (layout.CHECKPOINTS, layout.PRIVACY)
      if os.path.exists(layout.path(root_output_dir, name))
  ]
  if not kept:
    return f'nothing was written to {root_output_dir}'
  return (
      f'{" and ".join(kept)} in {root_output_dir} '
      f'{"are" if len(kept) > 1 else "is"} kept'
  )


def _quiet_python_logs() -> None:
  logging.set_verbosity(logging.ERROR)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  tf.get_logger().setLevel('ERROR')


def set_context():
  """`--workers`' remote context if given, else TFF's local simulation."""
  from tff_priv import runtime  # pylint: disable=g-import-not-at-top

  workers = WORKERS.value if flags.FLAGS.is_parsed() else []
  if workers:
    return runtime.set_context(
        'remote', workers=workers, timeout=WORKER_TIMEOUT.value
    )
  return runtime.set_context('simulation', start_worker=True)


def main(
    prog: str, body: Callable[[], T], root_output_dir: str, verbose: bool
) -> T:
  """Runs `body()` in `set_context()` under every tff_priv script's conventions.

  `body()` calls `training.run` or `grid.run`. The conventions: TF's and
  TFF's logs off unless `verbose`, bad configurations and refused
  directories one line and exit 2 (`training.ConfigError`), an unwritable
  directory one line and exit 1, SIGINT / SIGTERM one line saying how to
  resume and exit 128 + the signal (the TFF worker stopped first).
  `quiet_environment()` must run before TensorFlow is imported.

  Every script that imports this module has `--workers=host:port,...`: the
  clients of each computation run on those TFF workers (started there with
  `python -m tff_priv.worker --port=PORT`) through
  `runtime.set_context('remote')`, the rest of the run (checkpoints, ledger,
  outputs) unchanged. A worker that does not answer at start, or fails
  mid-run and stays unavailable for `--worker_timeout` seconds (noticed at
  TFF's next retry, at most 30 s later), ends the run with one line and
  exit 1; the same command resumes from the last checkpoint once it is back
  (the round in flight was charged before it ran: the ledger can only
  over-count).
  """
  # pylint: disable=g-import-not-at-top
  from tff_priv import cli
  from tff_priv import remote
  from tff_priv import runtime
  from tff_priv.program import training
  # pylint: enable=g-import-not-at-top

  if not verbose:
    _quiet_python_logs()
  received = []

  def stop(signum):
    # Everything else quiet first: ending the workers makes TFF's threads
    # (finalizers disposing values on them, gRPC) report it, racing this
    # line. Then the workers; the resume hint is the only line.
    stderr = cli.silence_output()
    runtime.stop_workers()
    os.write(
        stderr,
        (
            f'{prog}: stopped by {signal.Signals(signum).name}; '
            f'{kept_outputs(root_output_dir)}: run the same command to resume\n'
        ).encode(),
    )
    # The interrupted TF/TFF objects fail noisily in interpreter teardown:
    # leave without it (everything is on disk).
    cli.exit_now(128 + signum)

  def on_signal(signum, frame):
    # Stops here rather than by raising: an exception raised in a signal
    # handler that runs inside a gc callback (jax's) is swallowed, and the
    # run went on. Stopping anywhere is safe: the ledger is written ahead of
    # every release and atomically, and a checkpoint cut short is set aside
    # for an older one at the next start.
    del frame
    if not received:
      received.append(signum)
      stop(signum)

  # Before the runtime's own handlers, which stop the TFF worker and then
  # call these.
  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, on_signal)
  try:
    set_context()
    return body()
  except training.ConfigError as e:
    print(f'{prog}: error: {e}', file=sys.stderr)
    sys.exit(2)
  except remote.WorkerLostError as e:
    # The merged context's threads may still wait on the other workers:
    # leave without teardown.
    stderr = cli.silence_output()
    os.write(
        stderr,
        (
            f'{prog}: error: {e}; {kept_outputs(root_output_dir)}: run the'
            ' same command to resume once the worker answers\n'
        ).encode(),
    )
    cli.exit_now(1)
  except BaseException as e:  # pylint: disable=broad-except
    if received:
      stop(received[0])
    reason = _write_failure(e)
    if reason is not None:
      print(
          f'{prog}: error: {reason}; {kept_outputs(root_output_dir)}: '
          'run the same command to resume once it can write',
          file=sys.stderr,
      )
      cli.exit_now(1)
    raise


def _write_failure(e: BaseException):
  """The one line of a failure to write the run's files, else None."""
  if isinstance(e, OSError) and e.filename is not None:
    return f'cannot use {e.filename}: {e.strerror}'
  text = str(e)
  if 'No space left on device' in text:
    # TF's own savers and writers (ResourceExhaustedError ...): many lines.
    return "cannot write the run's files: No space left on device"
  return None
