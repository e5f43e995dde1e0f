"""Program state managers: a failing disk, older checkpoints."""

import asyncio
import collections
import dataclasses
import errno
import os
import shutil
import tempfile
from unittest import mock

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.program import file_utils

from tff_priv.aggregators import bandmf
from tff_priv.aggregators import blt
from tff_priv.aggregators import correlated_noise
from tff_priv.program import files
from tff_priv.program import state as state_lib
from tff_priv.program import train_model_accounting as tma


def _full_disk_write(real):
  """TFF's `write_saved_model`: fills the disk once its temp dir is written."""

  async def write(value, path, overwrite=False):
    del value, overwrite
    os.makedirs(f'{path}_temp1234')
    with open(os.path.join(f'{path}_temp1234', 'variables.data'), 'w') as f:
      f.write('partial')
    raise tf.errors.ResourceExhaustedError(
        None,
        None,
        'Error while writing\n...\n; No space left on device [Op:SaveV2]',
    )

  del real
  return write


class FailingDiskTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)

  def _check(self, save):
    with mock.patch.object(
        file_utils,
        'write_saved_model',
        _full_disk_write(file_utils.write_saved_model),
    ):
      with self.assertRaises(OSError) as raised:
        save()
    e = raised.exception
    self.assertEqual(e.errno, errno.ENOSPC)
    self.assertEqual(str(e.strerror), 'No space left on device')
    self.assertNotIn('\n', str(e))
    self.assertEqual(os.listdir(e.filename), [])  # No temp folder left.

  def test_the_training_program_state(self):
    manager = state_lib.IntactStateManager(self.root, 3)
    self._check(
        lambda: asyncio.run(manager.save({'x': np.zeros(3)}, version=1))
    )

  def test_the_train_model_state(self):
    manager = tma.SerialFileProgramStateManager(self.root)
    self._check(lambda: manager.save({'x': np.zeros(3)}, version=1))
    # And when it works, the state is on disk when `save` returns.
    done = manager.save({'x': np.ones(3)}, version=2)
    self.assertEqual(os.listdir(self.root), ['program_state_2'])
    asyncio.run(done)

  def test_a_temp_folder_of_a_save_cut_short_is_removed_at_load(self):
    os.makedirs(os.path.join(self.root, 'program_state_4_temp5678'))
    manager = state_lib.IntactStateManager(self.root, 3)
    self.assertEqual(
        asyncio.run(manager.load_intact({'x': np.zeros(3)})), (None, None)
    )
    self.assertEqual(os.listdir(self.root), [])

  def test_a_program_state_has_one_shape_and_older_ones_still_load(self):
    plain = state_lib.ProgramState(
        {'w': np.zeros(2)}, round_num=3, sessions=({'start_round': 0},)
    )
    audited = dataclasses.replace(
        plain, canary_seed=7, canary_max_cosines=np.full(4, -1.0)
    )
    self.assertEqual(
        list(plain.structure()['state']), list(audited.structure()['state'])
    )
    manager = state_lib.IntactStateManager(self.root, 5)
    # An older version's checkpoint of a run without canaries lacked the
    # canary part.
    _, _, legacy = plain.templates()
    asyncio.run(manager.save(legacy, version=1))
    asyncio.run(manager.save(audited.structure(), version=2))
    template = state_lib.ProgramState({'w': np.zeros(2)})
    for version, want in ((2, audited), (1, plain)):
      loaded, got_version = asyncio.run(
          manager.load_intact(*template.templates())
      )
      self.assertEqual(got_version, version)
      got = state_lib.ProgramState.from_structure(loaded, template)
      self.assertEqual(got.round_num, 3)
      self.assertEqual(got.sessions, ({'start_round': 0},))
      self.assertEqual(got.canary_seed, want.canary_seed)
      self.assertAllEqual(got.canary_max_cosines, want.canary_max_cosines)
      self.assertAllEqual(got.train_state['w'], np.zeros(2))
      # Not set aside: the newest is removed for the next round of the loop.
      shutil.rmtree(os.path.join(self.root, f'program_state_{version}'))
    self.assertEqual(manager.set_aside, [])

  def test_a_json_write_that_fails_leaves_the_old_file(self):
    path = os.path.join(self.root, 'ledger.json')
    files.write_json(path, {'a': 1}, durable=True)

    def no_space(*args, **kwargs):
      raise OSError(errno.ENOSPC, 'No space left on device')

    with mock.patch.object(os, 'fsync', no_space):
      with self.assertRaises(OSError):
        files.write_json(path, {'a': 2}, durable=True)
    self.assertEqual(os.listdir(self.root), ['ledger.json'])
    with open(path) as f:
      self.assertIn('"a": 1', f.read())


def _learning_state(cls, planned: int, fill: float = 1.0):
  """A learning state whose aggregator is a stream state of `cls`."""
  stream = cls(
      noise=collections.OrderedDict(w=np.full([2, 3], fill, np.float32)),
      nonce=np.array([5, 7], np.int64),
      rounds_done=np.int64(4),
      force_restart=np.bool_(False),
      dp_event=dp_accounting.GaussianDpEvent(fill).to_named_tuple(),
      is_init_state=np.bool_(False),
      planned_rounds=np.int64(planned),
  )
  return tff.learning.templates.LearningAlgorithmState(
      global_model_weights=np.full(3, fill, np.float32),
      distributor=(),
      client_work=(),
      aggregator=stream,
      finalizer=(),
  )


class StreamCheckpointTest(tf.test.TestCase):
  """A checkpoint of tff_priv 0.2 (stream states as OrderedDicts) still loads.

  Its leaves are in another order than a `StreamState`'s: it loads into its
  own form (`templates`), never into this version's by its leaf count.
  """

  def setUp(self):
    super().setUp()
    self.root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)

  def _assert_stream(self, got, cls, planned):
    aggregator = got.aggregator
    self.assertIs(type(aggregator), cls)
    self.assertAllEqual(aggregator.noise['w'], np.full([2, 3], 1.0))
    self.assertAllEqual(aggregator.nonce, [5, 7])
    self.assertEqual(int(aggregator.rounds_done), 4)
    self.assertEqual(int(aggregator.planned_rounds), planned)
    self.assertAllEqual(got.global_model_weights, np.full(3, 1.0))

  def test_a_legacy_checkpoint_of_each_stream_loads_as_its_state(self):
    for cls, planned, key in (
        (blt.BLTState, 0, 'buffers'),
        (bandmf.BandMFState, 9, 'window'),
    ):
      with self.subTest(cls.__name__):
        root = os.path.join(self.root, cls.__name__)
        written = state_lib.ProgramState(
            _learning_state(cls, planned), round_num=4
        )
        new, legacy, _ = written.templates()
        # What tff_priv 0.2 wrote: the OrderedDict, a plan only if any.
        old = legacy['train_state'].aggregator
        self.assertIsInstance(old, collections.OrderedDict)
        self.assertIn(key, old)
        self.assertEqual('planned_rounds' in old, planned > 0)
        manager = state_lib.IntactStateManager(root, 5)
        asyncio.run(manager.save(legacy, version=1))
        asyncio.run(manager.save(new, version=2))
        # The run's own initial state, of the same factory (the same plan).
        template = state_lib.ProgramState(
            _learning_state(cls, planned, fill=0.0)
        )
        for version in (2, 1):
          loaded, got_version = asyncio.run(
              manager.load_intact(*template.templates())
          )
          self.assertEqual(got_version, version)
          got = state_lib.ProgramState.from_structure(loaded, template)
          self.assertEqual(got.round_num, 4)
          self._assert_stream(got.train_state, cls, planned)
          shutil.rmtree(os.path.join(root, f'program_state_{version}'))
        self.assertEqual(manager.set_aside, [])

  def test_train_models_manager_loads_a_legacy_checkpoint(self):
    structure = (_learning_state(blt.BLTState, 0, fill=0.0), np.int64(0))
    legacy = correlated_noise.legacy_form(
        (_learning_state(blt.BLTState, 0), np.int64(3))
    )
    asyncio.run(tff.program.FileProgramStateManager(self.root).save(legacy, 3))
    manager = tma.SerialFileProgramStateManager(self.root)
    (got, round_num), version = asyncio.run(manager.load_latest(structure))
    self.assertEqual((version, int(round_num)), (3, 3))
    self._assert_stream(got, blt.BLTState, 0)
    # Its own saves carry the format, and load back.
    asyncio.run(
        manager.save((_learning_state(blt.BLTState, 0), np.int64(4)), 4)
    )
    (got, round_num), version = asyncio.run(manager.load_latest(structure))
    self.assertEqual((version, int(round_num)), (4, 4))
    self._assert_stream(got, blt.BLTState, 0)


if __name__ == '__main__':
  tf.test.main()
