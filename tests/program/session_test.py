"""Tests of a session's start and resume (`tff_priv.program.session`)."""

import asyncio
import dataclasses
import json
import os
import shutil
import tempfile
import types

import pytest
import tensorflow as tf

from tff_priv.program import config as config_lib
from tff_priv.program import layout
from tff_priv.program import session as session_lib
from tff_priv.program import setup as setup_lib
from tff_priv.program import state as state_lib
from tff_priv.program import training


def _config(**changes):
  base = training.RunConfig(
      task='digits',
      batch_size=20,
      mechanism='dp_fedavg',
      clients_per_round=2,
      total_rounds=3,
      eval_every=3,
      client_learning_rate=0.1,
      params={'epsilon': 8.0},
  )
  return dataclasses.replace(base, **changes).validate()


@pytest.mark.slow  # Each test builds the task and its process.
class StartOrResumeTest(tf.test.TestCase):

  def setUp(self):
    super().setUp()
    self.root = os.path.join(tempfile.mkdtemp(), 'run')
    self.addCleanup(shutil.rmtree, os.path.dirname(self.root), True)

  def _open(self, config, restart_model=False):
    setup = setup_lib.build(config, cache_dir=None)
    config_lib.prepare_output_dir(self.root, config)
    manager = state_lib.IntactStateManager(
        layout.path(self.root, layout.CHECKPOINTS), 3
    )
    return asyncio.run(
        session_lib.start_or_resume(
            config, setup, self.root, manager, restart_model
        )
    )

  def test_a_start_is_a_frozen_session_at_round_0_with_its_checkpoint(self):
    session = self._open(_config())
    self.assertEqual(session.start_round, 0)
    self.assertEqual(session.privacy.analyst.num_releases, 0)
    self.assertEqual(len(session.state.sessions), 1)
    self.assertIsNotNone(session.state.sampling_seed)
    with self.assertRaises(dataclasses.FrozenInstanceError):
      session.redraw_until = 5  # pytype: disable=not-writable
    # Its checkpoint 0 and the owner's seed are on disk before any round.
    self.assertTrue(
        os.path.isdir(
            os.path.join(
                layout.path(self.root, layout.CHECKPOINTS), 'program_state_0'
            )
        )
    )
    with open(layout.path(self.root, layout.SECRETS)) as f:
      self.assertEqual(
          json.load(f)['sampling_seed'], session.state.sampling_seed
      )

  def test_a_resume_continues_at_the_checkpoint_with_every_charge(self):
    config = _config()
    # Rounds 1-2 charged, checkpointed at round 2 only.
    training.run_until(config, self.root, 2, checkpoint_every=2, progress=False)
    session = self._open(config)
    self.assertEqual(session.start_round, 2)
    self.assertEqual(session.privacy.analyst.num_releases, 2)
    self.assertEqual(session.redraw_until, 0)  # Nothing released twice.
    self.assertEqual([s['start_round'] for s in session.state.sessions], [0, 2])

  def test_charges_without_a_checkpoint_are_refused_in_one_line(self):
    config = _config()
    training.run_until(
        config, self.root, 1, checkpoint_every=100, progress=False
    )
    shutil.rmtree(layout.path(self.root, layout.CHECKPOINTS))
    with self.assertRaisesRegex(
        config_lib.ConfigError, 'no readable checkpoint'
    ) as refused:
      self._open(config)
    self.assertNotIn('\n', str(refused.exception))
    # A restarted model keeps the charge and draws anew.
    session = self._open(config, restart_model=True)
    self.assertEqual(session.start_round, 0)
    self.assertEqual(session.privacy.analyst.num_releases, 1)
    self.assertEqual(session.redraw_until, config.total_rounds)
    self.assertEqual(session.round_offset, 1)


class SameStreamTest(tf.test.TestCase):

  def test_a_stream_matches_to_1e9_relative_and_in_every_other_value(self):
    recorded = {'bands': 2, 'coefs': [0.8, 0.6]}
    self.assertTrue(
        session_lib.same_stream(
            recorded, {'bands': 2, 'coefs': [0.8 * (1 + 1e-12), 0.6]}
        )
    )
    for built in (
        {'bands': 2, 'coefs': [0.8, 0.6 * (1 + 1e-6)]},
        {'bands': 3, 'coefs': [0.8, 0.6]},
        {'bands': 2, 'coefs': [0.8, 0.6, 0.0]},
        {'bands': 2},
        None,
    ):
      self.assertFalse(session_lib.same_stream(recorded, built), built)


class StreamChangedTest(tf.test.TestCase):

  def _changed(self, built, ledger, checkpointed):
    mechanism = types.SimpleNamespace(name='bandmf', stream=built)
    return session_lib.stream_changed(mechanism, ledger, checkpointed)

  def test_both_the_ledger_and_the_checkpoint_must_have_run_this_stream(self):
    a, b = {'bands': 2, 'coefs': [0.8, 0.6]}, {'bands': 2, 'coefs': [1.0, 0.0]}
    session = lambda stream: {'start_round': 0, 'stream': stream}
    self.assertFalse(self._changed(a, [session(a)], [session(a)]))
    # A later session charged a round of stream a it never checkpointed;
    # the checkpoint holds b's state.
    self.assertTrue(self._changed(a, [session(b), session(a)], [session(b)]))
    self.assertTrue(self._changed(a, [session(b)], [session(a)]))
    # An older version recorded no stream: restarted, charged.
    self.assertTrue(self._changed(a, [{'start_round': 0}], [session(a)]))
    self.assertTrue(self._changed(a, [session(a)], []))
    # No stream to continue.
    self.assertFalse(self._changed(None, [{'start_round': 0}], []))
