"""Tests of tff_priv.program.plotting on run directories written here."""

import csv
import json
import math
import os
import shutil
import struct
import tempfile

from matplotlib import ticker
import tensorflow as tf

from tff_priv.program import layout
from tff_priv.program import plotting

_PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'


def write_run(root, mechanism, rows, params=None, summary=True):
  """A run directory as training.run writes it: config, eval CSV, summary."""
  os.makedirs(root)
  with open(layout.path(root, layout.CONFIG), 'w') as f:
    json.dump(
        {'task': 'digits', 'mechanism': mechanism, 'params': params or {}}, f
    )
  with open(layout.path(root, layout.EVAL_CSV), 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(
        [
            layout.ROUND,
            layout.TEST_ACCURACY,
            layout.TEST_LOSS,
            layout.RDP_EPSILON,
        ]
    )
    for r, acc, eps in rows:
      writer.writerow([r, acc, 0.5, eps])
  if summary:
    with open(layout.path(root, layout.SUMMARY), 'w') as f:
      json.dump({'privacy': {'delta': 1e-5}}, f)


def write_train(root, rows):
  """train_metrics.csv of (round, analyst's eps, server-view eps) rows."""
  with open(layout.path(root, layout.TRAIN_CSV), 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(
        [
            layout.ROUND,
            layout.SESSION,
            layout.RDP_EPSILON,
            layout.SERVER_EPSILON,
        ]
    )
    for r, eps, server in rows:
      writer.writerow([r, 1, eps, server])


def png_size(path):
  with open(path, 'rb') as f:
    header = f.read(24)
  assert header[:8] == _PNG_SIGNATURE, header[:8]
  return struct.unpack('>II', header[16:24])


class PlottingTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

  def test_load_run_reads_rows_in_round_order(self):
    root = os.path.join(self.tmp, 'a')
    write_run(
        root, 'smp', [(4, 0.6, 2.0), (2, 0.4, 1.0)], params={'epsilon': 4.0}
    )
    run = plotting.load_run(root)
    self.assertEqual(run.rounds, [2, 4])
    self.assertEqual(run.test_accuracy, [0.4, 0.6])
    self.assertEqual(run.epsilon, [1.0, 2.0])
    self.assertEqual(run.mechanism, 'smp')
    self.assertEqual(run.label, 'smp eps=4')
    self.assertIsNotNone(run.summary)

  def test_smp_masks_have_their_own_labels(self):
    labels = []
    for mask in ('rand_k', 'top_k'):
      root = os.path.join(self.tmp, mask)
      write_run(
          root,
          'smp',
          [(1, 0.5, 1.0)],
          params={'epsilon': 8.0, 'compression': 0.1, 'mask': mask},
      )
      labels.append(plotting.load_run(root).label)
    self.assertEqual(
        labels, ['smp eps=8 p=0.1 rand_k', 'smp eps=8 p=0.1 top_k']
    )

  def test_incomplete_and_non_private_runs(self):
    root = os.path.join(self.tmp, 'b')
    write_run(root, 'none', [(1, 0.7, 'inf')], summary=False)
    run = plotting.load_run(root)
    self.assertEqual(run.epsilon, [float('inf')])
    self.assertIsNone(run.summary)
    self.assertIn('incomplete', run.label)

  def test_not_a_run_directory(self):
    with self.assertRaisesRegex(ValueError, 'not a run directory'):
      plotting.load_run(self.tmp)

  def test_plots_are_pngs(self):
    runs = []
    for i, (mechanism, eps) in enumerate(
        [('dp_fedavg', 1.0), ('dp_fedavg', 4.0), ('smp', 2.0), ('none', 'inf')]
    ):
      root = os.path.join(self.tmp, f'run{i}')
      rows = [
          (r, 0.1 * r, eps if eps == 'inf' else eps * r / 3) for r in (1, 2, 3)
      ]
      write_run(root, mechanism, rows)
      runs.append(plotting.load_run(root))
    for plot, name in (
        (plotting.plot_accuracy_vs_round, 'r.png'),
        (plotting.plot_accuracy_vs_epsilon, 'sub/e.png'),
    ):
      path = os.path.join(self.tmp, name)
      plot(runs, path)
      width, height = png_size(path)
      self.assertGreater(width, 300)
      self.assertGreater(height, 200)

  def test_units_in_separate_panels_and_runs_joined_only_when_asked(self):
    runs = []
    for i, (mechanism, eps) in enumerate(
        [('smp', 1.0), ('smp', 4.0), ('udp', 2.0), ('none', 'inf')]
    ):
      root = os.path.join(self.tmp, f'run{i}')
      rows = [
          (r, 0.1 * r, eps if eps == 'inf' else eps * r / 3) for r in (1, 2, 3)
      ]
      params = {} if eps == 'inf' else {'epsilon': eps}
      write_run(root, mechanism, rows, params=params)
      runs.append(plotting.load_run(root))
    self.assertEqual(
        [r.unit for r in runs], ['client', 'client', 'example', None]
    )
    path = os.path.join(self.tmp, 'e.png')
    for join in (False, True):
      fig = plotting.plot_accuracy_vs_epsilon(runs, path, join_runs=join)
      client, example = fig.axes
      self.assertEqual(client.get_title(), 'unit: client')
      self.assertEqual(example.get_title(), 'unit: one example')
      labels = [l.get_label() for l in client.get_lines()]
      # Each run is labelled by its parameters, in its own colour; the
      # non-private run is a dashed line in every panel.
      self.assertIn('smp eps=1', labels)
      self.assertIn('smp eps=4', labels)
      self.assertNotIn('udp eps=2', labels)
      self.assertIn('none (eps = inf)', labels)
      self.assertEqual('smp: runs joined' in labels, join)
      colours = {
          l.get_color()
          for l in client.get_lines()
          if l.get_label().startswith('smp eps')
      }
      self.assertLen(colours, 2)

  def _runs(self, specs):
    """Run directories of (mechanism, params, [(round, accuracy, eps)])."""
    runs = []
    for i, (mechanism, params, rows) in enumerate(specs):
      root = os.path.join(self.tmp, f'run{i}')
      write_run(root, mechanism, rows, params=params)
      runs.append(plotting.load_run(root))
    return runs

  def test_round_ticks_are_integers_with_one_evaluation(self):
    runs = self._runs([('smp', {'epsilon': 4.0}, [(5, 0.6, 2.0)])])
    fig = plotting.plot_accuracy_vs_round(runs, os.path.join(self.tmp, 'r.png'))
    (ax,) = fig.axes
    locator = ax.xaxis.get_major_locator()
    self.assertIsInstance(locator, ticker.MaxNLocator)
    low, high = ax.get_xlim()
    shown = [t for t in locator() if low <= t <= high]
    self.assertIn(5, shown)
    for t in shown:  # Not 4.8, 4.9, ..., 5.2.
      self.assertEqual(t, round(t))

  def test_legend_entries_are_drawn_as_the_runs(self):
    runs = self._runs(
        [
            ('smp', {'epsilon': 4.0}, [(1, 0.4, 1.0), (2, 0.6, 2.0)]),
            ('dp_fedavg', {'epsilon': 8.0}, [(2, 0.5, 8.0)]),  # One point.
            ('none', {}, [(1, 0.7, 'inf'), (2, 0.8, 'inf')]),
        ]
    )
    for plot in (
        plotting.plot_accuracy_vs_round,
        plotting.plot_accuracy_vs_epsilon,
    ):
      fig = plot(runs, os.path.join(self.tmp, 'p.png'))
      (ax,) = fig.axes
      handles = {h.get_label(): h for h in ax.get_legend().legend_handles}
      # A run with one point is a marker, and so is its entry.
      one_point = handles['dp_fedavg eps=8']
      self.assertEqual(one_point.get_linestyle(), 'None')
      self.assertEqual(one_point.get_marker(), 'o')
      line = handles['smp eps=4']
      self.assertEqual(line.get_linestyle(), '-')
      self.assertEqual(line.get_marker(), 'o')
      for drawn in ax.get_lines():
        entry = handles[drawn.get_label()]
        self.assertEqual(entry.get_linestyle(), drawn.get_linestyle())
        self.assertEqual(entry.get_marker(), drawn.get_marker())

  def test_far_off_eps_does_not_squeeze_the_other_runs(self):
    central = [
        ('dp_fedavg', {'epsilon': 2.0}, [(1, 0.4, 1.0), (2, 0.5, 2.0)]),
        ('smp', {'epsilon': 8.0}, [(1, 0.5, 4.0), (2, 0.6, 8.0)]),
    ]
    ldp = ('ldp', {'ldp_epsilon': 5.0}, [(1, 0.2, 1.5e6), (2, 0.3, 3e6)])
    path = os.path.join(self.tmp, 'e.png')
    fig = plotting.plot_accuracy_vs_epsilon(self._runs([*central, ldp]), path)
    (ax,) = fig.axes
    self.assertEqual(ax.get_xscale(), 'log')
    low, high = ax.get_xlim()
    # The axis spans the other runs, not up to 3e6.
    self.assertLess(low, 1.0)
    self.assertGreater(high, 8.0)
    self.assertLess(high, 100.0)
    # The ldp run: a marker on the right edge, its eps in its entry.
    handles = {h.get_label(): h for h in ax.get_legend().legend_handles}
    entry = handles['ldp eps0=5 (eps = 3e+06, off scale)']
    self.assertEqual(entry.get_linestyle(), 'None')
    self.assertEqual(entry.get_marker(), '>')
    self.assertIn('eps = 3e+06', [t.get_text() for t in ax.texts])
    # Without it, the axis is as before: every run on it.
    shutil.rmtree(self.tmp)
    fig = plotting.plot_accuracy_vs_epsilon(self._runs(central), path)
    (ax,) = fig.axes
    self.assertEqual(ax.get_xscale(), 'log')
    self.assertLen(ax.texts, 0)
    self.assertNotIn(
        'off scale',
        ' '.join(h.get_label() for h in ax.get_legend().legend_handles),
    )

  def test_runs_of_one_configuration_are_told_apart(self):
    params = {'epsilon': 8.0, 'compression': 0.1, 'mask': 'rand_k'}
    runs = []
    for seed in range(4):
      root = os.path.join(self.tmp, f'seed{seed}')
      write_run(root, 'smp', [(1, 0.5, 4.0), (2, 0.6, 8.0)], params=params)
      runs.append(plotting.load_run(root))
    root = os.path.join(self.tmp, 'other')
    write_run(root, 'smp', [(1, 0.5, 2.0)], params={'epsilon': 4.0})
    runs.append(plotting.load_run(root))
    expected = [f'smp eps=8 p=0.1 rand_k (seed{s})' for s in range(4)]
    # A label no other run has is left as it is.
    self.assertEqual(plotting.legend_labels(runs), expected + ['smp eps=4'])
    for plot in (
        plotting.plot_accuracy_vs_round,
        plotting.plot_accuracy_vs_epsilon,
    ):
      fig = plot(runs, os.path.join(self.tmp, 'p.png'))
      (ax,) = fig.axes
      self.assertEqual(
          [h.get_label() for h in ax.get_legend().legend_handles],
          expected + ['smp eps=4'],
      )

  def test_same_basenames_get_as_much_path_as_tells_them_apart(self):
    runs = []
    for parent in ('a', 'b'):
      root = os.path.join(self.tmp, parent, 'run')
      write_run(root, 'smp', [(1, 0.5, 4.0)], params={'epsilon': 8.0})
      runs.append(plotting.load_run(root))
    self.assertEqual(
        plotting.legend_labels(runs),
        [f'smp eps=8 (a{os.sep}run)', f'smp eps=8 (b{os.sep}run)'],
    )

  def test_server_view_eps_is_a_dashed_line_where_it_differs(self):
    smp = os.path.join(self.tmp, 'smp')
    write_run(
        smp, 'smp', [(1, 0.4, 4.0), (2, 0.6, 8.0)], params={'epsilon': 8.0}
    )
    # The server's view: the worst client's eps, in train_metrics.csv.
    write_train(smp, [(1, 4.0, 41.0), (2, 8.0, 47.0)])
    same = os.path.join(self.tmp, 'same')
    write_run(
        same, 'udp', [(1, 0.3, 1.0), (2, 0.5, 2.0)], params={'epsilon': 2.0}
    )
    write_train(same, [(1, 1.0, 1.0), (2, 2.0, 2.0)])
    fedavg = os.path.join(self.tmp, 'fedavg')  # No server_epsilon column.
    write_run(fedavg, 'dp_fedavg', [(2, 0.5, 2.0)], params={'epsilon': 2.0})
    runs = [plotting.load_run(d) for d in (smp, same, fedavg)]
    self.assertEqual(runs[0].server_epsilon, [41.0, 47.0])
    self.assertEqual(runs[0].server_points(), [(1, 41.0, 0.4), (2, 47.0, 0.6)])
    self.assertEqual(runs[1].server_points(), [])  # Equal to the analyst's.
    self.assertEqual(runs[2].server_points(), [])
    fig = plotting.plot_accuracy_vs_epsilon(
        runs, os.path.join(self.tmp, 'e.png')
    )
    lines = {l.get_label(): l for ax in fig.axes for l in ax.get_lines()}
    server = lines['smp eps=8 (server view)']
    self.assertEqual(list(server.get_xdata()), [41.0, 47.0])
    self.assertEqual(list(server.get_ydata()), [0.4, 0.6])
    self.assertEqual(server.get_linestyle(), '--')
    self.assertEqual(server.get_color(), lines['smp eps=8'].get_color())
    self.assertEqual(
        [label for label in lines if 'server view' in label],
        ['smp eps=8 (server view)'],
    )
    # The axis reaches the server view's eps.
    (client_ax,) = [ax for ax in fig.axes if ax.get_title() == 'unit: client']
    self.assertGreater(client_ax.get_xlim()[1], 47.0)

  def test_a_restarted_model_is_a_line_of_its_own(self):
    root = os.path.join(self.tmp, 'restarted')
    write_run(
        root,
        'dp_fedavg',
        [(2, 0.5, 2.0), (4, 0.2, 3.0), (6, 0.4, 4.0)],
        params={'epsilon': 4.0},
        summary=False,
    )
    # Session 2 restarted the model after the directory's round 2.
    with open(layout.path(root, layout.PRIVACY), 'w') as f:
      json.dump(
          {
              'sessions': [
                  {'start_round': 0},
                  {
                      'start_round': 0,
                      'restarted_model': True,
                      'round_offset': 2,
                  },
                  {'start_round': 1, 'round_offset': 2},
              ]
          },
          f,
      )
    run = plotting.load_run(root)
    self.assertEqual(run.model_starts, [2])
    fig = plotting.plot_accuracy_vs_round(
        [run], os.path.join(self.tmp, 'r.png')
    )
    (line,) = fig.axes[0].get_lines()
    x = list(line.get_xdata())
    self.assertEqual([x[0], x[2], x[3]], [2, 4, 6])
    self.assertTrue(math.isnan(x[1]))  # No line from model 1 to model 2.
    fig = plotting.plot_accuracy_vs_epsilon(
        [run], os.path.join(self.tmp, 'e.png')
    )
    (line,) = fig.axes[0].get_lines()
    self.assertTrue(math.isnan(list(line.get_xdata())[1]))

  def test_no_runs(self):
    with self.assertRaisesRegex(ValueError, 'runs'):
      plotting.plot_accuracy_vs_round([], os.path.join(self.tmp, 'x.png'))
    with self.assertRaisesRegex(ValueError, 'runs'):
      plotting.plot_accuracy_vs_epsilon([], os.path.join(self.tmp, 'x.png'))


if __name__ == '__main__':
  tf.test.main()
