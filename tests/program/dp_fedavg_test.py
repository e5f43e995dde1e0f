"""Tests for dp_fedavg: adaptive clipping, a resumed state (`adopt_state`)."""

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import runtime
from tff_priv.accounting import guarantees
from tff_priv.aggregators import dp_fedavg
from tff_priv.program import registry


class AdaptiveClipTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    runtime.set_context('simulation')

  def test_one_clip_and_the_flag_where_it_applies(self):
    config = registry.config('dp_fedavg', {'adaptive_clip_quantile': 0.8})
    self.assertEqual(config.adaptive_clip_quantile, 0.8)
    with self.assertRaisesRegex(ValueError, 'not both'):
      registry.config('dp_fedavg', {'clip': 1.0, 'adaptive_clip_quantile': 0.5})
    with self.assertRaisesRegex(ValueError, 'adaptive_clip_quantile'):
      registry.config('dp_fedavg', {'adaptive_clip_quantile': 1.5})
    # BLT's sensitivity is for a clip fixed over its stream.
    with self.assertRaisesRegex(
        ValueError, "adaptive_clip_quantile does not apply to mechanism 'blt'"
    ):
      registry.config('blt', {'adaptive_clip_quantile': 0.5})

  def test_a_resumed_adaptive_state_keeps_its_clip_at_the_new_noise(self):
    value = tff.TensorType(np.float32, [3])

    def process(z):
      return tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
          z, 100.0
      ).create(value)

    old, new = process(0.8), process(1.2)
    state = old.next(old.initialize(), [np.full(3, 5.0, np.float32)] * 3).state
    learning = tff.learning.templates.LearningAlgorithmState(
        global_model_weights=(),
        distributor=(),
        client_work=(),
        aggregator=state,
        finalizer=(),
    )
    adopted = dp_fedavg.adopt_state(
        learning, learning._replace(aggregator=new.initialize())
    ).aggregator
    numerator = adopted.query_state.numerator_state
    before = state.query_state.numerator_state
    # The clip the run has learnt, at the new noise.
    self.assertAllClose(
        numerator.quantile_estimator_state.current_estimate,
        before.quantile_estimator_state.current_estimate,
    )
    self.assertAllClose(
        numerator.sum_state.l2_norm_clip, before.sum_state.l2_norm_clip
    )
    self.assertAllClose(
        numerator.sum_state.stddev,
        numerator.noise_multiplier * numerator.sum_state.l2_norm_clip,
    )
    self.assertGreater(numerator.noise_multiplier, before.noise_multiplier)
    # The next round charges the new noise.
    after = new.next(adopted, [np.ones(3, np.float32)] * 3).state
    self.assertEqual(
        guarantees.extract_dp_event(after),
        guarantees.extract_dp_event(
            new.next(new.initialize(), [np.ones(3, np.float32)]).state
        ),
    )


if __name__ == '__main__':
  tf.test.main()
