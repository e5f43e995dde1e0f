"""A run directory read back: its configuration, summary, CSV rows, models."""

import csv
import dataclasses
import json
import os
from typing import Any, Optional

import numpy as np

from tff_priv.program import layout
from tff_priv.program import model_io


@dataclasses.dataclass(frozen=True)
class RunResult:
  """What one run wrote (file and column names from `layout`).

  Attributes:
    label: the run's label (in a grid: its directory's name).
    run_dir: its directory.
    summary: summary.json; None: the run has not completed.
    train_rows: train_metrics.csv, one dict per round (the values that are
      numbers, as floats).
    eval_rows: eval_metrics.csv, one dict per evaluation (likewise).
    config: config.json; None: not read.
  """

  label: str
  run_dir: str
  summary: Optional[dict[str, Any]]
  train_rows: list[dict[str, float]]
  eval_rows: list[dict[str, float]]
  config: Optional[dict[str, Any]] = None

  def model(self, name: str = layout.FINAL_MODEL) -> list[np.ndarray]:
    """The trainable weights of the final (or initial) model."""
    trainable, _ = model_io.read_model(layout.path(self.run_dir, name))
    return trainable

  @property
  def mechanism(self) -> str:
    """The run's mechanism ('?' when its configuration was not read)."""
    return (self.config or {}).get('mechanism', '?')

  @property
  def unit(self) -> Optional[str]:
    """Whom the run's eps protects ('example', 'client'; None: no one).

    The unit of its summary's first guarantee when that eps is finite;
    otherwise (a run not completed, or a non-private release) the unit its
    mechanism's factory's guarantee states (`registry.unit`; 'client' for a
    mechanism the registry does not know).
    """
    if self.summary is not None:
      guarantees = self.summary.get('privacy', {}).get('guarantees')
      if guarantees and guarantees[0].get('epsilon') != 'inf':
        return guarantees[0].get('unit')
    # Here, not at the top: a completed private run is read without
    # TensorFlow (the registry builds processes).
    from tff_priv.program import registry  # pylint: disable=g-import-not-at-top

    if self.mechanism not in registry.MECHANISMS:
      return 'client'
    return registry.unit(self.mechanism)


def _rows(path: str) -> list[dict[str, float]]:
  if not os.path.exists(path):
    return []
  with open(path) as f:
    rows = list(csv.DictReader(f))
  out = []
  for row in rows:
    parsed = {}
    for key, value in row.items():
      try:
        parsed[key] = float(value)
      except (TypeError, ValueError):
        pass  # Nested or empty values: not a number.
    out.append(parsed)
  return out


def _json(path: str) -> Optional[dict[str, Any]]:
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


def read(
    run_dir: str, label: Optional[str] = None, *, finished: bool = True
) -> RunResult:
  """The run in `run_dir`, as `training.run` wrote it.

  Args:
    run_dir: the run directory.
    label: its label (None: the directory's name).
    finished: the run must have completed (its summary.json is read);
      False: a run in progress is read too (`summary` None), but the
      directory must hold its config.json and eval_metrics.csv.

  Raises:
    FileNotFoundError: `finished` and there is no summary.json.
    ValueError: not `finished` and the directory has no config.json or no
      eval_metrics.csv (the message says it is not a run directory).
  """
  if finished:
    with open(layout.path(run_dir, layout.SUMMARY)) as f:
      summary = json.load(f)
  else:
    for name in (layout.CONFIG, layout.EVAL_CSV):
      path = layout.path(run_dir, name)
      if not os.path.isfile(path):
        raise ValueError(f'{run_dir} is not a run directory: no {path}')
    summary = _json(layout.path(run_dir, layout.SUMMARY))
  return RunResult(
      label=label or os.path.basename(run_dir),
      run_dir=run_dir,
      summary=summary,
      train_rows=_rows(layout.path(run_dir, layout.TRAIN_CSV)),
      eval_rows=_rows(layout.path(run_dir, layout.EVAL_CSV)),
      config=_json(layout.path(run_dir, layout.CONFIG)),
  )
