"""What a training run writes in its output directory (names only, no TF).

One place for the file and column names that `training.py` writes and
`plotting.py` (and anyone else) reads: `path` lists the files (and what a
restart of the model appends), `is_secret` the entries that must stay
private; everything else may be published.
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
# The seeds of who is sampled and of the canaries: the owner's alone.
SECRETS = 'secrets.json'
CHECKPOINT_PREFIX = 'program_state_'

# Columns both CSV files have (the key first).
ROUND = 'round'
# Which session wrote the row: 1-based, in the order of `sessions`.
SESSION = 'session'
# The eps an analyst who sees the released models faces (RDP accountant).
RDP_EPSILON = 'rdp_epsilon'
# The worst client's eps against the server (mechanisms private against it).
SERVER_EPSILON = 'server_epsilon'
# Columns of eval_metrics.csv.
TEST_ACCURACY = 'test_accuracy'
TEST_LOSS = 'test_loss'

CONFIG_FORMAT = 'tff_priv.program.RunConfig/2'
SUMMARY_FORMAT = 'tff_priv.program.Summary/2'


def is_secret(name: str) -> bool:
  """Whether a run directory's top-level entry `name` must stay private.

  Secret: `checkpoints/` (the program state: seeds, noise state; mode 0700;
  also when set aside, `checkpoints.before_restart.<n>`) and the secrets
  file, `secrets.json`. Everything else may be published.
  """
  return name in (CHECKPOINTS, SECRETS) or name.startswith(CHECKPOINTS + '.')


def path(root_output_dir: str, name: str) -> str:
  """The path of `name` (one of the names above) in a run directory.

  The files of a run directory:

    <root_output_dir>/
      config.json         the run's configuration, written at the first start;
                          a restart with a different one is refused
      checkpoints/        tff.program.FileProgramStateManager program states
      train_metrics.csv   one row per round (tff.program.CSVFileReleaseManager)
      eval_metrics.csv    one row per evaluation of the centralized test set
      tensorboard/        tff.program.TensorBoardReleaseManager summaries
      summary.json        written when the run completes
      initial_model.npz   the model the run starts from (written at the first
                          start)
      final_model.npz     the released global model's weights, with summary.json
      privacy_ledger.json the ledgers after the last charged round, written
                          (durably) before anything of that round is released
      secrets.json        the sampling and canary seeds (owner-only, mode 0600)

  A restart of the model (`restart_model`) appends: the CSVs keep the earlier
  rows, the new model's round t is written as round `round_offset` + t (the
  directory's rounds continue; `round_offset` is in its session's entry of the
  summary's and the ledger's `sessions`), the `session` column says which
  session (1 = the first, in `sessions`' order) wrote a row, and the earlier
  model's initial_model.npz, final_model.npz and summary.json are kept aside as
  `<name>.before_restart.<n>` (as its checkpoints are).
  """
  return os.path.join(root_output_dir, name)
