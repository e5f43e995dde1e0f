"""A calibrated factory's plan is a contract: round T+1 refused in one line."""

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.accounting import ledger as ledger_lib
from tff_priv.aggregators import bandmf
from tff_priv.aggregators import blt
from tff_priv.aggregators import distortion
from tff_priv.aggregators import dp_fedavg
from tff_priv.aggregators import dp_ftrl
from tff_priv.aggregators import plan
from tff_priv.aggregators import smp
from tff_priv.aggregators import udp
from tff_priv.program import sampling

_T, _N, _K, _EPS = 2, 10, 2, 4.0
_COMMON = dict(total_rounds=_T, population=_N, clients_per_round=_K)

# name -> (factory of the plan, the ledger's sampling arguments).
_FACTORIES = {
    'BLTFactory': (lambda **kw: blt.BLTFactory.calibrated(_EPS, **kw), {}),
    'BandMFFactory': (
        lambda **kw: bandmf.BandMFFactory.calibrated(_EPS, bands=2, **kw),
        {},
    ),
    'TreeRestartFactory': (
        lambda **kw: dp_ftrl.TreeRestartFactory.calibrated(_EPS, **kw),
        {},
    ),
    'dp_fedavg': (
        lambda **kw: dp_fedavg.calibrated(_EPS, **kw),
        dict(sampling_probability=_K / _N),
    ),
    'SparsifiedSecureSumFactory': (
        lambda **kw: smp.SparsifiedSecureSumFactory.calibrated(
            _EPS, compression=0.5, **kw
        ),
        dict(sampling_probability=_K / _N),
    ),
    'GaussianUDPFactory': (
        lambda **kw: udp.GaussianUDPFactory.calibrated(
            _EPS,
            sensitivity=0.1,
            inner_agg_factory=tff.aggregators.UnweightedMeanFactory(),
            **kw,
        ),
        dict(population=_N, sample_size=_K),
    ),
    'DistortionFactory': (
        lambda **kw: distortion.DistortionFactory.calibrated(
            _EPS, parameter_variance=1e-2, **kw
        ),
        dict(population=_N, sample_size=_K),
    ),
}
_VALUE = tff.TensorType(np.float32, [4])


def _client_values():
  return [np.full([4], 0.1 * (i + 1), np.float32) for i in range(_K)]


class PlanTest(tf.test.TestCase, parameterized.TestCase):
  """In tests/conftest.py's `runtime.set_context()`, giving the one line.

  Every `.calibrated(epsilon, total_rounds=T, ...)` factory runs T rounds in a
  user's own loop and refuses the T+1-th inside its process (before the round
  has a result), as `PlanExceededError` with one line naming the plan and how to
  extend it; the ledger refuses a state past its plan; the samplers refuse
  rounds outside 1..T. Extending the plan (`spent=ledger`) meets the target over
  every round.
  """

  @parameterized.parameters(*_FACTORIES)
  def test_round_past_the_plan_is_refused_in_one_line(self, name):
    make, sampling_args = _FACTORIES[name]
    process = make(**_COMMON).create(_VALUE)
    ledger = ledger_lib.PrivacyLedger()
    state = process.initialize()
    for _ in range(_T):
      state = process.next(state, _client_values()).state
      ledger.record_round(state, **sampling_args)
    self.assertEqual(ledger.num_releases, _T)
    self.assertLessEqual(ledger.epsilon(1e-5), _EPS * (1 + 1e-6))
    with self.assertRaises(plan.PlanExceededError) as raised:
      process.next(state, _client_values())
    message = str(raised.exception)
    self.assertLen(message.splitlines(), 1)
    self.assertStartsWith(
        message,
        f'{name} was calibrated for {_T} rounds and refuses round '
        f'{_T + 1}: to go on, extend the plan with {name}.calibrated(',
    )
    self.assertIn('spent=ledger', message)

  @parameterized.parameters('BLTFactory', 'dp_fedavg')
  def test_an_extended_plan_meets_the_target_over_every_round(self, name):
    self._check_extension(name)

  @pytest.mark.slow
  def test_an_extended_udp_plan_meets_the_target(self):
    # 25 s: fixed-size sampling's RDP after the spent rounds, calibrated.
    self._check_extension('GaussianUDPFactory')

  def _check_extension(self, name):
    make, sampling_args = _FACTORIES[name]
    ledger = ledger_lib.PrivacyLedger()
    for extension in ({}, dict(spent=ledger)):
      process = make(**_COMMON, **extension).create(_VALUE)
      state = process.initialize()
      for _ in range(_T):
        state = process.next(state, _client_values()).state
        ledger.record_round(state, **sampling_args)
    self.assertEqual(ledger.num_releases, 2 * _T)
    self.assertBetween(ledger.epsilon(1e-5), 0.98 * _EPS, _EPS * (1 + 1e-6))

  def test_without_a_plan_nothing_is_refused(self):
    factory = blt.BLTFactory.from_plan(
        blt.plan_streams(_T, _N, _K, noise_multiplier=1.0), _K, 1.0
    )
    self.assertIsNone(factory.planned_rounds)
    process = factory.create(_VALUE)
    state = process.initialize()
    for _ in range(_T + 1):
      state = process.next(state, _client_values()).state
    self.assertEqual(int(state.planned_rounds), 0)  # No plan.


class LedgerPlanTest(tf.test.TestCase):

  def test_a_state_past_its_plan_is_refused(self):
    ledger = ledger_lib.PrivacyLedger()
    state = {'inner': plan.PlanState((), np.int64(3), np.int64(2))}
    with self.assertRaisesRegex(
        ValueError, 'round 3 of a factory calibrated for 2'
    ):
      ledger.record_round(state)
    self.assertEqual(ledger.num_releases, 0)


class SamplerPlanTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(
      lambda: sampling.StreamSampler(_N, _K, total_rounds=3),
      lambda: sampling.BandSampler(_N, _K, 2, total_rounds=3),
  )
  def test_rounds_outside_the_plan_are_refused(self, make):
    sampler = make()
    name = type(sampler).__name__
    for t in (1, 3):
      sampler.sample(t)
    with self.assertRaisesRegex(ValueError, 'takes round numbers from 1'):
      sampler.sample(0)
    with self.assertRaisesRegex(
        ValueError, f'{name} was planned for 3 rounds and refuses round 4'
    ):
      sampler.sample(4)


if __name__ == '__main__':
  tf.test.main()
