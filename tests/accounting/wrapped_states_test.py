"""The ledger on TFF's wrapped DP aggregators and stream states (own loops)."""

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_priv import runtime
from tff_priv.accounting import guarantees
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.accounting import wrapped_states
from tff_priv.aggregators import blt
from tff_priv.aggregators import dp_ftrl
from tff_priv.aggregators import smp as smp_aggregators

_TYPE = tff.TensorType(np.float32, [3])
_VALUES = [np.ones(3, np.float32), np.full(3, 9.0, np.float32)]


def _next(factory):
  process = factory.create(_TYPE)
  return process.next(process.initialize(), _VALUES)


class WrappedDpFactoryTest(tf.test.TestCase):
  """TFF's wrapped DP aggregators, charged exactly or refused in one line.

  TFF's usual DP path, `tff.learning.dp_aggregator`, with and without its
  default adaptive zeroing; TFF's zeroing and clipping wrappers with a public
  norm; `add_debug_measurements`. Each is charged exactly or refused in one line
  naming the fix.
  """

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    runtime.set_context('simulation')

  def test_dp_aggregator_without_zeroing_is_charged(self):
    output = _next(tff.learning.dp_aggregator(1.0, 100.0, zeroing=False))
    ledger = ledger_lib.PrivacyLedger()
    event = ledger.record_round(output.state, sampling_probability=0.1)
    inner = tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
        1.0, 100.0
    )
    self.assertEqual(
        event,
        dp_accounting.PoissonSampledDpEvent(
            0.1, guarantees.extract_dp_event(_next(inner).state)
        ),
    )
    self.assertEqual(
        wrapped_states.public_measurement_paths(
            output.state, output.measurements, 'tff_dp'
        ),
        {('dp_query_metrics', 'clip')},
    )

  def test_dp_aggregator_with_its_default_zeroing_is_refused(self):
    output = _next(tff.learning.dp_aggregator(1.0, 100.0))
    with self.assertRaisesRegex(
        wrapped_states.UnnoisedWrapperError,
        r'zeroing tracks its norm .* without noise .* zeroing=False',
    ) as refused:
      ledger_lib.PrivacyLedger().record_round(
          output.state, sampling_probability=0.1
      )
    self.assertNotIn('\n', str(refused.exception))
    with self.assertRaises(wrapped_states.UnnoisedWrapperError):
      wrapped_states.public_measurement_paths(
          output.state, output.measurements, 'tff_dp'
      )

  def test_public_zeroing_and_clipping_norms_are_seen_through(self):
    dp = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        1.0, 2.0, 1.0
    )
    for wrap, count in (
        (tff.aggregators.zeroing_factory, 'zeroed_count'),
        (tff.aggregators.clipping_factory, 'clipped_count'),
    ):
      with self.subTest(count):
        output = _next(wrap(5.0, dp))
        ledger = ledger_lib.PrivacyLedger()
        self.assertEqual(
            ledger.record_round(output.state, sampling_probability=0.5),
            dp_accounting.PoissonSampledDpEvent(
                0.5, dp_accounting.GaussianDpEvent(1.0)
            ),
        )
        paths = wrapped_states.public_measurement_paths(
            output.state, output.measurements, 'tff_dp'
        )
        # The public norm stays, the exact count of clients goes.
        norm = 'zeroing_norm' if count == 'zeroed_count' else 'clipping_norm'
        self.assertEqual(paths, {(norm,)})
        self.assertIn(count, output.measurements)

  def test_a_tff_priv_factory_inside_public_zeroing_is_charged(self):
    smp = smp_aggregators.SparsifiedSecureSumFactory(
        1.5, 1.0, 1.0, 2.0, secure=False
    )
    output = _next(tff.aggregators.zeroing_factory(5.0, smp))
    self.assertEqual(
        ledger_lib.PrivacyLedger().record_round(
            output.state, sampling_probability=0.5
        ),
        dp_accounting.PoissonSampledDpEvent(
            0.5, guarantees.extract_dp_event(_next(smp).state)
        ),
    )
    paths = wrapped_states.public_measurement_paths(
        output.state, output.measurements, 'tff_priv'
    )
    self.assertIn(('zeroing_norm',), paths)
    self.assertNotIn(('zeroed_count',), paths)
    self.assertIn('zeroed_count', output.measurements)

  def test_a_noised_zeroing_norm_is_charged(self):
    # A quantile of the clients' norms estimated with a Gaussian count (std
    # 2 on records of sensitivity 0.5: multiplier 4), around TFF's DP factory.
    quantile = tff.aggregators.PrivateQuantileEstimationProcess(
        tfp.QuantileEstimatorQuery(
            initial_estimate=5.0,
            target_quantile=0.9,
            learning_rate=0.2,
            below_estimate_stddev=2.0,
            expected_num_records=2.0,
            geometric_update=True,
        )
    )
    dp = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        1.0, 2.0, 1.0
    )
    output = _next(tff.aggregators.zeroing_factory(quantile, dp))
    self.assertEqual(
        ledger_lib.PrivacyLedger().record_round(output.state),
        dp_accounting.ComposedDpEvent(
            [
                dp_accounting.GaussianDpEvent(1.0),
                dp_accounting.GaussianDpEvent(4.0),
            ]
        ),
    )
    # Around another factory (whose noise may be added by the clients, or
    # hold under another relation) the server's count is not charged as if
    # it were the factory's: refused.
    smp = smp_aggregators.SparsifiedSecureSumFactory(
        1.0, 1.0, 1.0, 2.0, secure=False
    )
    output = _next(tff.aggregators.zeroing_factory(quantile, smp))
    with self.assertRaisesRegex(
        wrapped_states.UnnoisedWrapperError,
        "around TFF's DifferentiallyPrivateFactory",
    ):
      ledger_lib.PrivacyLedger().record_round(output.state)

  def test_debug_measurements_are_refused(self):
    dp = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        1.0, 2.0, 1.0
    )
    output = _next(tff.learning.add_debug_measurements(dp))
    # The state is the DP factory's: the round itself is charged exactly.
    self.assertEqual(
        ledger_lib.PrivacyLedger().record_round(output.state),
        dp_accounting.GaussianDpEvent(1.0),
    )
    with self.assertRaisesRegex(
        wrapped_states.UnnoisedWrapperError,
        r'average_client_norm, std_dev_client_norm .* exact',
    ):
      wrapped_states.public_measurement_paths(
          output.state, output.measurements, 'tff_dp'
      )


class StreamStateTest(tf.test.TestCase):
  """BLT and tree streams recorded with sampling arguments.

  Each is charged exactly or refused in one line naming the fix.
  """

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    runtime.set_context('simulation')

  @pytest.mark.slow
  def test_streams_are_known_and_refuse_sampling(self):
    factories = {
        'BLTFactory': blt.BLTFactory(1.0, 2, 1.0, [0.9], [0.5], 10),
        'TreeRestartFactory': dp_ftrl.TreeRestartFactory(1.0, 2, 1.0, 10),
    }
    for name, factory in factories.items():
      with self.subTest(name):
        state = _next(factory).state
        # Known without being told its relation.
        self.assertEqual(guarantees.relation_of_state(state), 'replace_special')
        ledger = ledger_lib.PrivacyLedger()
        ledger.record_round(state)
        self.assertEqual(ledger.neighboring_relation, 'replace_special')
        for sampling in (
            dict(sampling_probability=0.1),
            dict(population=100, sample_size=10),
        ):
          with self.assertRaisesRegex(
              ValueError,
              rf'{name} claims no amplification .* without '
              'sampling arguments.*StreamSampler',
          ):
            ledger.record_round(state, **sampling)
          with self.assertRaisesRegex(ValueError, 'no amplification'):
            ledger.record_round(
                state, neighboring_relation='replace_special', **sampling
            )
        self.assertEqual(ledger.num_releases, 1)
        # Inside TFF's clipping wrapper (a public norm): still a stream.
        wrapped = _next(tff.aggregators.clipping_factory(5.0, factory)).state
        with self.assertRaisesRegex(ValueError, 'no amplification'):
          ledger.record_round(wrapped, sampling_probability=0.1)


if __name__ == '__main__':
  tf.test.main()
