r"""Trains a task with one of tff_priv's privacy mechanisms, on TFF's program layer.

Wires library pieces only (`tff_priv.program.training`): the task, the
mechanism's learning process, the privacy ledger in the checkpointed program
state, CSV / TensorBoard releases, the summary. Run from the repository root:

  .venv/bin/python scripts/train.py                  # dp_fedavg on mnist5k
  .venv/bin/python scripts/train.py --mechanism=smp --epsilon=8 \
      --compression=0.1 --root_output_dir=output/smp
  .venv/bin/python scripts/train.py --mechanism=smp --mask=top_k \
      --public_clients=20 --compression=0.1 --root_output_dir=output/smp_top_k
  .venv/bin/python scripts/train.py --mechanism=udp --epsilon=8 --clip=1 \
      --client_learning_rate=0.5 --root_output_dir=output/udp

Started again with the same --root_output_dir, a run resumes at its last
checkpoint with its privacy ledger; a different configuration there is
refused. Writes <root_output_dir>/summary.json at the end and prints its path.
Exit status 2 with one line on stderr for bad flags or a refused directory
(another configuration, another run using it); SIGINT/SIGTERM end the run
with one line saying how to resume (exit 128 + the signal); an unwritable
directory ends it with one line (exit 1). Quiet by default: a progress bar on
a terminal, one line per round otherwise; --verbose shows TF's and the
program's logs.
"""

import os
import signal
import sys

# TensorFlow's C++ and Python warnings drown the program's own output.
_VERBOSE_ARGV = '--verbose' in sys.argv
if not _VERBOSE_ARGV:
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

# pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import app
from absl import flags
from absl import logging

import tasks
from tff_priv import cli
from tff_priv import runtime
from tff_priv.aggregators import ldp_encode
from tff_priv.learning import udp
from tff_priv.program import layout
from tff_priv.program import mechanisms
from tff_priv.program import training
# pylint: enable=g-import-not-at-top,g-bad-import-order

_DEFAULTS = training.RunConfig()

# Task and data.
_TASK = flags.DEFINE_enum(
    'task', _DEFAULTS.task, tasks.TASK_NAMES, 'Task (data + model).'
)
_MODEL = flags.DEFINE_string(
    'model', None, 'Model of an image task (task default if unset).'
)
_NUM_CLIENTS = flags.DEFINE_integer(
    'num_clients', None, 'Clients of a synthetic split (task default if unset).'
)
_PARTITION = flags.DEFINE_string(
    'partition', None, "Synthetic split: 'iid', 'shards' or 'dirichlet'."
)
_CACHE_DIR = flags.DEFINE_string(
    'cache_dir', None, 'Where cached data sets are read (online tasks).'
)
_BATCH_SIZE = flags.DEFINE_integer(
    'batch_size', _DEFAULTS.batch_size, 'Client batch size.'
)
_NUM_EPOCHS = flags.DEFINE_integer(
    'num_epochs', _DEFAULTS.num_epochs, 'Local epochs per round.'
)

# Rounds, clients, optimizers.
_TOTAL_ROUNDS = flags.DEFINE_integer(
    'total_rounds', _DEFAULTS.total_rounds, 'Training rounds T.'
)
_CLIENTS_PER_ROUND = flags.DEFINE_integer(
    'clients_per_round',
    _DEFAULTS.clients_per_round,
    'K: expected clients per round (Poisson sampling: none, dp_fedavg, smp, '
    'distortion) or exactly K (udp, ldp).',
)
_CLIENT_OPTIMIZER = flags.DEFINE_enum(
    'client_optimizer', _DEFAULTS.client_optimizer, list(training.OPTIMIZERS),
    'Client optimizer.',
)
_CLIENT_LR = flags.DEFINE_float(
    'client_learning_rate', _DEFAULTS.client_learning_rate,
    'Client learning rate (udp: eta of its one full-batch step).',
)
_SERVER_OPTIMIZER = flags.DEFINE_enum(
    'server_optimizer', _DEFAULTS.server_optimizer, list(training.OPTIMIZERS),
    'Server optimizer.',
)
_SERVER_LR = flags.DEFINE_float(
    'server_learning_rate', _DEFAULTS.server_learning_rate,
    'Server learning rate.',
)
_SEED = flags.DEFINE_integer(
    'seed', _DEFAULTS.seed, 'Seed of the data split, model init, smp masks.'
)
_SAMPLING_SEED = flags.DEFINE_integer(
    'sampling_seed', None,
    'Seeds who is sampled (default: a secret seed drawn at the first start; '
    'a given one is written to config.json, so the draws are then known).',
)

# Mechanism and its parameters (a parameter the mechanism does not take is
# refused).
_MECHANISM = flags.DEFINE_enum(
    'mechanism', _DEFAULTS.mechanism, list(mechanisms.MECHANISMS),
    'Privacy mechanism.',
)
_EPSILON = flags.DEFINE_float(
    'epsilon', None,
    'Target eps of the whole run at --delta; the noise is calibrated to it '
    f'(dp_fedavg, smp, udp, distortion; default {mechanisms.DEFAULT_EPSILON} '
    'when no other noise level is given).',
)
_DELTA = flags.DEFINE_float(
    'delta', None, f'delta (default {mechanisms.DEFAULT_DELTA}).'
)
_NOISE_MULTIPLIER = flags.DEFINE_float(
    'noise_multiplier', None,
    'Noise std / sensitivity (dp_fedavg, smp; udp: sigma / Delta; '
    'distortion: sigma_e / 2C).',
)
_NOISE_STDDEV = flags.DEFINE_float(
    'noise_stddev', None, 'Absolute client noise std (udp, distortion).'
)
_CLIP = flags.DEFINE_float(
    'clip', None,
    'L2 clip: dp_fedavg (unset: adaptive clipping), smp, udp (per example), '
    f'distortion (default {mechanisms.DEFAULT_CLIP} for the last three).',
)
_COMPRESSION = flags.DEFINE_float(
    'compression', None,
    f'smp: kept fraction k/d (default {mechanisms.DEFAULT_COMPRESSION}).',
)
_MASK = flags.DEFINE_enum(
    'mask', None, list(mechanisms.MASKS),
    f"smp: 'rand_k' (public seed) or 'top_k' (the server trains on public "
    f"clients; default {mechanisms.DEFAULT_MASK!r}).",
)
_PUBLIC_CLIENTS = flags.DEFINE_integer(
    'public_clients', None,
    'smp with --mask=top_k: the first N clients form the public set, never '
    f'sampled (default {mechanisms.DEFAULT_PUBLIC_CLIENTS}).',
)
_LDP_EPSILON = flags.DEFINE_float(
    'ldp_epsilon', None,
    f'ldp: eps of every reported value (default '
    f'{mechanisms.DEFAULT_LDP_EPSILON}).',
)
_LDP_RANGE_MODE = flags.DEFINE_enum(
    'ldp_range_mode', None, list(ldp_encode.RANGE_MODES),
    "ldp: range of the encoder (default 'fixed').",
)
_LDP_CENTER = flags.DEFINE_float('ldp_center', None, 'ldp: range center c.')
_LDP_RADIUS = flags.DEFINE_float(
    'ldp_radius', None,
    f'ldp: range radius r (default {mechanisms.DEFAULT_LDP_RADIUS}).',
)
_TARGET_TV = flags.DEFINE_float(
    'target_tv', None, 'distortion: calibrate sigma_e to this TV.'
)
_PARAMETER_VARIANCE = flags.DEFINE_float(
    'parameter_variance', None,
    'distortion: parameter variance sigma^2 (required unless noise-free).',
)
_RHO = flags.DEFINE_float(
    'rho', None, 'distortion: Bernoulli(rho) mini-batches of client data.'
)
_UDP_CALIBRATION = flags.DEFINE_enum(
    'udp_calibration', None, list(udp.CALIBRATIONS),
    "udp with --epsilon: 'tight' (accountant, default) or 'paper' (eq. 10).",
)

_SERVER_BUDGET = flags.DEFINE_float(
    'server_budget', None,
    'Budget filter (smp, udp, distortion, ldp): a client whose eps against '
    'the server would exceed this is left out of the round.',
)

# Output, checkpoints, evaluation, progress.
_ROOT_OUTPUT_DIR = flags.DEFINE_string(
    'root_output_dir', None,
    'Run directory (default output/<task>_<mechanism>).',
)
_EVAL_EVERY = flags.DEFINE_integer(
    'eval_every', _DEFAULTS.eval_every,
    'Evaluate the test set every N rounds (and at the end).',
)
_CHECKPOINT_EVERY = flags.DEFINE_integer(
    'checkpoint_every', 1, 'Save the program state every N rounds.'
)
_KEEP_CHECKPOINTS = flags.DEFINE_integer(
    'keep_checkpoints', 3, 'Program states kept on disk.'
)
_PROGRESS = flags.DEFINE_bool(
    'progress', True,
    'Progress on stderr: a bar on a terminal, one line per round otherwise.',
)
_VERBOSE = flags.DEFINE_bool(
    'verbose', False, "TF's and the program's logs (quiet by default)."
)


_CLI = cli.Cli('train.py')
_received = []  # The signal that stopped the run, if any.


class _Stopped(Exception):
  """Raised in the main thread by SIGINT / SIGTERM."""


def _on_signal(signum, frame):
  del frame
  if not _received:
    _received.append(signum)
    raise _Stopped(signum)
_fail = _CLI.fail
_parse_flags = _CLI.parse_flags


def _config() -> training.RunConfig:
  return training.RunConfig(
      task=_TASK.value,
      task_options={
          'model': _MODEL.value,
          'num_clients': _NUM_CLIENTS.value,
          'partition': _PARTITION.value,
      },
      batch_size=_BATCH_SIZE.value,
      num_epochs=_NUM_EPOCHS.value,
      mechanism=_MECHANISM.value,
      params=mechanisms.MechanismParams(
          epsilon=_EPSILON.value,
          delta=_DELTA.value,
          noise_multiplier=_NOISE_MULTIPLIER.value,
          noise_stddev=_NOISE_STDDEV.value,
          clip=_CLIP.value,
          compression=_COMPRESSION.value,
          mask=_MASK.value,
          public_clients=_PUBLIC_CLIENTS.value,
          ldp_epsilon=_LDP_EPSILON.value,
          ldp_range_mode=_LDP_RANGE_MODE.value,
          ldp_center=_LDP_CENTER.value,
          ldp_radius=_LDP_RADIUS.value,
          target_tv=_TARGET_TV.value,
          parameter_variance=_PARAMETER_VARIANCE.value,
          rho=_RHO.value,
          udp_calibration=_UDP_CALIBRATION.value,
      ),
      clients_per_round=_CLIENTS_PER_ROUND.value,
      total_rounds=_TOTAL_ROUNDS.value,
      client_optimizer=_CLIENT_OPTIMIZER.value,
      client_learning_rate=_CLIENT_LR.value,
      server_optimizer=_SERVER_OPTIMIZER.value,
      server_learning_rate=_SERVER_LR.value,
      eval_every=_EVAL_EVERY.value,
      seed=_SEED.value,
      server_budget=_SERVER_BUDGET.value,
      sampling_seed=_SAMPLING_SEED.value,
  )


def main(argv):
  if len(argv) > 1:
    _fail(f'unexpected arguments {argv[1:]}')
  try:
    config = _config().validate()
    for name, flag in (
        ('checkpoint_every', _CHECKPOINT_EVERY),
        ('keep_checkpoints', _KEEP_CHECKPOINTS),
    ):
      if flag.value < 1:
        raise ValueError(f'{name} must be >= 1, got {flag.value}')
  except (ValueError, TypeError) as e:
    _fail(str(e))
  root = _ROOT_OUTPUT_DIR.value or f'output/{config.task}_{config.mechanism}'
  if not (_VERBOSE.value or flags.FLAGS['verbosity'].present):
    # The per-round INFO log (the LoggingReleaseManager) and TF's Python
    # warnings: back with --verbose.
    logging.set_verbosity(logging.ERROR)
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.get_logger().setLevel('ERROR')
    # TFF's secure-sum lowering leaves an unused assert op behind, which TF
    # reports as a 20-line ERROR ("Object was never used"): not an error.
    tf.get_logger().addFilter(
        lambda record: 'Object was never used' not in record.getMessage()
    )
  # Before the runtime's own handlers, which stop the TFF worker and then
  # call these.
  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, _on_signal)
  runtime.set_context()
  try:
    summary = training.run(
        config,
        root,
        checkpoint_every=_CHECKPOINT_EVERY.value,
        keep_checkpoints=_KEEP_CHECKPOINTS.value,
        progress=_PROGRESS.value,
        cache_dir=_CACHE_DIR.value,
    )
  except training.ConfigError as e:
    _fail(str(e))
  except BaseException as e:  # pylint: disable=broad-except
    if _received:
      name = signal.Signals(_received[0]).name
      print(
          f'train.py: stopped by {name}; the checkpoints and the privacy '
          f'ledger in {root} are kept: run the same command to resume',
          file=sys.stderr,
      )
      # The interrupted TF/TFF objects fail noisily in interpreter teardown:
      # stop the worker and leave without it (everything is on disk).
      runtime.stop_workers()
      sys.stdout.flush()
      sys.stderr.flush()
      os._exit(128 + _received[0])  # pylint: disable=protected-access
    if isinstance(e, OSError) and e.filename is not None:
      print(f'train.py: error: cannot use {e.filename}: {e.strerror}',
            file=sys.stderr)
      sys.exit(1)
    raise
  privacy = summary['privacy']
  guarantees = ' '.join(
      f"{g['adversary']}_epsilon={g['epsilon']}" for g in privacy['guarantees']
  )
  print(
      f"{layout.path(root, layout.SUMMARY)}: {summary['task']} "
      f"{summary['mechanism']} rounds={summary['rounds']} "
      f"test_accuracy={summary['final_test_accuracy']} "
      f"{guarantees} at delta={privacy['delta']}"
  )



if __name__ == '__main__':
  app.run(main, flags_parser=_parse_flags)
