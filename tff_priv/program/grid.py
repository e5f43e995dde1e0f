"""Runs a grid of training configurations, each in its own run directory, resumably.

`run(configs, root_dir)` runs every `RunConfig` of `configs` (a mapping from
a label to a config) with `training.run` in `<root_dir>/<label>/`: a run
that has finished (its summary is there, for the same configuration) is not
run again, an interrupted one resumes from its last checkpoint with its
ledger, and a label whose directory holds another configuration is refused
(`training.ConfigError`) before anything runs. The experiments of
`tff_priv.experiments` are such grids; their tables read what the runs
wrote (`read`).
"""

import csv
import dataclasses
import json
import os
import sys
from typing import Any, Mapping, Optional

import numpy as np

from tff_priv.program import layout
from tff_priv.program import training


@dataclasses.dataclass(frozen=True)
class RunResult:
  """What one finished run wrote.

  Attributes:
    label: the run's label in the grid.
    run_dir: its directory.
    summary: summary.json.
    train_rows: train_metrics.csv, one dict per round (values as floats).
    eval_rows: eval_metrics.csv, one dict per evaluation.
  """

  label: str
  run_dir: str
  summary: dict[str, Any]
  train_rows: list[dict[str, float]]
  eval_rows: list[dict[str, float]]

  def model(self, name: str = layout.FINAL_MODEL) -> list[np.ndarray]:
    """The trainable weights of the final (or initial) model."""
    with np.load(layout.path(self.run_dir, name)) as saved:
      count = sum(1 for k in saved.files if k.startswith('trainable_'))
      return [saved[f'trainable_{i}'] for i in range(count)]


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


def read(run_dir: str, label: Optional[str] = None) -> RunResult:
  """The results of the finished run in `run_dir`."""
  with open(layout.path(run_dir, layout.SUMMARY)) as f:
    summary = json.load(f)
  return RunResult(
      label=label or os.path.basename(run_dir),
      run_dir=run_dir,
      summary=summary,
      train_rows=_rows(layout.path(run_dir, layout.TRAIN_CSV)),
      eval_rows=_rows(layout.path(run_dir, layout.EVAL_CSV)),
  )


def _finished(run_dir: str, config: training.RunConfig) -> bool:
  return os.path.exists(layout.path(run_dir, layout.SUMMARY)) and (
      training.prepare_output_dir(run_dir, config, write=False)
  )


def run(
    configs: Mapping[str, training.RunConfig],
    root_dir: str,
    *,
    progress: bool = True,
    cache_dir: Optional[str] = None,
    checkpoint_every: int = 1,
) -> dict[str, RunResult]:
  """Runs (or resumes, or skips) every configuration; see the module docstring.

  Args:
    configs: label -> configuration; a label is a directory name.
    root_dir: where the run directories are.
    progress: per-round progress of each run (`training.run`).
    cache_dir: where cached data sets are read (online tasks).
    checkpoint_every: save each run's program state every this many rounds.

  Returns:
    label -> `RunResult`, in the order of `configs`.

  Raises:
    training.ConfigError: a bad configuration or label, or a run directory
      holding another configuration (checked for every label first).
  """
  for label, config in configs.items():
    if not label or os.sep in label or label.startswith('.'):
      raise training.ConfigError(f'bad run label {label!r}')
    try:
      valid = config.validate()
    except ValueError as e:
      raise training.ConfigError(f'{label}: {e}') from e
    training.prepare_output_dir(
        os.path.join(root_dir, label), valid, write=False
    )
  results = {}
  for i, (label, config) in enumerate(configs.items()):
    run_dir = os.path.join(root_dir, label)
    if not _finished(run_dir, config.validate()):
      print(f'[{i + 1}/{len(configs)}] {label}', file=sys.stderr, flush=True)
      training.run(
          config,
          run_dir,
          progress=progress,
          cache_dir=cache_dir,
          checkpoint_every=checkpoint_every,
      )
    results[label] = read(run_dir, label)
  return results
