"""Plots of training runs: test accuracy vs round, and privacy vs utility.

Reads what `training.run` writes through `runs.read`: each run's
eval_metrics.csv (test accuracy and the eps spent so far, per evaluated
round), config.json and, when the run completed, summary.json. Draws with
matplotlib's object API on the Agg canvas (no pyplot, no global backend), so
it works without a display (and a completed private run is read without
TensorFlow).

* `plot_accuracy_vs_round`: one line per run.
* `plot_accuracy_vs_epsilon`: privacy vs utility. Each run's eval rows give
  (the analyst's eps spent so far, test accuracy) after every evaluation: a
  line per run, its last point marked, labelled by mechanism and parameters.
  Guarantees of different units (one example of a client, a whole client)
  are not comparable and go to separate panels. Separate runs are joined
  into a curve only when asked (`join_runs=True`: the last points of the
  runs of one mechanism, sorted by eps, for runs that differ only in their
  target eps). A run whose eps is infinite (a non-private release) has no
  place on the eps axis: a horizontal dashed line at its accuracy, in every
  panel.
"""

import collections
import dataclasses
import math
import os
from typing import Optional, Sequence

from matplotlib.backends import backend_agg
from matplotlib import figure

from tff_priv.program import layout
from tff_priv.program import runs


@dataclasses.dataclass
class Run:
  """One run directory, read back.

  Attributes:
    directory: the run directory.
    task: its task.
    mechanism: its mechanism.
    label: the legend text.
    rounds: evaluated rounds, increasing.
    test_accuracy: test accuracy at those rounds.
    epsilon: the analyst's eps spent up to those rounds.
    summary: summary.json, or None if the run has not completed.
    unit: whom the eps protects ('example', 'client'), None if not private.
  """

  directory: str
  task: str
  mechanism: str
  label: str
  rounds: list[int]
  test_accuracy: list[float]
  epsilon: list[float]
  summary: Optional[dict]
  unit: Optional[str] = None


def _label(config: dict, summary: Optional[dict]) -> str:
  params = config.get('params', {})
  parts = [config.get('mechanism', '?')]
  if 'epsilon' in params:
    parts.append(f"eps={params['epsilon']:g}")
  if 'ldp_epsilon' in params:
    parts.append(f"eps0={params['ldp_epsilon']:g}")
  if 'noise_multiplier' in params:
    parts.append(f"z={params['noise_multiplier']:g}")
  if 'compression' in params:
    parts.append(f"p={params['compression']:g}")
  if summary is None:
    parts.append('(incomplete)')
  return ' '.join(parts)


def load_run(directory: str) -> Run:
  """Reads a run directory written by `training.run` (`runs.read`), complete or not.

  Raises:
    ValueError: the directory has no config.json or no eval_metrics.csv.
  """
  result = runs.read(directory, finished=False)
  rows = sorted(
      (
          int(row[layout.ROUND]),
          row.get(layout.TEST_ACCURACY, math.nan),
          row.get(layout.RDP_EPSILON, math.nan),
      )
      for row in result.eval_rows
  )
  return Run(
      directory=directory,
      task=result.config.get('task', '?'),
      mechanism=result.mechanism,
      label=_label(result.config, result.summary),
      rounds=[r[0] for r in rows],
      test_accuracy=[r[1] for r in rows],
      epsilon=[r[2] for r in rows],
      summary=result.summary,
      unit=result.unit,
  )


def _save(fig: figure.Figure, path: str) -> None:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  backend_agg.FigureCanvasAgg(fig)
  fig.savefig(path, dpi=120, bbox_inches='tight')


def plot_accuracy_vs_round(runs: Sequence[Run], path: str) -> None:
  """Test accuracy after each evaluated round, one line per run, as a PNG."""
  if not runs:
    raise ValueError('runs must not be empty')
  fig = figure.Figure(figsize=(7, 4.5))
  ax = fig.add_subplot()
  for i, run in enumerate(runs):
    ax.plot(
        run.rounds,
        run.test_accuracy,
        marker='o',
        markersize=3,
        color=f'C{i % 10}',  # One colour per run, labelled by its parameters.
        label=run.label,
    )
  ax.set_xlabel('round')
  ax.set_ylabel('test accuracy')
  ax.set_title(f'test accuracy vs round ({", ".join(sorted({r.task for r in runs}))})')
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize='small')
  _save(fig, path)


def plot_accuracy_vs_epsilon(
    runs: Sequence[Run], path: str, join_runs: bool = False
) -> figure.Figure:
  """Privacy vs utility: test accuracy vs the analyst's eps, as a PNG.

  Args:
    runs: the runs.
    path: the PNG to write.
    join_runs: also join the last points of the runs of each mechanism.

  Returns:
    The figure written (one panel per unit).
  """
  if not runs:
    raise ValueError('runs must not be empty')
  units = sorted({r.unit for r in runs if r.unit is not None}) or ['client']
  fig = figure.Figure(figsize=(6.5 * len(units), 4.5))
  axes = fig.subplots(1, len(units), squeeze=False)[0]
  delta = None
  for ax, unit in zip(axes, units):
    last_points = collections.defaultdict(list)
    for i, run in enumerate(runs):
      if run.summary is not None:
        delta = run.summary.get('privacy', {}).get('delta', delta)
      color = f'C{i % 10}'
      finite = [
          (e, a)
          for e, a in zip(run.epsilon, run.test_accuracy)
          if math.isfinite(e) and e > 0 and not math.isnan(a)
      ]
      if not finite:
        if run.test_accuracy:
          ax.axhline(
              run.test_accuracy[-1],
              color=color,
              linestyle='--',
              label=f'{run.label} (eps = inf)',
          )
        continue
      if run.unit != unit:
        continue
      eps, acc = zip(*finite)
      ax.plot(eps, acc, color=color, linewidth=1, label=run.label)
      ax.plot(eps[-1], acc[-1], 'o', color=color)
      last_points[run.mechanism].append((eps[-1], acc[-1]))
    if join_runs:
      for mechanism, points in sorted(last_points.items()):
        if len(points) > 1:
          points.sort()
          ax.plot(
              [p[0] for p in points], [p[1] for p in points], ':',
              color='0.4', label=f'{mechanism}: runs joined',
          )
    ax.set_xscale('log')
    ax.set_xlabel(
        "analyst's eps spent"
        + (f', delta = {delta:g}' if delta is not None else '')
    )
    ax.set_ylabel('test accuracy')
    ax.set_title(f'unit: one {unit}' if unit == 'example' else f'unit: {unit}')
    ax.grid(True, which='both', alpha=0.3)
    ax.legend(fontsize='small')
  _save(fig, path)
  return fig
