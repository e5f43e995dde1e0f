"""A training run's release boundary: what its CSV, TensorBoard and log get.

Every per-round value a run writes goes through `RunReleases`; in a private
run only the columns listed here (`PUBLIC_TRAIN_COLUMNS`,
`PUBLIC_EVAL_COLUMNS` and their prefixes) can leave the run, whatever the
loop does. Why those are public: `RunReleases`' docstring.
"""

import csv
import os
from typing import Any, Mapping, Optional

import numpy as np
import tensorflow_federated as tff

from tff_priv.program import layout

# Training-row columns a private run may release, by full name...
PUBLIC_TRAIN_COLUMNS = frozenset(
    {
        layout.SESSION,
        layout.RDP_EPSILON,
        layout.SERVER_EPSILON,
        'delta',
        'uplink_bytes',
        'aggregator/uploaded_bits_per_client',
        'finalizer/update_non_finite',
        'mask/mask_size',
        'aggregator/center',
        'aggregator/radius',
    }
)
# ... and by prefix.
PUBLIC_TRAIN_PREFIXES = (
    'aggregator/noise/',
    'aggregator/center/',
    'aggregator/radius/',
    'mask/public_train/',
    'aggregator/dp_query_metrics/',
    'client_work/train/dp_',
)
# Evaluation-row columns: the released model on the server's test data.
PUBLIC_EVAL_COLUMNS = frozenset(
    {
        layout.SESSION,
        layout.TEST_ACCURACY,
        layout.TEST_LOSS,
        layout.RDP_EPSILON,
    }
)
PUBLIC_EVAL_PREFIXES = ('eval/',)


def is_public_train(column: str) -> bool:
  """Whether a private run may release training column `column`."""
  return column in PUBLIC_TRAIN_COLUMNS or column.startswith(
      PUBLIC_TRAIN_PREFIXES
  )


def is_public_eval(column: str) -> bool:
  """Whether a private run may release evaluation column `column`."""
  return column in PUBLIC_EVAL_COLUMNS or column.startswith(
      PUBLIC_EVAL_PREFIXES
  )


def last_round(root_output_dir: str) -> int:
  """The largest round the run directory's CSVs hold a row of (0: none)."""
  last = 0
  for name in (layout.TRAIN_CSV, layout.EVAL_CSV):
    path = layout.path(root_output_dir, name)
    if not os.path.exists(path):
      continue
    with open(path, newline='') as f:
      for row in csv.DictReader(f):
        try:
          last = max(last, int(row[layout.ROUND]))
        except (KeyError, TypeError, ValueError):
          pass  # Not a row of this program's.
  return last


def _column(path) -> str:
  return '/'.join(str(p) for p in path)


def _filtered(manager, is_public):
  return tff.program.FilteringReleaseManager(
      manager, lambda path: bool(path) and is_public(_column(path))
  )


class RunReleases:
  """The release managers of one run directory.

  Every per-round value a run writes goes through `RunReleases`: the training
  and evaluation CSVs, TensorBoard and the log, grouped by one
  `tff.program.GroupingReleaseManager` each. In a private run the group sits
  behind a `tff.program.FilteringReleaseManager` whose filter keeps only the
  columns listed here, so a value the loop computes but this list does not name
  cannot leave the run, whatever the loop does.

  The public columns are functions of the configuration and the round number
  (eps, delta, the configured upload size, the factories' public
  measurements) or releases charged to the ledger (the noised client metrics of
  `--client_metrics=dp`, the quantile range release of LDP, TFF's adaptive
  clip, which its effective noise multiplier covers). Evaluation rows hold the
  released model's metrics on the server's test data. Both have the `session`
  that wrote them (public: how often the directory was started).

  Args:
    root_output_dir: the run directory (`layout`).
    private: filter every release through the public columns above.
  """

  def __init__(self, root_output_dir: str, private: bool):
    train_csv = tff.program.CSVFileReleaseManager(
        layout.path(root_output_dir, layout.TRAIN_CSV),
        key_fieldname=layout.ROUND,
    )
    eval_csv = tff.program.CSVFileReleaseManager(
        layout.path(root_output_dir, layout.EVAL_CSV),
        key_fieldname=layout.ROUND,
    )
    tensorboard = tff.program.TensorBoardReleaseManager(
        layout.path(root_output_dir, layout.TENSORBOARD)
    )
    self._train = tff.program.GroupingReleaseManager(
        [
            train_csv,
            _Prefixed('train', tensorboard),
            tff.program.LoggingReleaseManager(),
        ]
    )
    self._eval = tff.program.GroupingReleaseManager(
        [
            eval_csv,
            _Prefixed('eval', tensorboard, flatten='eval'),
        ]
    )
    self._private = private
    if private:
      self._train = _filtered(self._train, is_public_train)
      self._eval = _filtered(self._eval, is_public_eval)

  def pending(
      self, train_row: Mapping[str, Any], eval_row: Optional[Mapping[str, Any]]
  ) -> dict[str, Any]:
    """The rows as their release writes them, JSON-safe.

    A private run's public columns only: what `write_pending` keeps on disk.
    """
    return {
        'train': _kept(train_row, is_public_train if self._private else None),
        'eval': (
            None
            if eval_row is None
            else _kept(eval_row, is_public_eval if self._private else None)
        ),
    }

  async def train(self, row: Mapping[str, Any], round_num: int) -> None:
    """Releases round `round_num`'s training row."""
    await self._train.release(row, key=round_num)

  async def eval(self, row: Mapping[str, Any], round_num: int) -> None:
    """Releases round `round_num`'s evaluation row."""
    await self._eval.release(row, key=round_num)


def _kept(row, is_public, prefix=()):
  """`row`'s leaves that `is_public` keeps (all if None), in the same nesting.

  As plain lists and numbers.
  """
  kept = {}
  for key, value in row.items():
    path = (*prefix, key)
    if isinstance(value, Mapping):
      inner = _kept(value, is_public, path)
      if inner:
        kept[key] = inner
    elif is_public is None or is_public(_column(path)):
      kept[key] = None if value is None else np.asarray(value).tolist()
  return kept


class _Prefixed(tff.program.ReleaseManager):
  """Releases `{prefix: value}` to `release_manager` (a TensorBoard tab).

  `flatten`: a key of `value` whose entries move up a level, so that the
  evaluation's metrics are tagged eval/loss, not eval/eval/loss.
  """

  def __init__(self, prefix: str, release_manager, flatten=None):
    self._prefix = prefix
    self._release_manager = release_manager
    self._flatten = flatten

  async def release(self, value, key=None) -> None:
    if self._flatten is not None and self._flatten in value:
      value = {
          **{k: v for k, v in value.items() if k != self._flatten},
          **value[self._flatten],
      }
    await self._release_manager.release({self._prefix: value}, key=key)
