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
  line per run, its last point marked, labelled by mechanism and parameters
  (a run with one evaluation is one marker, and so is its legend entry).
  Guarantees of different units (one example of a client, a whole client)
  are not comparable and go to separate panels. Separate runs are joined
  into a curve only when asked (`join_runs=True`: the last points of the
  runs of one mechanism, sorted by eps, for runs that differ only in their
  target eps). A run whose eps is infinite (a non-private release) has no
  place on the eps axis: a horizontal dashed line at its accuracy, in every
  panel. The eps axis is logarithmic. Runs whose eps are all more than
  `OFF_SCALE_RATIO` times every eps of the other runs of their panel (LDP-FL's
  eps of millions next to central DP's eps of a few) would squeeze the others
  into one column: the axis spans the others, and each such run is a '>'
  marker at its accuracy on the right edge, its eps written beside it and in
  its legend entry.

Round axes have integer ticks.
"""

import collections
import dataclasses
import math
import os
from typing import Optional, Sequence

from matplotlib.backends import backend_agg
from matplotlib import figure
from matplotlib import ticker

from tff_priv.program import layout
from tff_priv.program import runs

# A run whose eps are all more than this many times the other runs' eps (in
# one panel) is drawn off the eps axis, at its right edge.
OFF_SCALE_RATIO = 100.0


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
  if 'adaptive_clip_quantile' in params:
    parts.append(f"adaptive q={params['adaptive_clip_quantile']:g}")
  if 'mask' in params:  # smp's rand_k and top_k runs differ by it alone.
    parts.append(str(params['mask']))
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


def _off_scale(drawn) -> set[int]:
  """The indices of the runs drawn off the eps axis (see the module docstring).

  Args:
    drawn: (index, its (eps, accuracy) points) for each run on the eps axis
      of a panel.

  Returns:
    The indices of the runs above the first gap of more than
    `OFF_SCALE_RATIO` in the runs' eps, ranked by their smallest eps.
  """
  ranges = sorted(
      (min(e for e, _ in points), max(e for e, _ in points), i)
      for i, points in drawn
  )
  below = -math.inf
  for k, (low, high, _) in enumerate(ranges):
    if k and low > OFF_SCALE_RATIO * below:
      return {i for _, _, i in ranges[k:]}
    below = max(below, high)
  return set()


def plot_accuracy_vs_round(runs: Sequence[Run], path: str) -> figure.Figure:
  """Test accuracy after each evaluated round, one line per run, as a PNG.

  A run with one evaluation is a marker (and so is its legend entry); the
  round axis has integer ticks.

  Returns:
    The figure written.
  """
  if not runs:
    raise ValueError('runs must not be empty')
  fig = figure.Figure(figsize=(7, 4.5))
  ax = fig.add_subplot()
  for i, run in enumerate(runs):
    ax.plot(
        run.rounds,
        run.test_accuracy,
        marker='o',
        # One point draws no line: a marker (larger, to be seen), in the
        # legend too.
        markersize=3 if len(run.rounds) > 1 else 6,
        linestyle='-' if len(run.rounds) > 1 else 'None',
        color=f'C{i % 10}',  # One colour per run, labelled by its parameters.
        label=run.label,
    )
  rounds = sorted({r for run in runs for r in run.rounds})
  if len(rounds) == 1:
    # Matplotlib's default view of one point is +-0.2 around it.
    ax.set_xlim(rounds[0] - 1, rounds[0] + 1)
  ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
  ax.set_xlabel('round')
  ax.set_ylabel('test accuracy')
  ax.set_title(f'test accuracy vs round ({", ".join(sorted({r.task for r in runs}))})')
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize='small')
  _save(fig, path)
  return fig


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
    finite = []  # Each run's points on an eps axis.
    for run in runs:
      if run.summary is not None:
        delta = run.summary.get('privacy', {}).get('delta', delta)
      finite.append([
          (e, a)
          for e, a in zip(run.epsilon, run.test_accuracy)
          if math.isfinite(e) and e > 0 and not math.isnan(a)
      ])
    off_scale = _off_scale(
        [(i, points) for i, (run, points) in enumerate(zip(runs, finite))
         if points and run.unit == unit]
    )
    for i, (run, points) in enumerate(zip(runs, finite)):
      color = f'C{i % 10}'
      if not points:
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
      eps, acc = zip(*points)
      if i in off_scale:
        # x in axes coordinates (the right edge), y in data coordinates.
        edge = ax.get_yaxis_transform()
        ax.plot(
            [1.0], [acc[-1]], '>', color=color, transform=edge,
            clip_on=False,
            label=f'{run.label} (eps = {eps[-1]:.3g}, off scale)',
        )
        ax.annotate(
            f'eps = {eps[-1]:.3g}', (1.0, acc[-1]), xycoords=edge,
            xytext=(-8, 0), textcoords='offset points', ha='right',
            va='center', fontsize='small', color=color,
        )
        continue
      # The last point marked; the legend entry is drawn the same way (a
      # marker alone for a run with one point).
      ax.plot(
          eps, acc, color=color, linewidth=1,
          linestyle='-' if len(eps) > 1 else 'None',
          marker='o', markevery=[len(eps) - 1], label=run.label,
      )
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
    # Plain numbers (2, 10, 50), not powers of ten (2 x 10^0, 10^1), and
    # some between the powers of ten when the axis spans 2 or fewer.
    ax.xaxis.set_major_formatter(ticker.LogFormatter())
    ax.xaxis.set_minor_formatter(
        ticker.LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5))
    )
    if off_scale:
      on_scale = [
          e
          for i, (run, points) in enumerate(zip(runs, finite))
          if run.unit == unit and i not in off_scale
          for e, _ in points
      ]
      # Room on the right for the off-scale runs' eps.
      ax.set_xlim(min(on_scale) / 1.5, max(on_scale) * 3)
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
