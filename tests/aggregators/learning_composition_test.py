"""tff_priv's factories compose with tff.learning's FedAvg builders."""

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.accounting import ledger as ledger_lib
from tff_priv.accounting import wrapped_states
from tff_priv.aggregators import distortion
from tff_priv.aggregators import dp_fedavg
from tff_priv.aggregators import udp
from tff_priv.learning import client_metrics
import tff_priv_tasks as tasks


def _task():
  return tasks.get_task(
      'digits',
      train_client_spec=tff.simulation.baselines.ClientSpec(
          num_epochs=1, batch_size=16
      ),
  )


def _client_data(task, n):
  train = task.datasets.train_data
  return [
      task.datasets.train_preprocess_fn(train.create_tf_dataset_for_client(c))
      for c in train.client_ids[:n]
  ]


class LearningCompositionTest(tf.test.TestCase):
  """As in the README quickstart."""

  def _train(self, build, aggregator, rounds=2, record=None):
    task = _task()
    process = build(
        task.model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        model_aggregator=aggregator,
        metrics_aggregator=client_metrics.no_client_metrics,
    )
    state = process.initialize()
    data = _client_data(task, 4)
    before = process.get_model_weights(state)
    for _ in range(rounds):
      output = process.next(state, data)
      state = output.state
      if record is not None:
        record(output)
    after = process.get_model_weights(state)
    moved = [
        np.linalg.norm(a - b) for a, b in zip(after.trainable, before.trainable)
    ]
    self.assertGreater(max(moved), 0.0)
    for w in after.trainable:
      self.assertTrue(np.all(np.isfinite(w)))
    return output.metrics

  def test_weighted_fed_avg_with_gaussian_udp(self):
    metrics = self._train(
        tff.learning.algorithms.build_weighted_fed_avg,
        udp.GaussianUDPFactory(noise_stddev=0.01, sensitivity=0.1),
    )
    self.assertAllClose(metrics['aggregator']['noise']['noise_stddev'], 0.01)

  def test_unweighted_fed_avg_with_distortion(self):
    metrics = self._train(
        tff.learning.algorithms.build_unweighted_fed_avg,
        distortion.DistortionFactory(target_tv=0.3, parameter_variance=1e-4),
    )
    self.assertAllClose(metrics['aggregator']['noise']['tv_upper'], 0.3)

  def test_the_ledger_charges_a_round_from_its_output(self):
    ledger = ledger_lib.PrivacyLedger()
    factory = dp_fedavg.calibrated(
        8.0, total_rounds=2, population=10, clients_per_round=4
    )
    self._train(
        tff.learning.algorithms.build_unweighted_fed_avg,
        factory,
        record=lambda o: ledger.record_round(o, sampling_probability=0.4),
    )
    self.assertEqual(ledger.num_releases, 2)
    self.assertBetween(ledger.epsilon(1e-5), 7.9, 8.0 + 1e-6)

  def test_the_ledger_refuses_debug_measurements_in_an_output(self):
    # add_debug_measurements leaves the state as it is: the ledger sees its
    # exact client norms in the round's output.
    ledger = ledger_lib.PrivacyLedger()
    factory = tff.learning.add_debug_measurements(
        dp_fedavg.calibrated(
            8.0, total_rounds=2, population=10, clients_per_round=4
        )
    )
    with self.assertRaisesRegex(
        wrapped_states.UnnoisedWrapperError, 'average_client_norm'
    ):
      self._train(
          tff.learning.algorithms.build_unweighted_fed_avg,
          factory,
          rounds=1,
          record=lambda o: ledger.record_round(o, sampling_probability=0.4),
      )
    self.assertEqual(ledger.num_releases, 0)


if __name__ == '__main__':
  tf.test.main()
