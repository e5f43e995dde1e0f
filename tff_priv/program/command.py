"""How a script that runs the training program behaves: quiet, one-line errors, resumable stops.

`main(prog, body, root_output_dir)` runs `body()` (which calls
`training.run` or `grid.run`) with the conventions every tff_priv script
keeps: TF's and TFF's logs off unless `verbose`, bad configurations and
refused directories one line and exit 2 (`training.ConfigError`), an
unwritable directory one line and exit 1, SIGINT / SIGTERM one line saying
how to resume and exit 128 + the signal (the TFF worker stopped first).
`quiet_environment()` must run before TensorFlow is imported.

Every script that imports this module has `--workers=host:port,...`: the
clients of each computation run on those TFF workers (started there with
`python -m tff_priv.worker --port=PORT`) through
`runtime.set_context('remote')`, the rest of the run (checkpoints, ledger,
outputs) unchanged. A worker that does not answer at start, or fails
mid-run and stays unavailable for `--worker_timeout` seconds (noticed at
TFF's next retry, at most 30 s later), ends the run with one line and exit 1;
the same command resumes from the last checkpoint once it is back (the round
in flight was charged before it ran: the ledger can only over-count).
"""

import os
import signal
import sys
from typing import Callable, TypeVar

from absl import flags
from absl import logging

T = TypeVar('T')

WORKERS = flags.DEFINE_list(
    'workers', [],
    "TFF workers 'host:port,...' (each started with python -m tff_priv.worker "
    '--port=PORT) that run the clients of every round; empty: this machine.',
)
WORKER_TIMEOUT = flags.DEFINE_float(
    'worker_timeout', 60.0,
    'Seconds a --workers worker may not answer (at start or mid-run) before '
    'the run stops.', lower_bound=0.1,
)


def quiet_environment(argv: list[str]) -> bool:
  """`tff_priv.cli.quiet_environment`: TF's and gRPC's C++ logs off unless --verbose."""
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
      print(f'{prog}: error: {root} is in use by another run (pid {holder}); '
            'wait for it to end or use another root_output_dir', file=sys.stderr)
      sys.exit(2)
    fcntl.flock(f, fcntl.LOCK_UN)


def _quiet_python_logs() -> None:
  logging.set_verbosity(logging.ERROR)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  tf.get_logger().setLevel('ERROR')


def set_context():
  """The remote context over `--workers` when given, else TFF's local simulation."""
  from tff_priv import runtime  # pylint: disable=g-import-not-at-top

  workers = WORKERS.value if flags.FLAGS.is_parsed() else []
  if workers:
    return runtime.set_context(
        'remote', workers=workers, timeout=WORKER_TIMEOUT.value
    )
  return runtime.set_context('simulation')


def main(
    prog: str, body: Callable[[], T], root_output_dir: str, verbose: bool
) -> T:
  """Runs `body()` under the conventions of the module docstring, in `set_context()`."""
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
    # The worker first: its shutdown may log (gRPC's fork notice); the
    # resume hint is the last line.
    runtime.stop_workers()
    print(
        f'{prog}: stopped by {signal.Signals(signum).name}; the checkpoints '
        f'and the privacy ledger in {root_output_dir} are kept: run the same '
        'command to resume',
        file=sys.stderr,
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
    print(
        f'{prog}: error: {e}; the checkpoints and the privacy ledger in '
        f'{root_output_dir} are kept: run the same command to resume once the '
        'worker answers',
        file=sys.stderr,
    )
    cli.exit_now(1)
  except BaseException as e:  # pylint: disable=broad-except
    if received:
      stop(received[0])
    if isinstance(e, OSError) and e.filename is not None:
      print(f'{prog}: error: cannot use {e.filename}: {e.strerror}',
            file=sys.stderr)
      sys.exit(1)
    raise
