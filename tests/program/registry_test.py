"""Tests of program.registry: the registry, parameters, builds, charges."""

import dataclasses
import json
import os
from unittest import mock

from absl.testing import parameterized
import dp_accounting
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny_models
from tff_priv import remote
from tff_priv.accounting import calibration
from tff_priv.accounting import events
from tff_priv.accounting import guarantees
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.accounting import reports
from tff_priv.learning import ldp as ldp_learning
from tff_priv.mechanisms import blt as blt_lib
from tff_priv.program import registry
from tff_priv.program import sampling
from tff_priv.program.registry import base
from tff_priv.program.registry import ldp
from tff_priv.program.registry import smp

P = dict


def _resolve(name, params):
  return registry.to_dict(registry.config(name, params))


_model_fn = tiny_models.softmax_model_fn
# The parameters a mechanism cannot do without.
_REQUIRED = {
    'distortion': P(parameter_variance=0.1),
    'dp_ftrl': P(noise_multiplier=1.0),
}


def _build(name, params, kind=None, **kwargs):
  args = dict(
      model_fn=_model_fn,
      sampling=sampling.ClientSampling(
          kind or registry.sampling_kind(name), 10, 4
      ),
      total_rounds=3,
      client_learning_rate=0.1,
  )
  args.update(kwargs)
  return registry.build(name, params, registry.BuildContext(**args))


class ResolveTest(tf.test.TestCase, parameterized.TestCase):
  """The parameter rules."""

  def test_defaults(self):
    d = base.DEFAULT_DELTA
    e = base.DEFAULT_EPSILON
    self.assertEqual(_resolve('none', P()), P(delta=d))
    self.assertEqual(_resolve('dp_fedavg', P()), P(delta=d, epsilon=e))
    self.assertEqual(
        _resolve('smp', P()),
        P(
            delta=d,
            epsilon=e,
            clip=base.DEFAULT_CLIP,
            compression=smp.DEFAULT_COMPRESSION,
            mask='rand_k',
        ),
    )
    self.assertEqual(
        _resolve('smp', P(mask='top_k')),
        P(
            delta=d,
            epsilon=e,
            clip=base.DEFAULT_CLIP,
            compression=smp.DEFAULT_COMPRESSION,
            mask='top_k',
            public_clients=smp.DEFAULT_PUBLIC_CLIENTS,
        ),
    )
    self.assertEqual(
        _resolve('udp', P()),
        P(delta=d, epsilon=e, clip=base.DEFAULT_CLIP, udp_calibration='tight'),
    )
    self.assertEqual(
        _resolve('distortion', P(parameter_variance=0.1)),
        P(delta=d, epsilon=e, clip=base.DEFAULT_CLIP, parameter_variance=0.1),
    )
    self.assertEqual(
        _resolve('ldp', P()),
        P(
            delta=d,
            ldp_epsilon=ldp.DEFAULT_LDP_EPSILON,
            ldp_mode='deltas',
            ldp_range_mode='fixed',
            ldp_center=0.0,
            ldp_radius=ldp_learning.DEFAULT_DELTAS_RADIUS,
        ),
    )
    # One default radius per mode, the learning module's.
    self.assertEqual(
        _resolve('ldp', P(ldp_mode='weights'))['ldp_radius'],
        ldp_learning.DEFAULT_WEIGHTS_RADIUS,
    )

  def test_given_noise_replaces_default_epsilon(self):
    self.assertEqual(
        _resolve('dp_fedavg', P(noise_multiplier=1.0)),
        P(delta=base.DEFAULT_DELTA, noise_multiplier=1.0),
    )
    resolved = _resolve('distortion', P(target_tv=0.5, parameter_variance=0.1))
    self.assertNotIn('epsilon', resolved)
    # Never estimated from the clients (an exact client statistic).
    with self.assertRaisesRegex(ValueError, 'parameter_variance is required'):
      _resolve('distortion', P(target_tv=0.5))

  def test_resolve_is_idempotent(self):
    for name in registry.MECHANISMS:
      params = _REQUIRED.get(name, P())
      once = _resolve(name, params)
      self.assertEqual(_resolve(name, once), once)
      config = registry.config(name, params)
      self.assertIs(registry.config(name, config), config)

  def test_registry(self):
    self.assertEqual(
        set(registry.MECHANISMS),
        {
            'none',
            'dp_fedavg',
            'dp_ftrl',
            'blt',
            'bandmf',
            'smp',
            'distortion',
            'udp',
            'ldp',
        },
    )
    for name in registry.MECHANISMS:
      self.assertEqual(registry.definition(name).NAME, name)
      self.assertIn(
          registry.sampling_kind(name, _REQUIRED.get(name)), sampling.KINDS
      )
      self.assertIn(
          registry.noise(name), (None, 'local', 'secure_sum', 'central')
      )
      self.assertEqual(
          registry.noise(name) is None, registry.unit(name) is None
      )
      with self.assertRaises(dataclasses.FrozenInstanceError):
        config = registry.config(name, _REQUIRED.get(name, P()))
        config.delta = 0.5

  def test_a_class_declares_the_guarantee_and_sampling_of_its_defaults(self):
    # `unit(name)` and `sampling_kind(name)` without parameters read the
    # class attributes: they must be what a config of the defaults says.
    for name in registry.MECHANISMS:
      cls = registry.definition(name)
      config = registry.config(name, _REQUIRED.get(name))
      self.assertEqual(config.sampling_kind(), cls.SAMPLING, name)
      got, want = config.guarantee(), cls.GUARANTEE
      for field in ('unit', 'noise', 'neighboring_relation'):
        self.assertEqual(
            getattr(got, field, None), getattr(want, field, None), name
        )
      self.assertEqual(
          set(base.parameter_help(cls)), set(registry.parameter_names(name))
      )
      for field, text in base.parameter_help(cls).items():
        self.assertTrue(text, f'{name}.{field} has no help')

  def test_the_docs_list_every_registered_mechanism(self):
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    with open(os.path.join(root, 'README.md')) as f:
      readme = f.read()
    model = readme.split('## The privacy model', 1)[1].split('\n## ', 1)[0]
    rows = [
        line.split('|')[1].strip().split(' ')[0]
        for line in model.splitlines()
        if line.startswith('| ')
    ][1:]
    private = [n for n in registry.MECHANISMS if registry.unit(n)]
    self.assertCountEqual(rows, private)  # The README's privacy-model table.
    with open(os.path.join(root, 'docs', 'program.md')) as f:
      program = f.read()
    listed = program.split('has one module per mechanism (', 1)[1].split(')')[0]
    self.assertCountEqual(
        [n.strip(' `\n') for n in listed.replace(' and ', ', ').split(',')],
        registry.MECHANISMS,
    )

  @parameterized.named_parameters(
      ('mechanism', 'fedsgd', P(), ValueError, 'mechanism'),
      ('epsilon_zero', 'dp_fedavg', P(epsilon=0.0), ValueError, 'epsilon'),
      ('epsilon_negative', 'smp', P(epsilon=-1.0), ValueError, 'epsilon'),
      ('delta_one', 'dp_fedavg', P(delta=1.0), ValueError, 'delta'),
      ('delta_zero', 'udp', P(delta=0.0), ValueError, 'delta'),
      (
          'noise_negative',
          'smp',
          P(noise_multiplier=-0.1),
          ValueError,
          'noise_multiplier',
      ),
      (
          'stddev_negative',
          'udp',
          P(noise_stddev=-1.0),
          ValueError,
          'noise_stddev',
      ),
      ('clip_zero', 'dp_fedavg', P(clip=0.0), ValueError, 'clip'),
      (
          'compression_zero',
          'smp',
          P(compression=0.0),
          ValueError,
          'compression',
      ),
      (
          'compression_above_one',
          'smp',
          P(compression=1.5),
          ValueError,
          'compression',
      ),
      ('ldp_epsilon', 'ldp', P(ldp_epsilon=0.0), ValueError, 'ldp_epsilon'),
      ('ldp_radius', 'ldp', P(ldp_radius=-1.0), ValueError, 'ldp_radius'),
      (
          'ldp_range_mode',
          'ldp',
          P(ldp_range_mode='auto'),
          ValueError,
          'ldp_range_mode',
      ),
      (
          'ldp_center',
          'ldp',
          P(ldp_center=float('inf')),
          ValueError,
          'ldp_center',
      ),
      ('target_tv', 'distortion', P(target_tv=1.0), ValueError, 'target_tv'),
      (
          'parameter_variance',
          'distortion',
          P(target_tv=0.5, parameter_variance=0.0),
          ValueError,
          'parameter_variance',
      ),
      (
          'rho',
          'distortion',
          P(target_tv=0.5, parameter_variance=0.1, rho=0.0),
          ValueError,
          'rho',
      ),
      (
          'udp_calibration',
          'udp',
          P(udp_calibration='loose'),
          ValueError,
          'udp_calibration',
      ),
      ('epsilon_type', 'smp', P(epsilon='1'), TypeError, 'epsilon'),
      ('mask', 'smp', P(mask='top'), ValueError, 'mask'),
      (
          'public_clients_zero',
          'smp',
          P(mask='top_k', public_clients=0),
          ValueError,
          'public_clients',
      ),
      (
          'public_clients_type',
          'smp',
          P(mask='top_k', public_clients=2.0),
          TypeError,
          'public_clients',
      ),
      (
          'public_clients_rand_k',
          'smp',
          P(public_clients=5),
          ValueError,
          'public_clients applies only',
      ),
  )
  def test_bad_values(self, name, params, error, message):
    with self.assertRaisesRegex(error, message):
      _resolve(name, params)

  @parameterized.named_parameters(
      ('none_epsilon', 'none', P(epsilon=1.0), 'epsilon'),
      ('none_clip', 'none', P(clip=1.0), 'clip'),
      ('dp_fedavg_compression', 'dp_fedavg', P(compression=0.5), 'compression'),
      ('dp_fedavg_stddev', 'dp_fedavg', P(noise_stddev=1.0), 'noise_stddev'),
      ('ldp_epsilon_target', 'ldp', P(epsilon=1.0), 'epsilon'),
      ('smp_rho', 'smp', P(rho=0.5), 'rho'),
      ('dp_fedavg_mask', 'dp_fedavg', P(mask='top_k'), 'mask'),
      ('udp_target_tv', 'udp', P(target_tv=0.5), 'target_tv'),
      ('distortion_ldp', 'distortion', P(ldp_radius=1.0), 'ldp_radius'),
  )
  def test_parameter_that_does_not_apply(self, name, params, message):
    with self.assertRaisesRegex(ValueError, f'{message} does not apply'):
      _resolve(name, params)

  def test_conflicting_noise_levels(self):
    with self.assertRaisesRegex(ValueError, 'at most one'):
      _resolve('smp', P(epsilon=1.0, noise_multiplier=1.0))
    with self.assertRaisesRegex(ValueError, 'at most one'):
      _resolve('distortion', P(noise_stddev=1.0, target_tv=0.5))

  def test_rules_between_parameters(self):
    with self.assertRaisesRegex(ValueError, 'parameter_variance is required'):
      _resolve('distortion', P(noise_stddev=1.0))
    # Noise-free distortion has TV 0 whatever the variance.
    self.assertEqual(
        _resolve('distortion', P(noise_stddev=0.0))['noise_stddev'], 0.0
    )
    with self.assertRaisesRegex(ValueError, 'udp_calibration applies only'):
      _resolve('udp', P(noise_multiplier=1.0, udp_calibration='paper'))
    with self.assertRaisesRegex(ValueError, 'crd_zeta applies only'):
      _resolve('udp', P(crd_zeta=0.1))
    with self.assertRaisesRegex(ValueError, 'give epsilon'):
      _resolve('udp', P(noise_multiplier=1.0, crd_beta=0.9))
    self.assertEqual(_resolve('udp', P(crd_beta=0.9))['crd_zeta'], 0.001)


class BuildTest(tf.test.TestCase):
  """Builds on a tiny model (one round of smp's top_k process).

  Rounds of every mechanism run end to end in tests/scripts/train_script_test.py
  (which checks each ledger against the run's own CSV).
  """

  def test_count_parameters(self):
    self.assertEqual(registry.count_parameters(_model_fn), 4 * 3 + 3)

  def test_wrong_sampling_kind(self):
    with self.assertRaisesRegex(ValueError, 'fixed sampling'):
      _build('udp', P(), kind='poisson', min_client_examples=lambda: 5)

  def test_bandmf_builds_its_bands_into_the_sampling(self):
    mech = _build('bandmf', P(noise_multiplier=1.0, bands=2))
    # N = 10, K = 4: two groups of 5, each client drawn at q = 4 / 5.
    self.assertEqual((mech.sampling.kind, mech.sampling.bands), ('banded', 2))
    self.assertAllClose(mech.sampling.rate, 0.8)
    self.assertEqual(mech.resolved['cycles'], 2)
    with self.assertRaisesRegex(ValueError, 'give bands too'):
      registry.config('bandmf', P(noise_multiplier=1.0))
    with self.assertRaisesRegex(ValueError, 'audit_canaries with bandmf'):
      _build('bandmf', P(noise_multiplier=1.0, bands=2), canary_clients=True)

  def test_udp_needs_smallest_dataset(self):
    with self.assertRaisesRegex(ValueError, 'min_client_examples'):
      _build('udp', P())

  def test_udp_refuses_a_context_it_cannot_account(self):
    for kwargs, message in (
        (dict(client_optimizer='adam'), "plain 'sgd'"),
        (dict(client_momentum=0.5), "plain 'sgd'"),
        (dict(server_learning_rate=0.5), 'server_learning_rate=1'),
        (dict(local_epochs=2), 'num_epochs must be 1'),
    ):
      with self.subTest(message), self.assertRaisesRegex(ValueError, message):
        _build('udp', P(), min_client_examples=lambda: 5, **kwargs)

  @pytest.mark.slow
  def test_udp_crd_steers_by_server_validation_data(self):
    rng = np.random.default_rng(0)
    validation = (
        rng.normal(size=(8, 4)).astype(np.float32),
        rng.integers(0, 3, size=8).astype(np.int32),
    )
    with self.assertRaisesRegex(ValueError, 'validation data'):
      _build('udp', P(crd_beta=0.9), min_client_examples=lambda: 5)
    mech = _build(
        'udp',
        P(crd_beta=0.9),
        min_client_examples=lambda: 5,
        validation_data=lambda: validation,
    )
    state = mech.process.initialize()
    self.assertFalse(mech.loop.is_done(state))
    event = guarantees.extract_dp_event(
        mech.loop.aggregator_state(state), allow_initial_state=True
    )
    self.assertIsInstance(event, dp_event.GaussianDpEvent)

  def test_ldp_weights_mode_releases_no_client_metrics(self):
    mech = _build('ldp', P(ldp_mode='weights'))
    metrics = mech.process.next.type_signature.result.metrics.member
    self.assertEqual(
        tff.structure.name_list(metrics['client_work']['train']), []
    )
    with self.assertRaisesRegex(ValueError, 'server_learning_rate=1'):
      _build('ldp', P(ldp_mode='weights'), server_learning_rate=0.5)

  def test_adaptive_clipping_with_few_clients_noises_the_count_at_z(self):
    # TFF's adaptive clipping refuses z >= 2 * clipped_count_stddev; its
    # default count noise 0.05 K = 0.2 with K = 4 would refuse z = 0.5, so
    # the count's noise is raised to z (the value's noise grows by
    # sqrt(4 / 3)) and the event is still the calibrated z.
    mech = _build('dp_fedavg', P(noise_multiplier=0.5))
    self.assertIn('clipped count std 0.5', mech.resolved['clipping'])
    event = guarantees.extract_dp_event(
        mech.loop.aggregator_state(mech.process.initialize()),
        allow_initial_state=True,
    )
    # The value's and the count's Gaussians compose to noise multiplier z.
    self.assertIsInstance(event, dp_event.ComposedDpEvent)
    multipliers = [e.noise_multiplier for e in event.events]
    self.assertAllClose(
        sorted(multipliers), [0.5 * (4 / 3) ** 0.5, 1.0], rtol=1e-5
    )
    self.assertAllClose(sum(m**-2 for m in multipliers) ** -0.5, 0.5, rtol=1e-5)

  def test_distortion_resolves_a_tv_target(self):
    # sigma_e of a TV target is a function of the configuration: in resolved,
    # with the bounds it implies (the upper one is the target).
    mech = _build(
        'distortion', P(target_tv=0.5, parameter_variance=0.01, clip=2.0)
    )
    sigma = mech.resolved['noise_stddev']
    self.assertGreater(sigma, 0.0)
    self.assertAllClose(mech.resolved['noise_multiplier'], sigma / 4.0)
    self.assertAllClose(mech.resolved['tv_upper'], 0.5)
    self.assertLess(mech.resolved['tv_lower'], 0.5)
    self.assertEqual(mech.closed_form['target_tv'], 0.5)

  @pytest.mark.slow
  def test_dp_fedavg_calibrates_to_the_target(self):
    mech = _build('dp_fedavg', P(epsilon=3.0, clip=1.0))
    z = mech.resolved['noise_multiplier']
    ledger = ledger_lib.PrivacyLedger()
    event = _configured_event(mech)
    self.assertAllClose(event.noise_multiplier, z)  # TFF keeps float32.
    for _ in range(3):  # total_rounds
      ledger.record(dp_event.PoissonSampledDpEvent(0.4, event))
    # The calibration's contract: eps <= target, within its z tolerance.
    self.assertLessEqual(ledger.epsilon(base.DEFAULT_DELTA), 3.0)
    self.assertAllClose(
        z,
        calibration.calibrate_noise_multiplier(
            3.0, base.DEFAULT_DELTA, 3, sampling_probability=0.4
        ),
    )
    self.assertEqual(mech.upload_bytes_per_client, 4 * 15)

  def test_ldp_event_covers_every_value_and_the_range_release(self):
    mech = _build(
        'ldp', P(ldp_epsilon=0.5, ldp_range_mode='quantile', ldp_radius=0.1)
    )
    values, range_release = _configured_event(mech).events
    self.assertEqual(
        values, dp_event.SelfComposedDpEvent(events.PureEpsilonDpEvent(0.5), 15)
    )  # d = 4 * 3 + 3 values of eps0 each.
    self.assertLen(range_release.events, 2)  # One count per tensor.
    # The server sees the quantile's exact count: nothing against it.
    self.assertEqual(mech.guarantee.noise, 'central')
    self.assertEqual(
        registry.noise('ldp', P(ldp_range_mode='quantile', ldp_radius=0.1)),
        'central',
    )

  def test_ldp_minmax_is_a_non_private_release(self):
    mech = _build('ldp', P(ldp_range_mode='minmax'))
    ledger = ledger_lib.PrivacyLedger()
    ledger.record(_configured_event(mech))
    self.assertEqual(ledger.epsilon(1e-5), float('inf'))
    self.assertTrue(any('minmax' in c for c in mech.caveats))

  @pytest.mark.slow
  def test_guarantees_and_released_metrics_of_the_mechanisms(self):
    # Each mechanism built once (a TFF process each): its guarantee's unit
    # and noise, declared alike in its module, and no exact client metric
    # in its rounds' output (a private one's train metrics are empty). Its
    # round compiles for remote workers: split into TFF's mergeable form,
    # or (an aggregate that depends on another) whole on one worker, which
    # `remote` decides from TFF's error (train.py --workers runs two of
    # them end to end, tests/scripts/train_remote_test.py).
    expected = {
        'none': None,
        'dp_fedavg': ('client', 'central'),
        'dp_ftrl': ('client', 'central'),
        'blt': ('client', 'central'),
        'bandmf': ('client', 'central'),
        'smp': ('client', 'secure_sum'),
        'distortion': ('client', 'local'),
        'udp': ('example', 'local'),
        'ldp': ('client', 'local'),
    }
    self.assertCountEqual(expected, registry.MECHANISMS)
    extra = {
        'udp': dict(min_client_examples=lambda: 5),
        'distortion': dict(params=P(parameter_variance=0.1)),
        'dp_fedavg': dict(params=P(clip=1.0)),
        'dp_ftrl': dict(params=_REQUIRED['dp_ftrl']),
    }

    def train_metrics_type(mech):
      metrics = mech.process.next.type_signature.result.metrics.member
      return metrics['client_work']['train']

    for name, want in expected.items():
      with self.subTest(name):
        kwargs = dict(extra.get(name, {}))
        mech = _build(name, kwargs.pop('params', P()), **kwargs)
        got = mech.guarantee
        self.assertEqual(None if got is None else (got.unit, got.noise), want)
        self.assertEqual(registry.unit(name), None if got is None else got.unit)
        self.assertEqual(
            registry.noise(name), None if got is None else got.noise
        )
        form = remote._mergeable_form(mech.process.next)  # pylint: disable=protected-access
        self.assertEqual(form is None, name == 'smp', name)
        released = tff.structure.name_list(train_metrics_type(mech))
        if registry.unit(name) is None:  # Not private.
          self.assertIn('loss', released)  # tff.learning's exact sums.
        else:
          self.assertEqual(released, [])
    top_k = _build('smp', P(mask='top_k'), public_data=_public_data(seed=0))
    self.assertEqual(tff.structure.name_list(train_metrics_type(top_k)), [])
    self.assertIsNone(remote._mergeable_form(top_k.process.next))  # pylint: disable=protected-access

  def test_build_refuses_a_mechanism_whose_noise_is_not_its_factorys(self):
    udp_guarantee = registry.definition('udp').GUARANTEE

    @dataclasses.dataclass(frozen=True)
    class Said(registry.definition('none')):
      GUARANTEE = udp_guarantee

    with mock.patch.dict(registry.REGISTRY, {'none': Said}):
      with self.assertRaisesRegex(
          ValueError, "unit None, its definition says 'example'"
      ):
        _build('none', P())

  def test_smp_top_k_needs_public_data_and_rand_k_refuses_it(self):
    with self.assertRaisesRegex(ValueError, 'needs public_data'):
      _build('smp', P(mask='top_k'))
    with self.assertRaisesRegex(ValueError, 'public_data applies only'):
      _build('smp', P(), public_data=_public_data(seed=0))
    with self.assertRaisesRegex(ValueError, 'public_data applies only'):
      _build('dp_fedavg', P(clip=1.0), public_data=_public_data(seed=0))

  @pytest.mark.slow
  def test_smp_top_k_round_uses_the_public_mask(self):
    # One round of the built process: the round's mask is the top-k of the
    # server's public update (Fed-SMP), the event is the configured noise;
    # changing the private clients' data leaves the mask as it was, changing
    # the public data changes it (from the same global model).
    weights = []

    def mask_of_round(public_seed, private_seed):
      mech = _build(
          'smp',
          P(mask='top_k', compression=0.2, noise_multiplier=0.7, clip=1.0),
          public_data=_public_data(seed=public_seed),
      )
      self.assertEqual(mech.resolved['mask'], 'top_k')
      k = mech.resolved['kept_coordinates']
      self.assertEqual(k, 3)  # round(0.2 * 15)
      clients = [_public_data(seed=private_seed + 10 * i) for i in range(2)]
      state = mech.process.initialize()
      if weights:
        state = mech.process.set_model_weights(state, weights[0])
      else:
        weights.append(mech.process.get_model_weights(state))
      output = mech.process.next(state, clients)
      mask = np.asarray(output.state.aggregator.mask_indices)
      self.assertLen(np.unique(mask), k)
      self.assertEqual(int(output.metrics['mask']['mask_size']), k)
      # 2 of K = 4 expected clients reported: the event is still z's.
      self.assertEqual(
          guarantees.extract_dp_event(output.state.aggregator),
          dp_event.GaussianDpEvent(0.7),
      )
      return mask

    mask = mask_of_round(public_seed=1, private_seed=2)
    self.assertAllEqual(mask_of_round(public_seed=1, private_seed=3), mask)
    # 3 of 15 coordinates: 455 possible masks.
    self.assertNotAllEqual(mask_of_round(public_seed=4, private_seed=2), mask)


def _configured_event(mech):
  return guarantees.extract_dp_event(
      mech.process.initialize().aggregator, allow_initial_state=True
  )


def _public_data(seed):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(12, 4)).astype(np.float32)
  y = rng.integers(0, 3, size=12).astype(np.int32)
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(4)


class PrivacyReportTest(tf.test.TestCase):
  """Each mechanism's report: the accountants, the paper's closed form too."""

  def test_reports(self):
    self.assertEqual(
        set(registry.REPORTS),
        {'dp_fedavg', 'blt', 'bandmf', 'smp', 'udp', 'distortion', 'ldp'},
    )
    params = registry.report_parameters()
    self.assertIn('sensitivity', params)
    self.assertEqual(params['num_values'][0], int)
    self.assertIn('udp: sigma / Delta', params['noise_multiplier'][1])

  def test_smp_report_matches_dp_accounting(self):
    report = registry.privacy_report(
        'smp',
        delta=1e-5,
        rounds=300,
        noise_multiplier=1.1,
        sampling_probability=0.01,
    )
    direct = rdp_privacy_accountant.RdpAccountant().compose(
        dp_accounting.PoissonSampledDpEvent(
            0.01, dp_accounting.GaussianDpEvent(1.1)
        ),
        300,
    )
    self.assertEqual(report['rdp_epsilon'], direct.get_epsilon(1e-5))
    self.assertLess(report['pld_epsilon'], report['rdp_epsilon'])
    self.assertEqual(report['sampling'], 'poisson')
    json.dumps(report)  # JSON-ready.

  def test_udp_and_distortion_noise_units(self):
    # udp: z = sigma / Delta; distortion: z = sigma_e / (2 C).
    udp = registry.privacy_report(
        'udp', delta=1e-3, rounds=50, noise_stddev=0.3, sensitivity=0.1
    )
    self.assertAllClose(udp['noise_multiplier'], 3.0)
    distortion = registry.privacy_report(
        'distortion', delta=1e-3, rounds=50, noise_stddev=1.5, clip=0.5
    )
    self.assertAllClose(distortion['noise_multiplier'], 1.5)
    # The paper's eq. (10) claim for z = 3, q = 1, T = 50, delta = 1e-3:
    # sqrt(2 * 50 * ln 1000) / 3 = 8.7608.
    self.assertAllClose(
        udp['paper']['paper_claimed_epsilon'], 8.7608, atol=1e-4
    )

  @pytest.mark.slow
  def test_target_epsilon(self):
    report = registry.privacy_report(
        'udp', delta=1e-3, rounds=200, epsilon=8.0, sensitivity=0.0125
    )
    z = report['calibration']['rdp_noise_multiplier']
    check = reports.gaussian_report(z, 1e-3, 200)
    self.assertLessEqual(check['rdp_epsilon'], 8.0)
    self.assertAllClose(report['calibration']['rdp_noise_stddev'], z * 0.0125)
    self.assertFalse(report['paper']['holds'])
    self.assertGreater(report['paper']['true_rdp_epsilon'], 8.0)

  def test_blt_report_counts_streams(self):
    # N = 100, K = 10: streams of 10 rounds; 25 rounds are 3 streams, each an
    # unsampled Gaussian of multiplier z / sensitivity.
    report = registry.privacy_report(
        'blt',
        delta=1e-5,
        rounds=25,
        noise_multiplier=3.0,
        population=100,
        sample_size=10,
    )
    plan = report['blt']
    self.assertEqual((plan['rounds_per_stream'], plan['streams']), (10, 3))
    strategy = blt_lib.BLT(
        np.array(plan['buf_decay']), np.array(plan['output_scale'])
    )
    self.assertAllClose(plan['sensitivity'], strategy.sensitivity(10))
    direct = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL
    ).compose(dp_accounting.GaussianDpEvent(3.0 / plan['sensitivity']), 3)
    self.assertAllClose(report['rdp_epsilon'], direct.get_epsilon(1e-5))
    self.assertEqual(report['neighboring_relation'], 'replace_special')
    self.assertEqual(report['rounds'], 25)
    # A target eps: the noise the program would run at meets it.
    target = registry.privacy_report(
        'blt', rounds=25, epsilon=2.0, population=100, sample_size=10
    )
    z = target['blt']['noise_multiplier']
    self.assertAllClose(
        z, target['calibration']['rdp_noise_multiplier'] * plan['sensitivity']
    )
    check = registry.privacy_report(
        'blt', rounds=25, noise_multiplier=z, population=100, sample_size=10
    )
    self.assertBetween(check['rdp_epsilon'], 1.99, 2.0)
    json.dumps(report)
    with self.assertRaisesRegex(ValueError, 'population'):
      registry.privacy_report(
          'blt', rounds=5, epsilon=1.0, sampling_probability=0.1
      )
    with self.assertRaisesRegex(ValueError, 'epsilon or noise_multiplier'):
      registry.privacy_report('blt', rounds=5, population=10, sample_size=2)

  def test_bandmf_report_counts_cycles(self):
    # N = 100, K = 10, b = 4 over 10 rounds: 3 cycles, each a Poisson-sampled
    # Gaussian at q = 10 / 25 under add-or-remove-one.
    report = registry.privacy_report(
        'bandmf',
        delta=1e-5,
        rounds=10,
        noise_multiplier=3.0,
        bands=4,
        population=100,
        sample_size=10,
    )
    plan = report['bandmf']
    self.assertEqual(
        (plan['bands'], plan['cycles'], report['releases']), (4, 3, 3)
    )
    self.assertAllClose(plan['sampling_probability'], 0.4)
    direct = rdp_privacy_accountant.RdpAccountant().compose(
        dp_accounting.PoissonSampledDpEvent(
            0.4, dp_accounting.GaussianDpEvent(3.0)
        ),
        3,
    )
    self.assertAllClose(report['rdp_epsilon'], direct.get_epsilon(1e-5))
    self.assertEqual(report['neighboring_relation'], 'add_or_remove_one')
    self.assertEqual(report['rounds'], 10)
    with self.assertRaisesRegex(ValueError, 'population'):
      registry.privacy_report(
          'bandmf', rounds=5, epsilon=1.0, sampling_probability=0.1
      )

  @pytest.mark.slow
  def test_bandmf_report_for_a_target_plans_as_the_program(self):
    # The bands and noise the program would run at meet the target.
    target = registry.privacy_report(
        'bandmf', rounds=10, epsilon=4.0, population=20, sample_size=10
    )
    chosen = target['bandmf']
    scores = chosen['scores']  # Divisors of 20 up to 20 // 10.
    self.assertEqual(sorted(scores), ['1', '2'])
    self.assertEqual(str(chosen['bands']), min(scores, key=scores.get))
    self.assertAllClose(
        chosen['noise_multiplier'],
        target['calibration']['rdp_noise_multiplier'],
        rtol=1e-3,
    )
    check = registry.privacy_report(
        'bandmf',
        rounds=10,
        noise_multiplier=chosen['noise_multiplier'],
        bands=chosen['bands'],
        population=20,
        sample_size=10,
    )
    self.assertBetween(check['rdp_epsilon'], 3.99, 4.0)
    json.dumps(target)

  def test_ldp_report(self):
    report = registry.privacy_report(
        'ldp',
        delta=1e-5,
        rounds=10,
        ldp_epsilon=1.0,
        num_values=1_663_370,
        num_clients=100,
    )
    self.assertEqual(report['mechanism'], 'ldp')
    self.assertEqual(report['paper_epsilon_per_value'], 1.0)
    self.assertEqual(report['plain_composition_epsilon'], 16_633_700.0)
    self.assertLess(report['rdp_epsilon'], report['plain_composition_epsilon'])
    self.assertIsNone(report['pld_epsilon'])  # Too many releases for PLD.
    self.assertIn('pld', report['unsupported'])
    self.assertFalse(report['shuffle_applicable'])
    self.assertIsNone(report['shuffle_epsilon'])
    json.dumps(report)

  @pytest.mark.slow
  def test_built_closed_form_is_the_report(self):
    mech = _build('smp', P(noise_multiplier=1.0))
    self.assertEqual(
        mech.closed_form,
        registry.privacy_report(
            'smp',
            rounds=3,
            noise_multiplier=1.0,
            sampling=mech.sampling.ledger_sampling(),
        ),
    )

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, 'mechanism'):
      registry.privacy_report('rr', delta=1e-5, rounds=1, noise_multiplier=1.0)
    with self.assertRaisesRegex(ValueError, 'mechanism'):
      registry.privacy_report('none', rounds=1)
    with self.assertRaisesRegex(ValueError, 'delta'):
      registry.privacy_report('smp', delta=1.0, rounds=1, noise_multiplier=1.0)
    with self.assertRaisesRegex(ValueError, 'rounds'):
      registry.privacy_report('smp', delta=1e-5, rounds=0, noise_multiplier=1.0)
    with self.assertRaisesRegex(ValueError, 'noise_multiplier'):
      registry.privacy_report('smp', delta=1e-5, rounds=1)
    with self.assertRaisesRegex(ValueError, 'epsilon'):
      registry.privacy_report('smp', delta=1e-5, rounds=1, epsilon=0.0)
    with self.assertRaisesRegex(ValueError, 'clip'):
      registry.privacy_report(
          'distortion', delta=1e-5, rounds=1, noise_stddev=1.0
      )
    with self.assertRaisesRegex(ValueError, 'ldp_epsilon'):
      registry.privacy_report('ldp', delta=1e-5, rounds=1, num_values=3)
    with self.assertRaisesRegex(ValueError, 'sensitivity'):
      registry.privacy_report('udp', delta=1e-5, rounds=1, noise_stddev=1.0)
    with self.assertRaisesRegex(TypeError, 'target_epsilon'):
      registry.privacy_report('smp', rounds=1, target_epsilon=1.0)


if __name__ == '__main__':
  tf.test.main()
