"""Plots of training runs: test accuracy vs round, and privacy vs utility.

Reads what `training.run` writes (`load_run`, through `runs.read`) and draws
`plot_accuracy_vs_round` and `plot_accuracy_vs_epsilon` with matplotlib's
object API on the Agg canvas (no pyplot, no global backend), so it works
without a display (and a completed private run is read without TensorFlow).
How each plot draws its runs: its docstring.
"""

import collections
import dataclasses
import json
import math
import os
from typing import Optional, Sequence

from matplotlib import figure
from matplotlib import ticker
from matplotlib.backends import backend_agg

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
    server_epsilon: the worst client's eps against the server at those
      rounds (train_metrics.csv; NaN where it has none).
    model_starts: rounds after which a restarted model's rows begin (its
      sessions' `round_offset`): its lines break there.
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
  server_epsilon: list[float] = dataclasses.field(default_factory=list)
  model_starts: list[int] = dataclasses.field(default_factory=list)

  def points(self) -> list[tuple[int, float, float]]:
    """(round, analyst's eps, accuracy) where both are numbers, eps > 0."""
    return [
        (r, e, a)
        for r, e, a in zip(self.rounds, self.epsilon, self.test_accuracy)
        if math.isfinite(e) and e > 0 and not math.isnan(a)
    ]

  def server_points(self) -> list[tuple[int, float, float]]:
    """(round, server-view eps, accuracy) where it differs from the analyst's.

    Empty when it never differs (or the run has none): the analyst's line
    says it all.
    """
    points = [
        (r, s, a)
        for r, s, a in zip(self.rounds, self.server_epsilon, self.test_accuracy)
        if math.isfinite(s) and s > 0 and not math.isnan(a)
    ]
    differs = any(
        not math.isclose(s, e, rel_tol=1e-6)
        for s, e in zip(self.server_epsilon, self.epsilon)
        if math.isfinite(s)
    )
    return points if differs else []


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
  """Reads a run directory written by `training.run`, complete or not.

  Reads what `training.run` writes through `runs.read`: each run's
  eval_metrics.csv (test accuracy and the eps spent so far, per evaluated
  round), config.json and, when the run completed, summary.json.

  Raises:
    ValueError: the directory has no config.json or no eval_metrics.csv.
  """
  result = runs.read(directory, finished=False)
  server = {
      int(row[layout.ROUND]): row[layout.SERVER_EPSILON]
      for row in result.train_rows
      if layout.ROUND in row and layout.SERVER_EPSILON in row
  }
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
      server_epsilon=[server.get(r[0], math.nan) for r in rows],
      model_starts=_model_starts(directory, result.summary),
  )


def _model_starts(directory: str, summary: Optional[dict]) -> list[int]:
  """The `round_offset` of each restarted model (`layout`).

  From the summary's sessions or, for a run in progress, the ledger file's.
  """
  sessions = (summary or {}).get('sessions')
  if sessions is None:
    try:
      with open(layout.path(directory, layout.PRIVACY)) as f:
        sessions = json.load(f).get('sessions')
    except (OSError, ValueError, AttributeError):
      sessions = None
  return sorted(
      {
          int(s['round_offset'])
          for s in sessions or []
          if isinstance(s, dict)
          and s.get('restarted_model')
          and s.get('round_offset')
      }
  )


def _broken(points, starts):
  """The x and y of (round, x, y) `points`, broken between two models.

  NaN between the rows of two models (a restart in `starts`): a line that
  does not join them.
  """
  xs, ys = [], []
  for k, (r, x, y) in enumerate(points):
    if k and any(points[k - 1][0] <= s < r for s in starts):
      xs.append(math.nan)
      ys.append(math.nan)
    xs.append(x)
    ys.append(y)
  return xs, ys


def legend_labels(runs: Sequence[Run]) -> list[str]:
  """The runs' labels, each shared one followed by its directory's path.

  Of the path, the fewest trailing parts that tell the runs sharing the
  label apart ('smp eps=8 (seed2)', or '(b/run)' for a/run and b/run).
  """
  labels = [run.label for run in runs]
  shared = collections.defaultdict(list)
  for i, label in enumerate(labels):
    shared[label].append(i)
  for label, indices in shared.items():
    if len(indices) < 2:
      continue
    paths = [
        os.path.normpath(os.path.abspath(runs[i].directory)).split(os.sep)
        for i in indices
    ]
    for parts in range(1, max(len(p) for p in paths) + 1):
      tails = [os.sep.join(p[-parts:]) for p in paths]
      if len(set(tails)) == len(tails):
        break
    for i, tail in zip(indices, tails):
      labels[i] = f'{label} ({tail})'
  return labels


def _save(fig: figure.Figure, path: str) -> None:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  backend_agg.FigureCanvasAgg(fig)
  fig.savefig(path, dpi=120, bbox_inches='tight')


def _off_scale(drawn) -> set[int]:
  """The indices of the runs drawn off the eps axis.

  See `plot_accuracy_vs_epsilon`.

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
  round axis has integer ticks. A restarted model's lines and the legend
  entries that runs share: as in `plot_accuracy_vs_epsilon`.

  Returns:
    The figure written.
  """
  if not runs:
    raise ValueError('runs must not be empty')
  fig = figure.Figure(figsize=(7, 4.5))
  ax = fig.add_subplot()
  for i, (run, label) in enumerate(zip(runs, legend_labels(runs))):
    ax.plot(
        *_broken(
            list(zip(run.rounds, run.rounds, run.test_accuracy)),
            run.model_starts,
        ),
        marker='o',
        # One point draws no line: a marker (larger, to be seen), in the
        # legend too.
        markersize=3 if len(run.rounds) > 1 else 6,
        linestyle='-' if len(run.rounds) > 1 else 'None',
        color=f'C{i % 10}',  # One colour per run, labelled by its parameters.
        label=label,
    )
  rounds = sorted({r for run in runs for r in run.rounds})
  if len(rounds) == 1:
    # Matplotlib's default view of one point is +-0.2 around it.
    ax.set_xlim(rounds[0] - 1, rounds[0] + 1)
  ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
  ax.set_xlabel('round')
  ax.set_ylabel('test accuracy')
  ax.set_title(
      f'test accuracy vs round ({", ".join(sorted({r.task for r in runs}))})'
  )
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize='small')
  _save(fig, path)
  return fig


def plot_accuracy_vs_epsilon(
    runs: Sequence[Run], path: str, join_runs: bool = False
) -> figure.Figure:
  """Privacy vs utility: test accuracy vs the analyst's eps, as a PNG.

  Each run's eval rows give (the analyst's eps spent so far, test accuracy)
  after every evaluation: a line per run, its last point marked, labelled by
  mechanism and parameters (a run with one evaluation is one marker, and so is
  its legend entry). Guarantees of different units (one example of a client, a
  whole client) are not comparable and go to separate panels. Separate runs
  are joined into a curve only when asked (`join_runs=True`: the last points
  of the runs of one mechanism, sorted by eps, for runs that differ only in
  their target eps). A run whose eps is infinite (a non-private release) has
  no place on the eps axis: a horizontal dashed line at its accuracy, in every
  panel. The eps axis is logarithmic. Runs whose eps are all more than
  `OFF_SCALE_RATIO` times every eps of the other runs of their panel (LDP-FL's
  eps of millions next to central DP's eps of a few) would squeeze the others
  into one column: the axis spans the others, and each such run is a '>'
  marker at its accuracy on the right edge, its eps written beside it and in
  its legend entry. Where the eps a run's worst client faces against the
  server (`server_epsilon` of train_metrics.csv: smp's, udp's, ldp's) differs
  from the analyst's, it is a dashed line of the run's colour at the same
  accuracies, '(server view)' in its legend entry.

  In both plots, a run directory with a restarted model (`layout`: its rows
  after the earlier model's) has its lines broken between the two models.
  Round axes have integer ticks. Runs of one configuration (seeds, repeats)
  would share a legend entry: each such entry ends with as much of its run
  directory's path as tells them apart (`legend_labels`).

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
  for run in runs:
    if run.summary is not None:
      delta = run.summary.get('privacy', {}).get('delta', delta)
  finite = [run.points() for run in runs]  # Each run's on an eps axis.
  labels = legend_labels(runs)
  for ax, unit in zip(axes, units):
    server_view = _epsilon_panel(ax, unit, runs, labels, finite, join_runs)
    ax.set_xlabel(
        "analyst's eps spent"
        + (' (dashed: the server view)' if server_view else '')
        + (f', delta = {delta:g}' if delta is not None else '')
    )
    ax.set_ylabel('test accuracy')
    ax.set_title(f'unit: one {unit}' if unit == 'example' else f'unit: {unit}')
    ax.grid(True, which='both', alpha=0.3)
    ax.legend(fontsize='small')
  _save(fig, path)
  return fig


def _epsilon_panel(ax, unit, runs, labels, finite, join_runs) -> bool:
  """Draws the runs of `unit` (and the non-private ones) on `ax`.

  Returns:
    Whether it drew a server view.
  """
  server_view = False
  last_points = collections.defaultdict(list)
  off_scale = _off_scale(
      [
          (i, [(e, a) for _, e, a in points])
          for i, (run, points) in enumerate(zip(runs, finite))
          if points and run.unit == unit
      ]
  )
  on_scale = []  # The eps drawn on the axis.
  for i, (run, label, points) in enumerate(zip(runs, labels, finite)):
    color = f'C{i % 10}'
    if not points:
      if run.test_accuracy:
        ax.axhline(
            run.test_accuracy[-1],
            color=color,
            linestyle='--',
            label=f'{label} (eps = inf)',
        )
      continue
    if run.unit != unit:
      continue
    _, eps, acc = zip(*points)
    if i in off_scale:
      _draw_off_scale(ax, label, color, eps, acc)
      continue
    if _draw_on_scale(ax, run, label, color, points, eps, on_scale):
      server_view = True
    last_points[run.mechanism].append((eps[-1], acc[-1]))
  if join_runs:
    for mechanism, points in sorted(last_points.items()):
      if len(points) > 1:
        points.sort()
        ax.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            ':',
            color='0.4',
            label=f'{mechanism}: runs joined',
        )
  ax.set_xscale('log')
  # Plain numbers (2, 10, 50), not powers of ten (2 x 10^0, 10^1), and
  # some between the powers of ten when the axis spans 2 or fewer.
  ax.xaxis.set_major_formatter(ticker.LogFormatter())
  ax.xaxis.set_minor_formatter(
      ticker.LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5))
  )
  if off_scale and on_scale:
    # Room on the right for the off-scale runs' eps.
    ax.set_xlim(min(on_scale) / 1.5, max(on_scale) * 3)
  return server_view


def _draw_off_scale(ax, label, color, eps, acc) -> None:
  """Draws an off-scale run: a '>' at its last accuracy on the right edge."""
  # x in axes coordinates (the right edge), y in data coordinates.
  edge = ax.get_yaxis_transform()
  ax.plot(
      [1.0],
      [acc[-1]],
      '>',
      color=color,
      transform=edge,
      clip_on=False,
      label=f'{label} (eps = {eps[-1]:.3g}, off scale)',
  )
  ax.annotate(
      f'eps = {eps[-1]:.3g}',
      (1.0, acc[-1]),
      xycoords=edge,
      xytext=(-8, 0),
      textcoords='offset points',
      ha='right',
      va='center',
      fontsize='small',
      color=color,
  )


def _draw_on_scale(ax, run, label, color, points, eps, on_scale) -> bool:
  """Draws a run on the eps axis, and its server view where it differs.

  Args:
    ax: the panel.
    run: the run.
    label: its legend entry.
    color: its colour.
    points: its (round, eps, accuracy) points.
    eps: their eps.
    on_scale: the eps drawn on the axis, extended with the run's.

  Returns:
    Whether it drew a server view.
  """
  # The last point marked; the legend entry is drawn the same way (a
  # marker alone for a run with one point).
  xs, ys = _broken(points, run.model_starts)
  ax.plot(
      xs,
      ys,
      color=color,
      linewidth=1,
      linestyle='-' if len(eps) > 1 else 'None',
      marker='o',
      markevery=[len(xs) - 1],
      label=label,
  )
  on_scale.extend(eps)
  server = run.server_points()
  if not server:
    return False
  # The same models, at the eps their worst client faces against the
  # server: dashed, in the run's colour.
  _, server_eps, _ = zip(*server)
  xs, ys = _broken(server, run.model_starts)
  ax.plot(
      xs,
      ys,
      color=color,
      linewidth=1,
      linestyle='--' if len(server) > 1 else 'None',
      marker='x',
      markevery=[len(xs) - 1],
      label=f'{label} (server view)',
  )
  on_scale.extend(server_eps)
  return True
