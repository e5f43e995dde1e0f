"""What a training run writes in its output directory (names only, no TF).

One place for the file and column names that `training.py` writes and
`plotting.py` (and anyone else) reads:

  <root_output_dir>/
    config.json         the run's configuration, written at the first start;
                        a restart with a different one is refused
    checkpoints/        tff.program.FileProgramStateManager program states
    train_metrics.csv   one row per round (tff.program.CSVFileReleaseManager)
    eval_metrics.csv    one row per evaluation of the centralized test set
    tensorboard/        tff.program.TensorBoardReleaseManager summaries
    summary.json        written when the run completes
    initial_model.npz   the model the run starts from (written at the first start)
    final_model.npz     the released global model's weights, with summary.json
    privacy_ledger.json the ledgers after the last charged round, written
                        (durably) before anything of that round is released
"""

import os

CONFIG = 'config.json'
CHECKPOINTS = 'checkpoints'
TRAIN_CSV = 'train_metrics.csv'
EVAL_CSV = 'eval_metrics.csv'
TENSORBOARD = 'tensorboard'
SUMMARY = 'summary.json'
FINAL_MODEL = 'final_model.npz'
INITIAL_MODEL = 'initial_model.npz'
PRIVACY = 'privacy_ledger.json'
# A checkpointed round's rows until they are released (a kill between its
# checkpoint and its release: the resume releases them).
PENDING_RELEASE = 'pending_release.json'
# Held (flock) by the run using the directory; holds its pid.
LOCK = '.lock'
CHECKPOINT_PREFIX = 'program_state_'

# Columns both CSV files have (the key first).
ROUND = 'round'
# The eps an analyst who sees the released models faces (RDP accountant).
RDP_EPSILON = 'rdp_epsilon'
# The worst client's eps against the server (mechanisms private against it).
SERVER_EPSILON = 'server_epsilon'
# Columns of eval_metrics.csv.
TEST_ACCURACY = 'test_accuracy'
TEST_LOSS = 'test_loss'

CONFIG_FORMAT = 'tff_priv.program.RunConfig/2'
SUMMARY_FORMAT = 'tff_priv.program.Summary/2'


def path(root_output_dir: str, name: str) -> str:
  """The path of `name` (one of the names above) in a run directory."""
  return os.path.join(root_output_dir, name)
