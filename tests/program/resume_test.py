"""A run's ledger through interruptions and faults (program.training)."""

import collections
import contextlib
import csv
import json
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import parameterized
import dp_accounting
import numpy as np
import pytest
import tensorflow as tf

from tff_priv.accounting import calibration
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.aggregators import udp as udp_aggregators
from tff_priv.learning import udp as udp_learning
from tff_priv.program import layout
from tff_priv.program import session as session_lib
from tff_priv.program import training

_TARGET = 8.0


def _config(total_rounds=4):
  return training.RunConfig(
      task='digits',
      mechanism='dp_fedavg',
      total_rounds=total_rounds,
      clients_per_round=3,
      batch_size=20,
      client_learning_rate=0.1,
      eval_every=100,
      params={'epsilon': _TARGET, 'clip': 1.0},
  )


def _ledger(root):
  with open(layout.path(root, layout.PRIVACY)) as f:
    return ledger_lib.PrivacyLedger.from_json(
        json.dumps(json.load(f)['privacy']['analyst'])
    )


def _by_hand(sessions_rounds):
  """eps of (noise multiplier, rounds) Poisson-sampled Gaussians, q = 3/10."""
  accountant = dp_accounting.rdp.RdpAccountant()
  for z, rounds in sessions_rounds:
    accountant.compose(
        dp_accounting.PoissonSampledDpEvent(
            0.3, dp_accounting.GaussianDpEvent(z)
        ),
        rounds,
    )
  return accountant.get_epsilon(1e-5)


def _csv_rows(root, name):
  with open(layout.path(root, name), newline='') as f:
    return list(csv.DictReader(f))


def _corrupt_checkpoints(root):
  for dirpath, _, names in os.walk(layout.path(root, layout.CHECKPOINTS)):
    for name in names:
      with open(os.path.join(dirpath, name), 'wb') as f:
        f.write(b'\0garbage')


class _RootTestCase(tf.test.TestCase, parameterized.TestCase):

  def _root(self):
    path = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, path, ignore_errors=True)
    return os.path.join(path, 'run')


class DamagedLedgerTest(_RootTestCase):

  def test_a_damaged_ledger_is_refused_before_anything_is_built(self):
    root, config = self._root(), _config(total_rounds=2)
    training.prepare_output_dir(root, config)
    path = layout.path(root, layout.PRIVACY)
    for damage in ('{"round": 1, "privacy"', '{"round": 1}', '\xff\xfe'):
      with open(path, 'w') as f:
        f.write(damage)
      with self.assertRaisesRegex(
          training.ConfigError,
          'privacy_ledger.json is damaged .* never ' 'overwritten',
      ) as refused:
        training.run(config, root, progress=False)
      self.assertNotIn('\n', str(refused.exception))
      with open(path) as f:
        self.assertEqual(f.read(), damage)
    self.assertFalse(os.path.exists(layout.path(root, layout.CHECKPOINTS)))


class CrdResumeTest(tf.test.TestCase):

  def test_the_schedule_is_charged_for_the_rounds_run_again(self):
    # CRD's state counts the cost of the rounds up to its checkpoint; the
    # ledger holds every release. A resume sets the schedule's spent budget
    # to the ledger's whole cost, so the rounds left share what is left.
    # Poisson sampling: the RDP of fixed-size sampling (the program's) is
    # slow to tabulate; the schedule's arithmetic is the same.
    sampling = sampling_lib.Sampling.poisson(0.3)
    schedule = udp_learning.crd_schedule(
        4.0, 1e-5, 0.1, 8, sampling=sampling, table_size=32
    )
    planned, cost = (
        float(x) for x in schedule.round_noise(schedule.initial_state())
    )
    ledger = ledger_lib.PrivacyLedger()
    ledger.record_gaussian(planned / 0.1, count=5, sampling=sampling)
    checkpoint = schedule.initial_state()._replace(
        rounds_done=tf.constant(3, tf.int32),
        spent=tf.constant(3 * cost, tf.float64),
    )
    learning = collections.namedtuple('Learning', 'aggregator')(
        udp_aggregators.ClientNoiseState(
            noise=tuple(np.asarray(x) for x in checkpoint),
            mean=(),
            dp_event=None,
            is_init_state=False,
        )
    )
    loaded = udp_learning.CRDState(
        learning=learning, validation_loss=0.0, discounts=0
    )
    adopt = udp_learning.crd_adopt(
        schedule, 0.1, calibration.Spent.of_ledger(ledger)
    )
    state = adopt(loaded, None).learning.aggregator.noise
    self.assertAllClose(state.spent, 5 * cost, rtol=1e-9)
    self.assertEqual(int(state.rounds_done), 3)
    # The 5 rounds left of the plan share 8 - 5 planned rounds' budget.
    sigma, _ = schedule.round_noise(tf.nest.map_structure(tf.constant, state))
    self.assertGreater(float(sigma), planned)
    # With only the checkpoint's rounds in the ledger, nothing moves.
    three = ledger_lib.PrivacyLedger()
    three.record_gaussian(planned / 0.1, count=3, sampling=sampling)
    same = udp_learning.crd_adopt(
        schedule, 0.1, calibration.Spent.of_ledger(three)
    )(loaded, None)
    self.assertIs(same, loaded)
    # A budget the rounds left cannot share within 4x the planned sigma.
    many = ledger_lib.PrivacyLedger()
    many.record_gaussian(planned / 0.1, count=8, sampling=sampling)
    with self.assertRaisesRegex(ValueError, 'planned|budget|tabulated'):
      udp_learning.crd_adopt(schedule, 0.1, calibration.Spent.of_ledger(many))(
          loaded, None
      )


@pytest.mark.slow
class ResumeTest(_RootTestCase):
  """Resumes that are charged, meet the target, or stop in one line.

  In process on 'digits' (dp_fedavg, 10 clients, 3 a round): the ledger file is
  append-only across every start of a run directory, a resumed run's rounds left
  are noised for the budget left (the finished run meets its target), and a
  damaged ledger, unreadable checkpoints or a spent budget stop the run in one
  line. The subprocess versions (kill -9, a full disk, signals) are in
  tests/scripts/train_faults_test.py.
  """

  def test_rounds_run_again_are_charged_and_the_rest_meet_the_target(self):
    root, config = self._root(), _config()
    # Checkpoints at 0 and 2; round 3 released (charged) before the stop.
    training.run_until(config, root, 3, checkpoint_every=2, progress=False)
    self.assertEqual(_ledger(root).num_releases, 3)
    summary = training.run(config, root, checkpoint_every=2, progress=False)
    first, second = summary['sessions']
    self.assertEqual((first['start_round'], second['start_round']), (0, 2))
    # Rounds 1-3 at the planned z, then rounds 3-4 again at the z that the
    # budget left allows: 5 charges, the whole at most the target.
    self.assertGreater(second['noise_multiplier'], first['noise_multiplier'])
    self.assertEqual(_ledger(root).num_releases, 5)
    eps = summary['privacy']['rdp_epsilon']
    self.assertAllClose(
        eps,
        _by_hand(
            [(first['noise_multiplier'], 3), (second['noise_multiplier'], 2)]
        ),
        rtol=1e-9,
    )
    self.assertBetween(eps, _TARGET - 0.01, _TARGET)
    self.assertEqual(summary['privacy']['target_epsilon'], _TARGET)
    # Without the recalibration the run would end above its target.
    self.assertGreater(_by_hand([(first['noise_multiplier'], 5)]), _TARGET)

  def test_unreadable_checkpoints_never_reset_the_ledger(self):
    root, config = self._root(), _config()
    training.run_until(config, root, 2, progress=False)
    _corrupt_checkpoints(root)
    with open(layout.path(root, layout.PRIVACY)) as f:
      before = f.read()
    with self.assertRaisesRegex(
        training.ConfigError,
        r'no readable checkpoint .* holds 2 charged rounds .*--restart_model',
    ) as refused:
      training.run(config, root, progress=False)
    self.assertNotIn('\n', str(refused.exception))
    with open(layout.path(root, layout.PRIVACY)) as f:
      self.assertEqual(f.read(), before)
    # A new model, every charge kept: 2 + 4 charges, noised for the budget
    # the first 2 left.
    summary = training.run(config, root, progress=False, restart_model=True)
    self.assertEqual(_ledger(root).num_releases, 6)
    first, second = summary['sessions']
    self.assertEqual(
        second,
        {
            'start_round': 0,
            'restarted_model': True,
            'round_offset': 2,
            'noise_multiplier': second['noise_multiplier'],
        },
    )
    eps = summary['privacy']['rdp_epsilon']
    self.assertAllClose(
        eps,
        _by_hand(
            [(first['noise_multiplier'], 2), (second['noise_multiplier'], 4)]
        ),
        rtol=1e-9,
    )
    self.assertBetween(eps, _TARGET - 0.01, _TARGET)
    # The old checkpoints are set aside, not removed.
    self.assertTrue(
        os.path.isdir(
            layout.path(root, layout.CHECKPOINTS) + '.before_restart.1'
        )
    )

  def test_a_restarted_model_appends_its_rows(self):
    # Session 1 stops between round 2's checkpoint and its release; session
    # 2 restarts the model (releasing round 2's waiting rows first) and stops
    # after its round 2; session 3 resumes it. The CSVs hold every row once,
    # the directory's rounds 1-6, and the first initial model is kept.
    root, config = self._root(), _config()
    real_train = training.releases_lib.RunReleases.train

    async def stop_at_round_2(releases, row, round_num):
      if round_num == 2:
        raise RuntimeError('stopped')
      await real_train(releases, row, round_num)

    with mock.patch.object(
        training.releases_lib.RunReleases, 'train', stop_at_round_2
    ):
      with self.assertRaisesRegex(RuntimeError, 'stopped'):
        training.run_until(config, root, 2, progress=False)
    with open(layout.path(root, layout.INITIAL_MODEL), 'rb') as f:
      first_model = f.read()
    self.assertIsNone(
        training.run_until(config, root, 2, progress=False, restart_model=True)
    )
    summary = training.run(config, root, progress=False)
    rows = _csv_rows(root, layout.TRAIN_CSV)
    self.assertEqual(
        [r[layout.ROUND] for r in rows], ['1', '2', '3', '4', '5', '6']
    )
    self.assertEqual(
        [r[layout.SESSION] for r in rows], ['1', '1', '2', '2', '3', '3']
    )
    eps = [float(r[layout.RDP_EPSILON]) for r in rows]
    self.assertEqual(eps, sorted(eps))  # Every charge kept, in order.
    # eval_every=100: the new model's last round only.
    evals = _csv_rows(root, layout.EVAL_CSV)
    self.assertEqual(
        [(r[layout.ROUND], r[layout.SESSION]) for r in evals], [('6', '3')]
    )
    with open(
        layout.path(root, layout.INITIAL_MODEL + '.before_restart.1'), 'rb'
    ) as f:
      self.assertEqual(f.read(), first_model)
    self.assertTrue(os.path.exists(layout.path(root, layout.INITIAL_MODEL)))
    self.assertEqual(
        [s.get('round_offset', 0) for s in summary['sessions']], [0, 2, 2]
    )
    self.assertEqual(summary['round_offset'], 2)
    self.assertEqual(summary['best_round'], 6)
    self.assertEqual(summary['rounds_run'], 4)
    self.assertEqual(_ledger(root).num_releases, 6)

  def test_a_missing_ledger_is_refused_even_for_a_new_model(self):
    root, config = self._root(), _config(total_rounds=3)
    training.run_until(config, root, 2, progress=False)
    os.remove(layout.path(root, layout.PRIVACY))
    for restart_model in (False, True):
      with self.assertRaisesRegex(
          training.ConfigError,
          r'privacy_ledger.json is missing, but checkpoint 2 holds 2 ',
      ):
        training.run(config, root, progress=False, restart_model=restart_model)

  @parameterized.parameters(
      ('dp_ftrl', {}),
      ('smp', {}),
      ('udp', {}),
      ('distortion', {'parameter_variance': 0.01}),
  )
  def test_every_target_mechanism_ends_at_its_target(self, mechanism, extra):
    # dp_fedavg above (against the hand count), blt in training_test. Rounds
    # 1-3 charged, a checkpoint at 2: round 3 runs again, noised (or its
    # stream charged again) for the budget left; the run ends at or under
    # its target, close to it, with more charges than rounds.
    config = training.RunConfig(
        task='digits',
        mechanism=mechanism,
        total_rounds=4,
        clients_per_round=3,
        batch_size=20,
        client_learning_rate=0.1,
        eval_every=100,
        params={'epsilon': _TARGET, **extra},
    )
    root = self._root()
    training.run_until(config, root, 3, checkpoint_every=2, progress=False)
    charged = _ledger(root).num_releases
    summary = training.run(config, root, checkpoint_every=2, progress=False)
    first, second = summary['sessions']
    self.assertEqual(second['start_round'], 2)
    self.assertGreater(_ledger(root).num_releases, charged)
    self.assertGreaterEqual(
        second['noise_multiplier'], first['noise_multiplier']
    )
    eps = summary['privacy']['rdp_epsilon']
    self.assertBetween(eps, _TARGET - 0.05, _TARGET)
    self.assertEqual(summary['privacy']['target_epsilon'], _TARGET)

  def test_bandmf_resumed_mid_cycle_is_charged_and_ends_at_its_target(self):
    # b = 2 over 8 rounds: 4 cycles planned. Rounds 1-3 charged (cycles at
    # rounds 1 and 3), a checkpoint at 2: round 3 runs again on a restarted
    # window, its new cycle charged, and 2 more after it (rounds 5, 7),
    # noised for the budget left; the groups (the bands) stay the same.
    config = training.RunConfig(
        task='digits',
        mechanism='bandmf',
        total_rounds=8,
        clients_per_round=3,
        batch_size=20,
        client_learning_rate=0.1,
        eval_every=100,
        params={'epsilon': _TARGET, 'bands': 2},
    )
    root = self._root()
    training.run_until(config, root, 3, checkpoint_every=2, progress=False)
    # Each round records the state's SelfComposedDpEvent(cycle, 0 or 1).
    cycles = lambda: sum(
        count * getattr(event, 'count', 1)
        for event, count in _ledger(root).entries
    )
    charged = cycles()
    summary = training.run(config, root, checkpoint_every=2, progress=False)
    first, second = summary['sessions']
    self.assertEqual(second['start_round'], 2)
    self.assertGreater(second['noise_multiplier'], first['noise_multiplier'])
    self.assertEqual(cycles() - charged, 3)
    self.assertEqual(summary['sampling']['bands'], 2)
    eps = summary['privacy']['rdp_epsilon']
    self.assertBetween(eps, _TARGET - 0.05, _TARGET)

  def test_a_stream_built_differently_on_resume_restarts_charged(self):
    # b = 2 over 4 rounds at a given z: cycles at rounds 1 and 3. A stop
    # after round 1 with its checkpoint: round 2 continues the cycle. If
    # the session finds other coefficients than those the last one ran
    # (here: the recorded ones altered), it restarts the cycle at round 2,
    # charged, instead of continuing it with another strategy.
    config = training.RunConfig(
        task='digits',
        mechanism='bandmf',
        total_rounds=4,
        clients_per_round=3,
        batch_size=20,
        client_learning_rate=0.1,
        eval_every=100,
        params={'noise_multiplier': 2.0, 'bands': 2},
    )
    cycles = lambda root: sum(
        count * getattr(event, 'count', 1)
        for event, count in _ledger(root).entries
    )
    charged = {}
    for altered in (False, True):
      root = self._root()
      training.run_until(config, root, 1, checkpoint_every=1, progress=False)
      with open(layout.path(root, layout.PRIVACY)) as f:
        written = json.load(f)
      (first,) = written['sessions']
      self.assertEqual(first['stream']['bands'], 2)
      if altered:
        first['stream']['coefs'][1] *= 1.01
        with open(layout.path(root, layout.PRIVACY), 'w') as f:
          json.dump(written, f)
      with (
          self.assertLogs(level='WARNING')
          if altered
          else contextlib.nullcontext() as logs
      ):
        summary = training.run(config, root, checkpoint_every=1, progress=False)
      if altered:
        self.assertIn(
            'differs from (or was not recorded by) the session',
            ' '.join(logs.output),
        )
        # Session 2 records what it built, not the altered coefficients.
        self.assertNotEqual(
            summary['sessions'][1]['stream']['coefs'], first['stream']['coefs']
        )
      self.assertEqual(
          summary['sessions'][1]['stream'],
          summary['sessions'][0]['stream']
          if not altered
          else dict(
              first['stream'], coefs=summary['sessions'][1]['stream']['coefs']
          ),
      )
      charged[altered] = cycles(root)
    self.assertEqual(charged, {False: 2, True: 3})

  def test_udp_paper_calibration_keeps_its_planned_noise(self):
    # The paper's closed form cannot take what was spent: a resumed run
    # keeps the sigma of its plan over all T rounds (never less).
    config = training.RunConfig(
        task='digits',
        mechanism='udp',
        total_rounds=4,
        clients_per_round=3,
        batch_size=20,
        client_learning_rate=0.5,
        eval_every=100,
        params={'epsilon': _TARGET, 'udp_calibration': 'paper'},
    )
    root = self._root()
    training.run_until(config, root, 3, checkpoint_every=2, progress=False)
    summary = training.run(config, root, checkpoint_every=2, progress=False)
    first, second = summary['sessions']
    self.assertEqual(first['noise_multiplier'], second['noise_multiplier'])

  def test_a_budget_the_rounds_left_cannot_use_stops_in_one_line(self):
    root, config = self._root(), _config()
    # No checkpoint after round 0: rounds 1-3 charged, all four to run
    # again on what 3 of 4 planned rounds left: 1.42x the planned z, over
    # a limit of 1.3x (the program's is 4x).
    training.run_until(config, root, 3, checkpoint_every=100, progress=False)
    with (
        mock.patch.object(session_lib, 'MAX_NOISE_INCREASE', 1.3),
        self.assertRaisesRegex(
            training.ConfigError,
            r'cannot cover the 4 rounds left: noise multiplier .* the planned',
        ) as refused,
    ):
      training.run(config, root, checkpoint_every=100, progress=False)
    self.assertNotIn('\n', str(refused.exception))
    self.assertEqual(_ledger(root).num_releases, 3)


if __name__ == '__main__':
  tf.test.main()
