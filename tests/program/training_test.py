"""Tests of program.training: configuration, output directory, resume."""

import collections
import csv
import dataclasses
import functools
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

from tff_priv.accounting import ledger as ledger_lib
from tff_priv.learning import client_metrics
from tff_priv.program import layout
from tff_priv.program import registry
from tff_priv.program import releases as releases_lib
from tff_priv.program import sampling as sampling_lib
from tff_priv.program import setup as setup_lib
from tff_priv.program import training
from tff_priv.program.registry import base
from tff_priv.program.registry import ldp

_DIGITS_PARAMETERS = 8 * 8 * 256 + 256 + 256 * 10 + 10  # tasks.models.mlp


def _config(**changes):
  base = training.RunConfig(
      task='digits',
      batch_size=20,
      mechanism='ldp',
      clients_per_round=2,
      total_rounds=4,
      eval_every=2,
      client_learning_rate=0.1,
  )
  return dataclasses.replace(base, **changes)


def _rows(path):
  with open(path) as f:
    return list(csv.DictReader(f))


class RunConfigTest(tf.test.TestCase, parameterized.TestCase):

  def test_valid_config_resolves_params(self):
    config = _config(task_options={'num_clients': 5, 'model': None})
    valid = config.validate()
    self.assertEqual(valid.task_options, {'num_clients': 5})
    self.assertEqual(valid.params, registry.config('ldp'))
    self.assertEqual(valid.validate(), valid)
    as_dict = valid.to_dict()
    self.assertEqual(as_dict['params'], registry.to_dict(valid.params))
    json.dumps(as_dict)  # JSON-ready.

  @parameterized.named_parameters(
      ('task', dict(task='imagenet'), ValueError, 'task'),
      (
          'option_unknown',
          dict(task_options={'alpha': 0.1}),
          ValueError,
          'alpha does not apply',
      ),
      (
          'option_of_other_task',
          dict(task='shakespeare_offline', task_options={'num_clients': 3}),
          ValueError,
          'num_clients does not apply',
      ),
      (
          'num_clients',
          dict(task_options={'num_clients': 0}),
          ValueError,
          'num_clients',
      ),
      ('batch_size', dict(batch_size=0), ValueError, 'batch_size'),
      ('num_epochs', dict(num_epochs=0), ValueError, 'num_epochs'),
      (
          'clients_per_round',
          dict(clients_per_round=0),
          ValueError,
          'clients_per_round',
      ),
      ('total_rounds', dict(total_rounds=0), ValueError, 'total_rounds'),
      ('eval_every', dict(eval_every=0), ValueError, 'eval_every'),
      ('seed', dict(seed=-1), ValueError, 'seed'),
      ('rounds_type', dict(total_rounds=2.0), TypeError, 'total_rounds'),
      (
          'client_optimizer',
          dict(client_optimizer='rmsprop'),
          ValueError,
          'client_optimizer',
      ),
      (
          'server_optimizer',
          dict(server_optimizer='lamb'),
          ValueError,
          'server_optimizer',
      ),
      (
          'client_lr',
          dict(client_learning_rate=0.0),
          ValueError,
          'client_learning_rate',
      ),
      (
          'server_lr',
          dict(server_learning_rate=-1.0),
          ValueError,
          'server_learning_rate',
      ),
      ('mechanism', dict(mechanism='dp_sgd'), ValueError, 'mechanism'),
      ('params', dict(params=dict(delta=2.0)), ValueError, 'delta'),
      (
          'params_other',
          dict(params=dict(compression=0.5)),
          ValueError,
          'compression does not apply',
      ),
      (
          'momentum_adam',
          dict(client_optimizer='adam', client_momentum=0.9),
          ValueError,
          'client_momentum',
      ),
      ('lr_decay', dict(client_lr_decay=0.0), ValueError, 'client_lr_decay'),
      ('test_examples', dict(test_examples=0), ValueError, 'test_examples'),
      (
          'max_client_examples',
          dict(max_client_examples=0),
          ValueError,
          'max_client_examples',
      ),
      (
          'client_metrics',
          dict(client_metrics='exact'),
          ValueError,
          'client_metrics',
      ),
      (
          'client_metrics_noise',
          dict(
              mechanism='dp_fedavg',
              client_metrics='dp',
              client_metrics_noise_multiplier=0.0,
          ),
          ValueError,
          'client_metrics_noise_multiplier',
      ),
      (
          'client_metrics_bound',
          dict(client_metrics_loss_bound=-1.0),
          ValueError,
          'client_metrics_loss_bound',
      ),
      (
          'server_budget_with_crd',
          dict(
              mechanism='udp',
              server_budget=8.0,
              holdout_validation=True,
              params=dict(epsilon=8.0, crd_beta=0.5),
          ),
          ValueError,
          'server_budget does not apply with an adaptive noise schedule',
      ),
  )
  def test_bad_field(self, changes, error, message):
    with self.assertRaisesRegex(error, message):
      _config(**changes).validate()


class ClientMetricsRefusalTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('none', dict(mechanism='none'), 'private mechanisms only'),
      ('smp', dict(mechanism='smp'), 'private against the server'),
      ('udp', dict(mechanism='udp'), 'private against the server'),
      ('ldp', dict(mechanism='ldp'), 'private against the server'),
      (
          'distortion',
          dict(mechanism='distortion', params=dict(parameter_variance=1e-4)),
          'private against the server',
      ),
      (
          'canaries',
          dict(mechanism='dp_fedavg', params=dict(clip=1.0), audit_canaries=2),
          'canary',
      ),
  )
  def test_refused_in_one_line(self, changes, message):
    with self.assertRaisesRegex(ValueError, message) as raised:
      _config(client_metrics='dp', **changes).validate()
    self.assertNotIn('\n', str(raised.exception))

  def test_dp_fedavg_takes_them(self):
    _config(mechanism='dp_fedavg', client_metrics='dp').validate()


class _TempDirTestCase(tf.test.TestCase):

  def _make_tempdir(self):
    path = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, path, ignore_errors=True)
    return path


class OutputDirectoryTest(_TempDirTestCase):

  def test_new_then_same_then_other_configuration(self):
    root = os.path.join(self._make_tempdir(), 'run')
    config = _config().validate()
    self.assertFalse(training.prepare_output_dir(root, config, write=False))
    self.assertFalse(os.path.exists(root))  # Only checked.
    self.assertFalse(training.prepare_output_dir(root, config))
    with open(layout.path(root, layout.CONFIG)) as f:
      written = json.load(f)
    self.assertEqual(written['mechanism'], 'ldp')
    self.assertEqual(written['format'], layout.CONFIG_FORMAT)
    self.assertTrue(training.prepare_output_dir(root, config))
    other = _config(total_rounds=5).validate()
    with self.assertRaisesRegex(training.ConfigError, 'total_rounds'):
      training.prepare_output_dir(root, other)
    with open(layout.path(root, layout.CONFIG)) as f:
      self.assertEqual(json.load(f), written)  # Not overwritten.

  def test_run_written_before_a_new_default_resumes(self):
    # An smp config.json from before `mask` existed (rand_k was the only
    # mask): same run, it resumes; a different given value is still refused.
    root = os.path.join(self._make_tempdir(), 'run')
    config = _config(mechanism='smp', params=dict(compression=0.2)).validate()
    self.assertEqual(config.params.mask, 'rand_k')
    training.prepare_output_dir(root, config)
    path = layout.path(root, layout.CONFIG)
    with open(path) as f:
      old = json.load(f)
    del old['params']['mask']
    with open(path, 'w') as f:
      json.dump(old, f)
    self.assertTrue(training.prepare_output_dir(root, config))
    top_k = _config(
        mechanism='smp',
        params=dict(compression=0.2, mask='top_k'),
    ).validate()
    with self.assertRaisesRegex(training.ConfigError, 'top_k'):
      training.prepare_output_dir(root, top_k)

  def test_foreign_directory_is_refused(self):
    root = self._make_tempdir()
    with open(os.path.join(root, 'notes.txt'), 'w') as f:
      f.write('mine')
    with self.assertRaisesRegex(training.ConfigError, 'not a tff_priv run'):
      training.prepare_output_dir(root, _config().validate())
    self.assertEqual(os.listdir(root), ['notes.txt'])

  def test_existing_empty_directory_is_used(self):
    root = self._make_tempdir()
    self.assertFalse(training.prepare_output_dir(root, _config().validate()))


class RunTest(_TempDirTestCase):
  """In-process runs on 'digits': refusals, empty rounds, stops, resumes.

  One in-process run on 'digits' is stopped after a round that has no checkpoint
  and resumed; the kill -9 variant runs in a subprocess in
  tests/scripts/train_script_test.py.
  """

  def test_more_clients_per_round_than_clients_is_refused(self):
    root = os.path.join(self._make_tempdir(), 'run')
    with self.assertRaisesRegex(training.ConfigError, 'clients_per_round'):
      training.run(_config(clients_per_round=11), root, progress=False)
    self.assertFalse(os.path.exists(root))  # A refused run leaves nothing.

  @pytest.mark.slow
  def test_a_round_that_samples_nobody_runs_and_looks_like_any_other(self):
    # N = 10, K = 1 (Poisson q = 0.1): about a third of the rounds draw
    # nobody. Such a round releases the noise alone; a skipped round (empty
    # cells, an unchanged model) would show that nobody was sampled, which
    # the sampled Gaussian's accounting assumes hidden.
    rounds = 6
    draw = sampling_lib.ClientSampling('poisson', 10, 1)
    seed = next(
        s
        for s in range(1000)
        if [
            len(draw.sample_indices(s, r)) > 0 for r in range(1, rounds + 1)
        ].count(False)
        in (2, 3)
    )
    empty = [
        r for r in range(1, rounds + 1) if not len(draw.sample_indices(seed, r))
    ]
    config = _config(
        mechanism='dp_fedavg',
        clients_per_round=1,
        total_rounds=rounds,
        eval_every=100,
        sampling_seed=seed,
        params=dict(noise_multiplier=1.0, clip=1.0),
    )
    root = os.path.join(self._make_tempdir(), 'run')
    release = mock.Mock(wraps=training.runtime.release_eager_kernels)
    with mock.patch.object(training.runtime, 'release_eager_kernels', release):
      summary = training.run(config, root, progress=False)
    # Every round, empty or not, drops its datasets' cached eager kernels.
    self.assertEqual(release.call_count, rounds)
    rows = _rows(layout.path(root, layout.TRAIN_CSV))
    self.assertLen(rows, rounds)
    filled = [frozenset(k for k, v in r.items() if v != '') for r in rows]
    self.assertLen(set(filled), 1, (empty, rows))
    self.assertEqual(filled[0], frozenset(rows[0]))  # No empty cell at all.
    for r in empty:
      # The round's update (the noise over K) was finite and applied.
      self.assertEqual(rows[r - 1]['finalizer/update_non_finite'], '0')
    ledger = ledger_lib.PrivacyLedger.from_json(
        json.dumps(summary['privacy']['ledger'])
    )
    self.assertEqual(ledger.num_releases, rounds)

  @pytest.mark.slow
  def test_a_stop_between_a_checkpoint_and_its_release_loses_no_row(self):
    # Round 2's checkpoint is saved before its rows are released; a stop in
    # between (here the release fails) leaves them on disk, and the resume
    # from that checkpoint releases them: every round has its row once. For
    # DP-FedAvg, and for the streams (BandMF's cycle of b = 2 and BLT's
    # stream continue from the checkpoint), at their target.
    # DP-FedAvg: the analyst's eps grows with every charged round whoever is
    # sampled (LDP's is the most-sampled client's, which may not).
    configs = {
        'dp_fedavg': _config(
            mechanism='dp_fedavg',
            total_rounds=3,
            params=dict(noise_multiplier=1.0, clip=1.0),
        ),
        'bandmf': _config(
            mechanism='bandmf',
            total_rounds=3,
            params=dict(epsilon=8.0, bands=2),
        ),
        'blt': _config(
            mechanism='blt', total_rounds=3, params=dict(epsilon=8.0)
        ),
    }
    real_train = releases_lib.RunReleases.train

    async def stop_at_round_2(releases, row, round_num):
      if round_num == 2:
        raise RuntimeError('stopped')
      await real_train(releases, row, round_num)

    for name, config in configs.items():
      with self.subTest(name):
        root = os.path.join(self._make_tempdir(), 'run')
        with mock.patch.object(
            releases_lib.RunReleases, 'train', stop_at_round_2
        ):
          with self.assertRaisesRegex(RuntimeError, 'stopped'):
            training.run(config, root, checkpoint_every=1, progress=False)
        pending = layout.path(root, layout.PENDING_RELEASE)
        self.assertTrue(os.path.exists(pending))
        self.assertEqual(
            [
                r[layout.ROUND]
                for r in _rows(layout.path(root, layout.TRAIN_CSV))
            ],
            ['1'],
        )
        summary = training.run(config, root, checkpoint_every=1, progress=False)
        self.assertEqual(
            [s['start_round'] for s in summary['sessions']], [0, 2]
        )
        train_rows = _rows(layout.path(root, layout.TRAIN_CSV))
        self.assertEqual([r[layout.ROUND] for r in train_rows], ['1', '2', '3'])
        # Round 2's row holds what its release holds: public columns only.
        for column in train_rows[1]:
          self.assertTrue(
              column == layout.ROUND or releases_lib.is_public_train(column),
              column,
          )
        self.assertEqual(
            [
                r[layout.ROUND]
                for r in _rows(layout.path(root, layout.EVAL_CSV))
            ],
            ['2', '3'],
        )
        self.assertFalse(os.path.exists(pending))
        if name == 'dp_fedavg':
          self.assertGreater(
              float(train_rows[1][layout.RDP_EPSILON]),
              float(train_rows[0][layout.RDP_EPSILON]),
          )
        else:  # Resumed from the checkpoint: nothing ran again.
          self.assertLessEqual(summary['privacy']['rdp_epsilon'], 8.0)
          self.assertGreater(summary['privacy']['rdp_epsilon'], 7.9)

  @pytest.mark.slow
  def test_stop_and_resume_continues_rounds_and_ledger(self):
    root = os.path.join(self._make_tempdir(), 'run')
    config = _config()
    summary, train_rows, eval_rows = self._stop_and_resume(config, root)

    # Write-ahead: round 3 was charged before session 1 released it, and is
    # charged again when session 2 runs it again (new noise, a new release):
    # the ledgers hold rounds 1, 2, 3, 3, 4 of d eps0-LDP values each (no
    # amplification is known for pure-eps releases under fixed-size
    # sampling), nothing reset. Against the server each client is charged the
    # rounds it took part in; the analyst's figure is the smaller of the two
    # (both bound the same local release).
    self.assertTrue(os.path.exists(layout.path(root, layout.PRIVACY)))
    ledger = ledger_lib.PrivacyLedger.from_json(
        json.dumps(summary['privacy']['ledger'])
    )
    # (round, attempt): session 2 runs round 3 again with fresh coins.
    charged = [(1, 0), (2, 0), (3, 0), (3, 1), (4, 0)]
    self.assertEqual(ledger.num_releases, len(charged))
    draws = sampling_lib.ClientSampling('fixed', 10, 2)
    sampling_seed = self._secret_sampling_seed(root, summary)
    taken = self._check_epsilons(
        train_rows, summary, charged, draws, sampling_seed
    )
    self._check_public_summary(summary, train_rows, eval_rows, taken)

    # Started again after the end: nothing runs, the summary is rewritten.
    again = training.run(config, root, checkpoint_every=2, progress=False)
    self.assertEqual(
        again['privacy']['rdp_epsilon'], summary['privacy']['rdp_epsilon']
    )
    self.assertEqual(again['sessions'][-1], {'start_round': 4})

  def _stop_and_resume(self, config, root):
    """Session 1 stops after round 3; session 2 resumes and finishes.

    Args:
      config: the run's `RunConfig`.
      root: the run directory.

    Returns:
      Session 2's summary, and the train and eval CSV rows.
    """
    # Session 1: checkpoints at rounds 0 and 2; round 3 runs and is released
    # but not checkpointed before the stop.
    self.assertIsNone(
        training.run_until(
            config,
            root,
            3,
            checkpoint_every=2,
            progress=False,
        )
    )
    self.assertEqual(
        [r[layout.ROUND] for r in _rows(layout.path(root, layout.TRAIN_CSV))],
        ['1', '2', '3'],
    )
    self.assertFalse(os.path.exists(layout.path(root, layout.SUMMARY)))
    # Session 2 resumes at round 2, runs rounds 3 and 4 again from the
    # checkpointed ledger.
    summary = training.run(config, root, checkpoint_every=2, progress=False)
    self.assertEqual(
        summary['sessions'], [{'start_round': 0}, {'start_round': 2}]
    )
    train_rows = _rows(layout.path(root, layout.TRAIN_CSV))
    self.assertEqual(
        [r[layout.ROUND] for r in train_rows], ['1', '2', '3', '4']
    )
    eval_rows = _rows(layout.path(root, layout.EVAL_CSV))
    self.assertEqual([r[layout.ROUND] for r in eval_rows], ['2', '4'])
    return summary, train_rows, eval_rows

  def _secret_sampling_seed(self, root, summary):
    """The run's sampling seed, checked to be in its secrets file only."""
    # The sampling seed is secret: kept in the owner's secrets file and the
    # checkpoints, not in anything released (tests/program/secrets_test.py).
    with open(layout.path(root, layout.SECRETS)) as f:
      sampling_seed = json.load(f)['sampling_seed']
    with open(layout.path(root, layout.CONFIG)) as f:
      self.assertIsNone(json.load(f)['sampling_seed'])
    self.assertNotIn(str(sampling_seed), json.dumps(summary))
    return sampling_seed

  def _check_epsilons(self, train_rows, summary, charged, draws, seed):
    """Each row's and the summary's eps; returns the clients' participations.

    Args:
      train_rows: the train CSV rows of rounds 1 to 4.
      summary: the finished run's summary.
      charged: the (round, attempt) of every charged release, in order.
      draws: the run's `ClientSampling`.
      seed: the run's sampling seed.

    Returns:
      How many of the charged releases each client took part in.
    """
    # Rows 1-2 from session 1, rows 3-4 from session 2.
    for row, releases in zip(
        train_rows, (charged[:1], charged[:2], charged[:4], charged)
    ):
      analyst, worst, _ = _ldp_epsilons(draws, seed, releases)
      self.assertAllClose(float(row[layout.SERVER_EPSILON]), worst, rtol=1e-12)
      self.assertAllClose(float(row[layout.RDP_EPSILON]), analyst, rtol=1e-12)
    analyst, _, taken = _ldp_epsilons(draws, seed, charged)
    self.assertAllClose(summary['privacy']['rdp_epsilon'], analyst, rtol=1e-12)
    return taken

  def _check_public_summary(self, summary, train_rows, eval_rows, taken):
    """Public columns only; the summary's guarantee, sampling and numbers."""
    # Only public columns: no client count, no timing, no client metrics.
    for row in train_rows:
      self.assertNotIn('clients', row)
      self.assertNotIn('round_seconds', row)
      self.assertFalse([k for k in row if k.startswith('client_work/train/')])
    server = summary['privacy']['guarantees'][1]
    self.assertEqual(
        (server['adversary'], server['unit'], server['neighboring_relation']),
        ('server', 'client', 'replace_one'),
    )
    self.assertEqual(server['max_participations'], max(taken.values()))
    self.assertEqual(summary['sampling']['model'], 'fixed')
    self.assertEqual(
        summary['uplink_bytes']['total'],
        4 * 2 * 4 * _DIGITS_PARAMETERS,  # rounds x K x 4 bytes x d
    )
    self.assertEqual(
        summary['final_test_accuracy'],
        float(eval_rows[-1][layout.TEST_ACCURACY]),
    )
    self.assertEqual(
        summary['best_test_accuracy'],
        max(float(r[layout.TEST_ACCURACY]) for r in eval_rows),
    )
    self.assertEqual(
        summary['privacy']['closed_form']['num_values'], _DIGITS_PARAMETERS
    )


def _composed_ldp(rounds):
  """eps at the default delta of `rounds` rounds of d eps0-LDP values."""
  if not rounds:
    return 0.0
  expected = ledger_lib.PrivacyLedger()
  expected.record_pure_epsilon(
      ldp.DEFAULT_LDP_EPSILON, count=rounds * _DIGITS_PARAMETERS
  )
  return expected.epsilon(base.DEFAULT_DELTA)


def _ldp_epsilons(draws, sampling_seed, releases):
  """(analyst's eps, server's worst eps, participations) after `releases`."""
  taken = collections.Counter()
  for r, attempt in releases:
    taken.update(draws.sample_indices(sampling_seed, r, attempt).tolist())
  worst = _composed_ldp(max(taken.values()))
  return min(_composed_ldp(len(releases)), worst), worst, taken


class UdpSensitivityTest(_TempDirTestCase):

  @pytest.mark.slow
  def test_counts_the_examples_the_clients_train_on(self):
    # udp's sensitivity is 2 eta C / min_i |D_i|. max_client_examples caps
    # each |D_i| (TFF's ClientSpec.max_elements); counting the uncapped
    # client data would give noise too small for the data trained on.
    def resolved(**changes):
      config = _config(
          mechanism='udp',
          params=dict(clip=1.0, epsilon=4.0),
          clients_per_round=10,
          total_rounds=1,
          eval_every=1,
          **changes,
      )
      root = os.path.join(self._make_tempdir(), 'run')
      return training.run(config, root, progress=False)['parameters'][
          'resolved'
      ]

    uncapped = resolved()
    self.assertGreater(uncapped['min_client_examples'], 7)
    capped = resolved(max_client_examples=7)
    self.assertEqual(capped['min_client_examples'], 7)
    self.assertAlmostEqual(capped['sensitivity'], 2 * 0.1 * 1.0 / 7)


class LoopOptionsTest(_TempDirTestCase):
  """The options the experiments need, run end to end on 'digits'."""

  def _run(self, **changes):
    config = _config(
        mechanism='none',
        params=None,
        sampling_seed=7,
        eval_every=100,
        **changes,
    )
    root = os.path.join(self._make_tempdir(), 'run')
    summary = training.run(config, root, progress=False)
    with np.load(layout.path(root, layout.FINAL_MODEL)) as final:
      weights = [final[k] for k in sorted(final.files)]
    return summary, weights, root

  @pytest.mark.slow
  def test_learning_rate_schedule_and_test_subset(self):
    one, one_weights, _ = self._run(total_rounds=1)
    # Round 2 at rate 0.1 x 1e-7 hardly moves the model of round 1; at 0.1 it
    # does. (Runs are not bit-identical: TFF's preprocessing shuffles each
    # client's examples in a nondeterministic order, ~1e-3 apart here, so the
    # comparison is relative: the decayed round moves < 10% of a full one.)
    decayed, decayed_weights, _ = self._run(
        total_rounds=2, client_lr_decay=1e-7, test_examples=50
    )
    _, plain_weights, _ = self._run(total_rounds=2)

    def distance(a, b):
      return np.sqrt(sum(np.sum((x - y) ** 2) for x, y in zip(a, b)))

    self.assertLess(
        distance(decayed_weights, one_weights),
        0.1 * distance(plain_weights, one_weights),
    )
    self.assertEqual(decayed['final_test_metrics']['num_examples'], 50)
    self.assertGreater(one['final_test_metrics']['num_examples'], 50)

  @pytest.mark.slow
  def test_crd_ends_early_and_tests_on_the_other_half(self):
    full, _, _ = self._run(total_rounds=1)
    config = _config(
        mechanism='udp',
        total_rounds=6,
        eval_every=100,
        sampling_seed=7,
        holdout_validation=True,
        # Every round "stalls": T <- floor(beta (T - t)) + t, 6 -> 3 -> 2.
        params=dict(epsilon=8.0, crd_beta=0.5, crd_zeta=100.0),
    )
    root = os.path.join(self._make_tempdir(), 'run')
    summary = training.run(config, root, progress=False)
    self.assertEqual(summary['rounds'], 6)
    self.assertEqual(summary['rounds_run'], 2)
    rows = _rows(layout.path(root, layout.TRAIN_CSV))
    self.assertEqual([r[layout.ROUND] for r in rows], ['1', '2'])
    # The sigma of round 2 followed round 1's release: the run reports what
    # its schedule guarantees on every path (the target, up to calibration's
    # tolerance), from round 1 on, not the realised composition.
    eps = summary['privacy']['rdp_epsilon']
    self.assertAllClose(eps, 8.0, atol=5e-3)
    self.assertEqual([float(r[layout.RDP_EPSILON]) for r in rows], [eps, eps])
    realised = summary['privacy']['analyst_ledger']['rdp_epsilon']
    self.assertLess(realised, eps)
    self.assertIn('diagnostic', summary['privacy']['analyst_ledger']['meaning'])
    self.assertEqual(
        summary['final_test_metrics']['num_examples'],
        full['final_test_metrics']['num_examples']
        - full['final_test_metrics']['num_examples'] // 2,
    )


class HoldoutValidationTest(tf.test.TestCase):

  @pytest.mark.slow
  def test_the_server_keeps_the_first_half_after_the_build(self):
    # The mechanism's context is kept to rebuild it (a resume recalibrates
    # CRD from it): its validation data stays the server's first half, the
    # other half is the test set.
    config = _config(
        mechanism='udp',
        holdout_validation=True,
        params=dict(epsilon=8.0, crd_beta=0.5),
    )
    config.validate()
    setup = setup_lib.build(config, cache_dir=None)
    x, y = setup_lib.test_arrays(setup.task, config)
    half = len(y) // 2
    val_x, val_y = setup.context.validation_data()
    self.assertAllEqual(val_x, x[:half])
    self.assertAllEqual(val_y, y[:half])
    tested = np.concatenate([b[1] for b in setup.test_data.as_numpy_iterator()])
    self.assertAllEqual(tested, y[half:])
    # A tuning run is evaluated on the server's half instead.
    tuning = dataclasses.replace(config, evaluation_split='validation')
    setup = setup_lib.build(tuning.validate(), cache_dir=None)
    tested = np.concatenate([b[1] for b in setup.test_data.as_numpy_iterator()])
    self.assertAllEqual(tested, y[:half])

  def test_the_validation_half_needs_holdout_validation(self):
    with self.assertRaisesRegex(ValueError, 'needs holdout_validation'):
      _config(evaluation_split='validation').validate()
    with self.assertRaisesRegex(ValueError, 'evaluation_split must be one of'):
      _config(holdout_validation=True, evaluation_split='train').validate()


class DpFtrlRunTest(_TempDirTestCase):

  @pytest.mark.slow
  def test_one_tree_per_epoch_and_one_more_on_resume(self):
    # 10 clients, K = 3: epochs of 3 rounds; 7 rounds are trees at rounds
    # 1, 4 and 7, each SingleEpochTreeAggregationDpEvent(z, 3).
    config = _config(
        mechanism='dp_ftrl',
        params=dict(noise_multiplier=1.0, clip=1.0),
        clients_per_round=3,
        total_rounds=7,
        eval_every=7,
        sampling_seed=1,
    )
    tree = dp_accounting.SingleEpochTreeAggregationDpEvent(1.0, 3)

    def rdp_epsilon(trees):
      accountant = dp_accounting.rdp.RdpAccountant(
          neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL
      )
      return accountant.compose(tree, trees).get_epsilon(1e-5)

    root = os.path.join(self._make_tempdir(), 'run')
    summary = training.run(config, root, progress=False)
    analyst = summary['privacy']['guarantees'][0]
    self.assertEqual(analyst['neighboring_relation'], 'replace_special')
    self.assertAllClose(analyst['epsilon'], rdp_epsilon(3), rtol=1e-9)
    self.assertEqual(summary['sampling']['model'], 'epoch')
    # Stopped after round 5 (mid-epoch), its checkpoint saved before its
    # release: the resumed run continues the tree (3 trees). With its last
    # checkpoint at round 4, round 5 was released after it: the tree
    # restarts at round 5 with fresh noise and is charged again (4 trees).
    for checkpoint_every, trees in ((1, 3), (2, 4)):
      root = os.path.join(self._make_tempdir(), 'run')
      self.assertIsNone(
          training.run_until(
              config, root, 5, progress=False, checkpoint_every=checkpoint_every
          )
      )
      resumed = training.run(
          config, root, progress=False, checkpoint_every=checkpoint_every
      )
      self.assertAllClose(
          resumed['privacy']['guarantees'][0]['epsilon'],
          rdp_epsilon(trees),
          rtol=1e-9,
      )

  def test_needs_one_noise_target(self):
    root = os.path.join(self._make_tempdir(), 'run')
    with self.assertRaises(training.ConfigError) as raised:
      training.run(
          _config(
              mechanism='dp_ftrl',
              params={'epsilon': 2.0, 'noise_multiplier': 1.0},
          ),
          root,
          progress=False,
      )
    self.assertIn(
        'give one of noise_multiplier, epsilon', str(raised.exception)
    )
    with self.assertRaises(training.ConfigError) as raised:
      training.run(
          _config(mechanism='dp_ftrl', params={}), root, progress=False
      )
    self.assertIn(
        'needs noise_multiplier > 0 or a target epsilon', str(raised.exception)
    )

  @pytest.mark.slow
  def test_target_epsilon_is_met_exactly(self):
    # 10 clients, K = 3, 7 rounds: 3 trees of 3 leaves, z calibrated so that
    # the charged trees give eps 4 (the calibration's tolerance below it).
    config = _config(
        mechanism='dp_ftrl',
        params=dict(epsilon=4.0, clip=1.0),
        clients_per_round=3,
        total_rounds=7,
        eval_every=7,
        sampling_seed=1,
    )
    summary = training.run(
        config, os.path.join(self._make_tempdir(), 'run'), progress=False
    )
    z = summary['parameters']['resolved']['noise_multiplier']
    accountant = dp_accounting.rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL
    ).compose(dp_accounting.SingleEpochTreeAggregationDpEvent(z, 3), 3)
    epsilon = summary['privacy']['guarantees'][0]['epsilon']
    self.assertAllClose(epsilon, accountant.get_epsilon(1e-5), rtol=1e-9)
    self.assertBetween(epsilon, 3.99, 4.0)


_BLT_CONFIG = dict(
    mechanism='blt',
    params=dict(epsilon=4.0, clip=1.0),
    clients_per_round=3,
    total_rounds=7,
    eval_every=7,
    sampling_seed=1,
)


def _stream_rdp_epsilon(resolved, streams):
  """eps at 1e-5 of `streams` BLT streams of a run's resolved noise."""
  stream = dp_accounting.GaussianDpEvent(
      resolved['noise_multiplier'] / resolved['sensitivity']
  )
  accountant = dp_accounting.rdp.RdpAccountant(
      neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL
  )
  return accountant.compose(stream, streams).get_epsilon(1e-5)


class BltRunTest(_TempDirTestCase):

  @pytest.mark.slow
  def test_one_stream_per_epoch_calibrated(self):
    # 10 clients, K = 3: epochs (streams) of 3 rounds; 7 rounds are streams
    # at rounds 1, 4 and 7, each GaussianDpEvent(z / sensitivity) under
    # REPLACE_SPECIAL, z calibrated to eps 4 over 3 streams.
    config = _config(**_BLT_CONFIG)
    root = os.path.join(self._make_tempdir(), 'run')
    summary = training.run(config, root, progress=False)
    resolved = summary['parameters']['resolved']
    self.assertEqual(resolved['rounds_per_stream'], 3)
    rdp_epsilon = functools.partial(_stream_rdp_epsilon, resolved)

    analyst = summary['privacy']['guarantees'][0]
    self.assertEqual(analyst['neighboring_relation'], 'replace_special')
    self.assertEqual(analyst['unit'], 'client')
    self.assertAllClose(analyst['epsilon'], rdp_epsilon(3), rtol=1e-5)
    self.assertBetween(analyst['epsilon'], 3.99, 4.0)  # The calibration.
    # A BLT with a buffer, not the identity (streams of 3 rounds).
    self.assertNotEmpty(resolved['buf_decay'])
    self.assertGreater(resolved['sensitivity'], 1.0)

  @pytest.mark.slow
  def test_a_resume_continues_the_stream_or_restarts_it_charged(self):
    config = _config(**_BLT_CONFIG)
    root = os.path.join(self._make_tempdir(), 'run')
    summary = training.run(config, root, progress=False)
    resolved = summary['parameters']['resolved']
    rdp_epsilon = functools.partial(_stream_rdp_epsilon, resolved)

    # Stopped after round 5 (mid-stream, its checkpoint saved before its
    # release): the resumed run continues the stream, 3 streams in all.
    root = os.path.join(self._make_tempdir(), 'run')
    self.assertIsNone(training.run_until(config, root, 5, progress=False))
    resumed = training.run(config, root, progress=False)
    self.assertAllClose(
        resumed['privacy']['guarantees'][0]['epsilon'],
        rdp_epsilon(3),
        rtol=1e-4,
    )
    self.assertLessEqual(resumed['privacy']['guarantees'][0]['epsilon'], 4.0)
    # Stopped after round 5 with its last checkpoint at round 4: round 5 was
    # released after it, so the resumed run restarts the stream at round 5
    # with fresh noise, charged again (4 streams), the two streams left
    # (rounds 5-6 and 7) noised for the budget the first two left, so the
    # run still meets its target.
    root = os.path.join(self._make_tempdir(), 'run')
    self.assertIsNone(
        training.run_until(config, root, 5, progress=False, checkpoint_every=2)
    )
    resumed = training.run(config, root, progress=False, checkpoint_every=2)
    first, second = resumed['sessions']
    self.assertEqual((first['start_round'], second['start_round']), (0, 4))
    self.assertAllClose(first['noise_multiplier'], resolved['noise_multiplier'])
    self.assertGreater(second['noise_multiplier'], first['noise_multiplier'])
    accountant = dp_accounting.rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL
    )
    for session in (first, second):
      accountant.compose(
          dp_accounting.GaussianDpEvent(
              session['noise_multiplier'] / resolved['sensitivity']
          ),
          2,
      )
    self.assertAllClose(
        resumed['privacy']['guarantees'][0]['epsilon'],
        accountant.get_epsilon(1e-5),
        rtol=1e-9,
    )
    self.assertBetween(
        resumed['privacy']['guarantees'][0]['epsilon'], 3.99, 4.0
    )


class DpClientMetricsRunTest(_TempDirTestCase):

  @pytest.mark.slow
  def test_noised_metrics_are_released_and_charged(self):
    root = os.path.join(self._make_tempdir(), 'run')
    z, z_metrics, rounds = 1.0, 2.0, 2
    config = _config(
        mechanism='dp_fedavg',
        params=dict(noise_multiplier=z, clip=1.0),
        total_rounds=rounds,
        sampling_seed=3,
        client_metrics='dp',
        client_metrics_noise_multiplier=z_metrics,
    )
    summary = training.run(config, root, progress=False)
    q = (
        sampling_lib.ClientSampling('poisson', 10, 2)
        .ledger_sampling()
        .sampling_probability
    )
    delta = base.DEFAULT_DELTA

    def eps(noise_multiplier):
      ledger = ledger_lib.PrivacyLedger()
      ledger.record_gaussian(
          noise_multiplier, sampling_probability=q, count=rounds
      )
      return ledger.epsilon(delta)

    # By hand: the model's Gaussian(z) and the metrics' Gaussian(z_m) on the
    # same Poisson-sampled clients are one Gaussian of z_eff^-2 = z^-2 +
    # z_m^-2 (the RDP accountant composes them so).
    z_eff = (z**-2 + z_metrics**-2) ** -0.5
    self.assertAllClose(
        summary['privacy']['rdp_epsilon'], eps(z_eff), rtol=1e-9
    )
    self.assertGreater(summary['privacy']['rdp_epsilon'], eps(z) * 1.05)
    ledger = ledger_lib.PrivacyLedger.from_json(
        json.dumps(summary['privacy']['ledger'])
    )
    self.assertEqual(ledger.num_releases, rounds)
    rows = _rows(layout.path(root, layout.TRAIN_CSV))
    self.assertLen(rows, rounds)
    # Every column: public (the round, the session, eps, delta, the
    # configured uplink), the model's charged DP query metrics, or the
    # charged noised metrics.
    public = {
        layout.ROUND,
        layout.SESSION,
        layout.RDP_EPSILON,
        'delta',
        'uplink_bytes',
    }
    charged = tuple(
        f'client_work/train/{k}'
        for k in (
            client_metrics.DP_LOSS,
            client_metrics.DP_ACCURACY,
            client_metrics.DP_CLIENTS,
        )
    )
    for row in rows:
      for column in row:
        self.assertTrue(
            column in public
            or column in charged
            or column.startswith('aggregator/dp_query_metrics/')
            or column == 'finalizer/update_non_finite',
            f'{column} is neither public nor charged',
        )
    # A round that ran released all three (round 1 or 2 drew someone).
    self.assertTrue(any(row.get(charged[0]) for row in rows))
    self.assertTrue(
        any('client_metrics' in c for c in summary['privacy']['caveats'])
    )


if __name__ == '__main__':
  tf.test.main()
