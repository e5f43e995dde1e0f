"""Tests of tff_priv.program.plotting on run directories written here."""

import csv
import json
import os
import shutil
import struct
import tempfile

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
        [layout.ROUND, layout.TEST_ACCURACY, layout.TEST_LOSS,
         layout.RDP_EPSILON]
    )
    for r, acc, eps in rows:
      writer.writerow([r, acc, 0.5, eps])
  if summary:
    with open(layout.path(root, layout.SUMMARY), 'w') as f:
      json.dump({'privacy': {'delta': 1e-5}}, f)


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
    write_run(root, 'smp', [(4, 0.6, 2.0), (2, 0.4, 1.0)],
              params={'epsilon': 4.0})
    run = plotting.load_run(root)
    self.assertEqual(run.rounds, [2, 4])
    self.assertEqual(run.test_accuracy, [0.4, 0.6])
    self.assertEqual(run.epsilon, [1.0, 2.0])
    self.assertEqual(run.mechanism, 'smp')
    self.assertEqual(run.label, 'smp eps=4')
    self.assertIsNotNone(run.summary)

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
      rows = [(r, 0.1 * r, eps if eps == 'inf' else eps * r / 3)
              for r in (1, 2, 3)]
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
      rows = [(r, 0.1 * r, eps if eps == 'inf' else eps * r / 3)
              for r in (1, 2, 3)]
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
      colours = {l.get_color() for l in client.get_lines()
                 if l.get_label().startswith('smp eps')}
      self.assertLen(colours, 2)

  def test_no_runs(self):
    with self.assertRaisesRegex(ValueError, 'runs'):
      plotting.plot_accuracy_vs_round([], os.path.join(self.tmp, 'x.png'))
    with self.assertRaisesRegex(ValueError, 'runs'):
      plotting.plot_accuracy_vs_epsilon([], os.path.join(self.tmp, 'x.png'))


if __name__ == '__main__':
  tf.test.main()
