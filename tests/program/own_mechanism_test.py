"""A user's own mechanism, defined in this file alone, run by the program."""

import dataclasses
import os
import shutil
import tempfile

import dp_accounting
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.accounting import guarantees
from tff_priv.program import registry
from tff_priv.program import sampling as sampling_lib
from tff_priv.program import training

_NAME = 'toy_gaussian'
_GUARANTEE = guarantees.Guarantee(
    unit='client',
    noise='central',
    neighboring_relation='add_or_remove_one',
    description='a toy: the server clips the updates and noises their sum',
)


@dataclasses.dataclass(frozen=True)
class _Toy(registry.MechanismConfig):
  """A toy: TFF's fixed Gaussian DP aggregator under Poisson sampling."""

  NAME = _NAME
  SAMPLING = 'poisson'
  GUARANTEE = _GUARANTEE

  noise_multiplier: float = registry.param(1.0, 'z of the clipped sum.')
  clip: float = registry.param(1.0, 'the L2 clip of an update.')
  delta: float = registry.param(1e-5, 'the delta its eps is reported at.')

  def validate(self):
    if self.noise_multiplier <= 0:
      raise ValueError(
          f'noise_multiplier must be > 0, got {self.noise_multiplier}'
      )

  def make(self, context):
    factory = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        noise_multiplier=self.calibrate(context),
        clients_per_round=context.sampling.clients_per_round,
        clip=self.clip,
    )
    return registry.Mechanism(
        _NAME,
        self,
        context.sampling,
        context.fed_avg(factory),
        registry.count_parameters(context.model_fn),
        _GUARANTEE,
    )


class _Registered(tf.test.TestCase):
  """Registers the toy mechanism for each test, unregisters it after.

  The whole contract of a mechanism is one `registry.MechanismConfig`
  subclass: this test defines a toy one (TFF's fixed Gaussian DP aggregator
  under Poisson sampling, with its own `Guarantee`), registers it and runs it
  through `training.run`; nothing else in the repository names it.
  """

  def setUp(self):
    super().setUp()
    registry.register(_Toy)
    self.addCleanup(registry.unregister, _NAME)


class RegistryTest(_Registered):

  def test_registered_like_the_others(self):
    self.assertIn(_NAME, registry.MECHANISMS)
    self.assertNotIn(_NAME, registry.REPORTS)  # It has no report.
    self.assertEqual(registry.unit(_NAME), 'client')
    self.assertEqual(registry.noise(_NAME), 'central')
    self.assertEqual(registry.sampling_kind(_NAME), 'poisson')
    self.assertEqual(registry.canary_kind(_NAME), 'clients')
    self.assertEqual(
        registry.parameter_names(_NAME), ('noise_multiplier', 'clip', 'delta')
    )
    self.assertEqual(registry.config(_NAME, {'clip': 2.0}).clip, 2.0)
    with self.assertRaisesRegex(ValueError, 'ldp_epsilon does not apply'):
      registry.config(_NAME, {'ldp_epsilon': 1.0})
    with self.assertRaisesRegex(ValueError, 'noise_multiplier must be > 0'):
      training.RunConfig(
          task='digits', mechanism=_NAME, params={'noise_multiplier': -1.0}
      ).validate()

  def test_a_name_is_registered_once_and_only_a_mechanism_config(self):
    with self.assertRaisesRegex(ValueError, 'already registered'):
      registry.register(_Toy)

    @dataclasses.dataclass(frozen=True)
    class Taken(_Toy):
      NAME = 'dp_fedavg'

    with self.assertRaisesRegex(ValueError, 'already registered'):
      registry.register(Taken)
    with self.assertRaisesRegex(TypeError, 'subclass of registry.Mechanism'):
      registry.register(training)
    with self.assertRaisesRegex(ValueError, 'SAMPLING must be one of'):
      type('Everyone', (_Toy,), {'NAME': 'x', 'SAMPLING': 'everyone'})

  def test_its_fields_are_its_flags_with_their_help(self):
    self.assertEqual(
        registry.base.parameter_help(_Toy)['clip'], 'the L2 clip of an update.'
    )

  def test_unregistered_it_is_unknown(self):
    registry.unregister(_NAME)
    self.addCleanup(registry.register, _Toy)  # For the cleanup's unregister.
    self.assertNotIn(_NAME, registry.MECHANISMS)
    with self.assertRaisesRegex(ValueError, 'mechanism'):
      registry.definition(_NAME)


class RunTest(_Registered):

  @pytest.mark.slow
  def test_two_rounds_through_the_program_with_their_epsilon(self):
    root = os.path.join(tempfile.mkdtemp(), 'run')
    self.addCleanup(shutil.rmtree, os.path.dirname(root), ignore_errors=True)
    config = training.RunConfig(
        task='digits',
        batch_size=20,
        mechanism=_NAME,
        params={'noise_multiplier': 1.5, 'clip': 1.0},
        clients_per_round=2,
        total_rounds=2,
        eval_every=2,
        client_learning_rate=0.1,
    )
    summary = training.run(config, root, progress=False)
    self.assertEqual(summary['rounds_run'], 2)
    analyst = summary['privacy']['guarantees'][0]
    self.assertEqual(analyst['unit'], 'client')
    # By hand: 2 rounds of Gaussian(1.5) on Poisson-sampled clients (digits:
    # 10 clients, K = 2), read by dp_accounting's RDP accountant.
    q = (
        sampling_lib.ClientSampling('poisson', 10, 2)
        .ledger_sampling()
        .sampling_probability
    )
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(
        dp_accounting.PoissonSampledDpEvent(
            q, dp_accounting.GaussianDpEvent(1.5)
        ),
        2,
    )
    self.assertAllClose(
        analyst['epsilon'], accountant.get_epsilon(1e-5), rtol=1e-9
    )


if __name__ == '__main__':
  tf.test.main()
