"""Program state managers on a failing disk: one line, nothing left behind."""

import asyncio
import dataclasses
import errno
import os
import shutil
import tempfile
from unittest import mock

import numpy as np
import tensorflow as tf
from tensorflow_federated.python.program import file_utils

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
    self.assertEqual(list(plain.structure()), list(audited.structure()))
    manager = state_lib.IntactStateManager(self.root, 5)
    # An older version's checkpoint of a run without canaries lacked the
    # canary part.
    _, legacy = plain.templates()
    asyncio.run(manager.save(legacy, version=1))
    asyncio.run(manager.save(audited.structure(), version=2))
    template = state_lib.ProgramState({'w': np.zeros(2)})
    for version, want in ((2, audited), (1, plain)):
      loaded, got_version = asyncio.run(
          manager.load_intact(*template.templates())
      )
      self.assertEqual(got_version, version)
      got = state_lib.ProgramState.from_structure(loaded)
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


if __name__ == '__main__':
  tf.test.main()
