"""Runs a grid of training configurations, each in its own directory, resumably.

`run(configs, root_dir)` runs every `RunConfig` of `configs` (a mapping from
a label to a config) with `training.run` in `<root_dir>/<label>/`: a run
that has finished (its summary is there, for the same configuration) is not
run again, an interrupted one resumes from its last checkpoint with its
ledger, and a label whose directory holds another configuration is refused
(`training.ConfigError`) before anything runs. The experiments of
`tff_priv.experiments` are such grids; their tables read what the runs
wrote (`runs.RunResult`).
"""

import os
import sys
from typing import Mapping, Optional

from tff_priv.program import layout
from tff_priv.program import runs
from tff_priv.program import training


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
) -> dict[str, runs.RunResult]:
  """Runs (or resumes, or skips) every configuration; see the module docstring.

  Args:
    configs: label -> configuration; a label is a directory name.
    root_dir: where the run directories are.
    progress: per-round progress of each run (`training.run`).
    cache_dir: where cached data sets are read (online tasks).
    checkpoint_every: save each run's program state every this many rounds.

  Returns:
    label -> `runs.RunResult` (read by `runs.read`), in the order of
    `configs`.

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
    results[label] = runs.read(run_dir, label)
  return results
