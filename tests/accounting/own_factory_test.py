"""A factory of the user's own, in this file alone: charged and audited.

Its state class declares its accounting (`guarantees.StateAccounting`) and the
factory its guarantee and its `audit_spec`: the ledger charges it, TFF's
wrappers around it are refused where they must be, and the auditor audits it
(vectorised), with nothing in tff_priv.accounting or tff_priv.auditing naming
it.
"""

from typing import Any, NamedTuple
import warnings

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_priv.accounting import guarantees
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.accounting import wrapped_states
from tff_priv.auditing import aggregator_audit

_VALUE = tff.TensorType(np.float32, [20])
_DELTA = 1e-5


class _ToyState(NamedTuple):
  rounds: Any
  dp_event: Any
  is_init_state: Any

  accounting = guarantees.StateAccounting(
      factory='ToyGaussianFactory',
      relation='add_or_remove_one',
      noise='central',
  )


# Plain named tuples, not subclasses of one: TFF's program state manager
# restores only those.
class _LocalToyState(NamedTuple):
  rounds: Any
  dp_event: Any
  is_init_state: Any

  accounting = guarantees.StateAccounting(
      factory='ToyLocalFactory', relation='replace_one', noise='local'
  )


class _StreamToyState(NamedTuple):
  rounds: Any
  dp_event: Any
  is_init_state: Any

  accounting = guarantees.StateAccounting(
      factory='ToyStreamFactory',
      relation='add_or_remove_one',
      noise='central',
      sampling='schedule',
      sampler='StreamSampler',
      schedule='each client at most once per stream',
  )


class ToyGaussianFactory(tff.aggregators.UnweightedAggregationFactory):
  """Clips each value to `clip`, sums, adds N(0, (z clip)^2) per coordinate.

  Its state's event claims `GaussianDpEvent(claimed_z)` (`z` by default: an
  honest claim).
  """

  guarantee = guarantees.Guarantee(
      unit='client', noise='central', neighboring_relation='add_or_remove_one'
  )

  def __init__(self, z, clip, claimed_z=None, state_class=_ToyState):
    self._z, self._clip = z, clip
    self._event = dp_accounting.GaussianDpEvent(claimed_z or z)
    self._state_class = state_class

  def audit_spec(self):
    return guarantees.AuditSpec(clip=self._clip, coordinatewise='central_sum')

  def create(self, value_type):
    state_class, event = self._state_class, self._event
    stddev, clip = self._z * self._clip, self._clip

    @tff.tensorflow.computation
    def initial():
      return state_class(
          tf.constant(0, tf.int64), event.to_named_tuple(), tf.constant(True)
      )

    @tff.federated_computation()
    def init_fn():
      return tff.federated_eval(initial, tff.SERVER)

    state_type = init_fn.type_signature.result.member
    clip_fn = tff.tensorflow.computation(
        lambda v: tf.clip_by_norm(v, clip), value_type
    )

    @tff.tensorflow.computation(state_type, value_type)
    def noise_fn(state, total):
      noised = total + tf.random.normal(total.shape, stddev=stddev)
      new = state_class(state.rounds + 1, event.to_named_tuple(), False)
      return new, noised

    @tff.federated_computation(
        tff.FederatedType(state_type, tff.SERVER),
        tff.FederatedType(value_type, tff.CLIENTS),
    )
    def next_fn(state, value):
      total = tff.federated_sum(tff.federated_map(clip_fn, value))
      out = tff.federated_map(noise_fn, (state, total))
      return tff.templates.MeasuredProcessOutput(
          state=out[0],
          result=out[1],
          measurements=tff.federated_value((), tff.SERVER),
      )

    return tff.templates.AggregationProcess(init_fn, next_fn)


def _next(factory, rounds=1):
  process = factory.create(_VALUE)
  state = process.initialize()
  for _ in range(rounds):
    output = process.next(state, [np.ones(20, np.float32)] * 2)
    state = output.state
  return output


def _noised_quantile():
  # A quantile of the clients' norms from a Gaussian count (std 2 on records
  # of sensitivity 0.5: multiplier 4).
  return tff.aggregators.PrivateQuantileEstimationProcess(
      tfp.QuantileEstimatorQuery(
          initial_estimate=5.0,
          target_quantile=0.9,
          learning_rate=0.2,
          below_estimate_stddev=2.0,
          expected_num_records=2.0,
          geometric_update=True,
      )
  )


class LedgerTest(tf.test.TestCase):

  def test_its_rounds_are_charged_under_the_sampling_its_relation_needs(self):
    state = _next(ToyGaussianFactory(2.0, 1.0), rounds=2).state
    self.assertEqual(guarantees.factory_kind_of_state(state), 'tff_priv')
    ledger = ledger_lib.PrivacyLedger()
    self.assertEqual(
        ledger.record_round(state, sampling_probability=0.5),
        dp_accounting.PoissonSampledDpEvent(
            0.5, dp_accounting.GaussianDpEvent(2.0)
        ),
    )
    self.assertEqual(ledger.num_releases, 1)
    # Fixed-size sampling reads the add-or-remove-one event under
    # replace-one (another ledger): the multiplier halves.
    self.assertEqual(
        ledger_lib.PrivacyLedger().record_round(
            state, population=10, sample_size=5
        ),
        dp_accounting.SampledWithoutReplacementDpEvent(
            10, 5, dp_accounting.GaussianDpEvent(1.0)
        ),
    )

  def test_a_noised_wrapper_is_charged_around_it_and_refused_around_local(
      self,
  ):
    central = _next(
        tff.aggregators.zeroing_factory(
            _noised_quantile(), ToyGaussianFactory(2.0, 1.0)
        )
    ).state
    self.assertEqual(
        ledger_lib.PrivacyLedger().record_round(central),
        dp_accounting.ComposedDpEvent(
            [
                dp_accounting.GaussianDpEvent(2.0),
                dp_accounting.GaussianDpEvent(4.0),
            ]
        ),
    )
    local = _next(
        tff.aggregators.zeroing_factory(
            _noised_quantile(),
            ToyGaussianFactory(2.0, 1.0, state_class=_LocalToyState),
        )
    ).state
    with self.assertRaises(wrapped_states.UnnoisedWrapperError):
      ledger_lib.PrivacyLedger().record_round(local)
    # Inside a public norm it is charged as it is.
    public = _next(
        tff.aggregators.zeroing_factory(
            5.0, ToyGaussianFactory(2.0, 1.0, state_class=_LocalToyState)
        )
    ).state
    self.assertEqual(
        ledger_lib.PrivacyLedger().record_round(
            public, population=10, sample_size=5
        ),
        dp_accounting.SampledWithoutReplacementDpEvent(
            10, 5, dp_accounting.GaussianDpEvent(2.0)
        ),
    )

  def test_a_state_that_holds_a_schedule_takes_no_sampling(self):
    state = _next(
        ToyGaussianFactory(2.0, 1.0, state_class=_StreamToyState)
    ).state
    ledger = ledger_lib.PrivacyLedger()
    with self.assertRaisesRegex(
        ValueError,
        'ToyStreamFactory claims no amplification .* each client at most '
        'once per stream.*tff_priv.program.StreamSampler',
    ):
      ledger.record_round(state, sampling_probability=0.5)
    self.assertEqual(
        ledger.record_round(state), dp_accounting.GaussianDpEvent(2.0)
    )


class AuditTest(tf.test.TestCase):

  def test_it_is_audited_vectorised_and_a_false_claim_fails(self):
    self.assertTrue(
        aggregator_audit.vectorizable(ToyGaussianFactory(0.3, 1.0), 5)
    )
    with warnings.catch_warnings():
      warnings.simplefilter('error', aggregator_audit.AuditFailedWarning)
      # alpha = 1e-7: an honest claim fails with at most that probability.
      honest = aggregator_audit.audit_aggregator(
          ToyGaussianFactory(0.3, 1.0),
          value_type=_VALUE,
          num_clients=5,
          trials=1000,
          delta=_DELTA,
          alpha=1e-7,
      )
    self.assertTrue(honest.vectorized)
    self.assertTrue(honest.passed)
    # z = 0.1 claimed as z = 5 (eps 0.73): the canary moves the sum by 10
    # noise stds, and the 1000 runs per set show far more (as in
    # aggregator_audit_test's false claim of TFF's factory).
    with self.assertWarns(aggregator_audit.AuditFailedWarning):
      false = aggregator_audit.audit_aggregator(
          ToyGaussianFactory(0.1, 1.0, claimed_z=5.0),
          value_type=_VALUE,
          num_clients=5,
          trials=1000,
          delta=_DELTA,
      )
    self.assertTrue(false.vectorized)
    self.assertFalse(false.passed)
    self.assertGreater(false.epsilon_lower_bound, false.claimed_epsilon)


if __name__ == '__main__':
  tf.test.main()
