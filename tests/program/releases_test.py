"""The release boundary: an unlisted value cannot leave a private run."""

import asyncio
import glob
import os
import tempfile
from unittest import mock

from absl import logging
import pytest
import tensorflow as tf

from tff_priv.program import layout
from tff_priv.program import releases
from tff_priv.program import training

_SECRET = 'client_work/train/secret_loss'
_SECRET_VALUE = 1234.5678


def _outputs(root):
  """Every file a run directory holds, as bytes (CSV, TensorBoard, JSON)."""
  found = {}
  for path in glob.glob(os.path.join(root, '**', '*'), recursive=True):
    if os.path.isfile(path):
      with open(path, 'rb') as f:
        found[path] = f.read()
  return found


class RunReleasesTest(tf.test.TestCase):

  def _release(self, private):
    root = tempfile.mkdtemp()
    row = {
        layout.RDP_EPSILON: 1.5,
        'delta': 1e-5,
        'clients': 3,
        'client_work': {'train': {'secret_loss': _SECRET_VALUE}},
    }
    # LoggingReleaseManager writes with absl (the 'absl' logger).
    with self.assertLogs(logger='absl', level='INFO') as logs:
      run_releases = releases.RunReleases(root, private)
      asyncio.run(run_releases.train(row, 1))
      asyncio.run(
          run_releases.eval(
              {layout.TEST_ACCURACY: 0.5, 'eval': {'loss': 0.7}, 'clients': 3},
              1,
          )
      )
      logging.info('done')
    return root, '\n'.join(logs.output)

  def test_a_private_run_releases_only_the_listed_columns(self):
    root, log = self._release(private=True)
    with open(layout.path(root, layout.TRAIN_CSV)) as f:
      header = f.readline().strip().split(',')
    self.assertCountEqual(header, [layout.ROUND, layout.RDP_EPSILON, 'delta'])
    with open(layout.path(root, layout.EVAL_CSV)) as f:
      header = f.readline().strip().split(',')
    self.assertCountEqual(
        header, [layout.ROUND, layout.TEST_ACCURACY, 'eval/loss']
    )
    for path, content in _outputs(root).items():
      self.assertNotIn(b'secret_loss', content, path)
      self.assertNotIn(b'clients', content, path)
    self.assertNotIn('secret_loss', log)
    self.assertNotIn(str(_SECRET_VALUE), log)

  def test_tensorboard_tags(self):
    root, _ = self._release(private=True)
    tags = set()
    for path in glob.glob(
        os.path.join(root, layout.TENSORBOARD, '**', '*'), recursive=True
    ):
      if os.path.isfile(path):
        for event in tf.compat.v1.train.summary_iterator(path):
          tags.update(v.tag for v in event.summary.value)
    self.assertIn('eval/loss', tags)  # Not eval/eval/loss.
    self.assertIn('eval/test_accuracy', tags)
    self.assertIn('train/rdp_epsilon', tags)
    self.assertFalse([t for t in tags if t.startswith('eval/eval/')], tags)

  def test_a_non_private_run_releases_everything(self):
    root, log = self._release(private=False)
    with open(layout.path(root, layout.TRAIN_CSV)) as f:
      header = f.readline().strip().split(',')
    self.assertIn(_SECRET, header)
    self.assertIn('clients', header)
    self.assertIn(str(_SECRET_VALUE), log)  # The log is captured.

  def test_last_round_is_the_last_row_of_either_csv(self):
    root = tempfile.mkdtemp()
    self.assertEqual(releases.last_round(root), 0)  # No CSV yet.
    run_releases = releases.RunReleases(root, private=True)
    asyncio.run(run_releases.train({layout.SESSION: 1}, 2))
    self.assertEqual(releases.last_round(root), 2)
    asyncio.run(run_releases.eval({layout.SESSION: 1}, 3))
    self.assertEqual(releases.last_round(root), 3)

  def test_public_columns(self):
    self.assertTrue(releases.is_public_train(layout.SESSION))
    self.assertTrue(releases.is_public_eval(layout.SESSION))
    self.assertTrue(releases.is_public_train('aggregator/noise/stddev'))
    self.assertTrue(releases.is_public_train('client_work/train/dp_loss'))
    self.assertFalse(releases.is_public_train('client_work/train/loss'))
    self.assertFalse(releases.is_public_train('clients'))
    self.assertFalse(releases.is_public_train('round_seconds'))
    self.assertTrue(releases.is_public_eval('eval/loss'))
    self.assertFalse(releases.is_public_eval('clients'))


class PrivateRunBoundaryTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_a_value_the_loop_adds_reaches_no_output_of_a_private_run(self):
    # Every training row of a private run gets a non-public column, as a
    # bug in the loop would add one: the boundary keeps it out of the CSV,
    # TensorBoard and the log.
    original = releases.RunReleases.train

    async def leaky(self, row, round_num):
      await original(self, {**row, 'secret_loss': _SECRET_VALUE}, round_num)

    root = os.path.join(tempfile.mkdtemp(), 'run')
    config = training.RunConfig(
        task='digits',
        batch_size=20,
        mechanism='dp_fedavg',
        clients_per_round=3,
        total_rounds=2,
        eval_every=1,
        client_learning_rate=0.1,
        params={'epsilon': 8.0, 'clip': 1.0},
    )
    # TF's checkpointing resets absl's level to its verbosity flag's (below
    # INFO by default): at INFO, the log rows of every round are read.
    verbosity = logging.get_verbosity()
    logging.set_verbosity(logging.INFO)
    self.addCleanup(logging.set_verbosity, verbosity)
    with mock.patch.object(releases.RunReleases, 'train', leaky):
      with self.assertLogs(logger='absl', level='INFO') as logs:
        training.run(config, root, progress=False)
        logging.info('done')
    for path, content in _outputs(root).items():
      self.assertNotIn(b'secret_loss', content, path)
    self.assertIn(layout.RDP_EPSILON, '\n'.join(logs.output))  # The rows.
    self.assertNotIn('secret_loss', '\n'.join(logs.output))
    with open(layout.path(root, layout.TRAIN_CSV)) as f:
      self.assertIn(layout.RDP_EPSILON, f.readline())


if __name__ == '__main__':
  tf.test.main()
