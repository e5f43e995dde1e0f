"""Tests of tff_priv.learning.client_metrics: the noised client metrics."""

import collections

from dp_accounting import dp_event
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.learning import client_metrics

# A Keras model's unfinalized metrics (tff.learning.models.from_keras_model).
_TYPE = collections.OrderedDict(
    sparse_categorical_accuracy=[np.float32, np.float32],
    loss=[np.float32, np.float32],
    num_examples=[np.int64],
    num_batches=[np.int64],
)
_NAMES = collections.OrderedDict((k, None) for k in _TYPE)
# (mean loss, correct, examples) of each client; the last loss is clipped.
_CLIENTS = ((0.5, 3.0, 4.0), (1.0, 1.0, 2.0), (9.0, 0.0, 5.0))
_BOUND = 2.0
_K = 4.0


def _metrics(loss, correct, examples):
  return collections.OrderedDict(
      sparse_categorical_accuracy=[correct, examples],
      loss=[loss * examples, examples],
      num_examples=[int(examples)],
      num_batches=[1],
  )


def _computation(aggregator, metric_type=_TYPE):
  polymorphic = aggregator(
      collections.OrderedDict((k, None) for k in metric_type)
  )
  return tff.federated_computation(
      lambda metrics: polymorphic(metrics),  # noqa: PLW0108 (TFF reads its parameter)
      tff.FederatedType(metric_type, tff.CLIENTS),
  )


# The clipped means by hand: sum of min(loss, L) / K, sum of accuracies / K.
_EXACT = {
    client_metrics.DP_LOSS: (0.5 + 1.0 + _BOUND) / _K,
    client_metrics.DP_ACCURACY: (3 / 4 + 1 / 2 + 0) / _K,
    client_metrics.DP_CLIENTS: 3.0,
}


class DpClientMetricsTest(tf.test.TestCase):

  def test_without_noise_releases_the_clipped_means_over_k(self):
    aggregator = client_metrics.dp_client_metrics(0.0, _K, _BOUND)
    out = _computation(aggregator)([_metrics(*c) for c in _CLIENTS])
    self.assertEqual(list(out), list(_EXACT))
    for key, value in _EXACT.items():
      self.assertAllClose(out[key], value, rtol=1e-6)

  @pytest.mark.slow
  def test_noise_has_the_stated_std(self):
    # TFF's DP factory draws unseeded noise: the test is statistical. With
    # 3 x 150 standardised residuals, the mean is within 0.35 (> 6 standard
    # errors) and the sample std within 15% (> 4.5 standard errors) of N(0, 1)
    # but for a chance below 1e-5.
    aggregator = client_metrics.dp_client_metrics(1.5, _K, _BOUND)
    stddevs = aggregator.stddevs()
    self.assertAllClose(
        stddevs[client_metrics.DP_ACCURACY], 1.5 * np.sqrt(3) / _K
    )
    self.assertAllClose(
        stddevs[client_metrics.DP_LOSS], _BOUND * 1.5 * np.sqrt(3) / _K
    )
    self.assertAllClose(stddevs[client_metrics.DP_CLIENTS], 1.5 * np.sqrt(3))
    computation = _computation(aggregator)
    data = [_metrics(*c) for c in _CLIENTS]
    residuals = []
    for _ in range(150):
      out = computation(data)
      residuals.append([(out[k] - _EXACT[k]) / stddevs[k] for k in _EXACT])
    residuals = np.asarray(residuals)
    self.assertLess(abs(residuals.mean()), 0.35)
    self.assertAllClose(residuals.std(), 1.0, atol=0.15)
    # Independent coordinates: not one draw scaled three ways.
    self.assertLess(abs(np.corrcoef(residuals.T)[0, 1]), 0.35)

  def test_event_and_sensitivity(self):
    aggregator = client_metrics.dp_client_metrics(0.7, _K, _BOUND)
    self.assertEqual(aggregator.dp_event, dp_event.GaussianDpEvent(0.7))
    self.assertAllClose(aggregator.sensitivity, np.sqrt(3))

  def test_refuses_a_loss_that_is_not_a_mean(self):
    metric_type = collections.OrderedDict(
        accuracy=[np.float32, np.float32], loss=[np.float32]
    )
    with self.assertRaisesRegex(ValueError, "'loss' as a \\(total, count\\)"):
      _computation(
          client_metrics.dp_client_metrics(1.0, _K, _BOUND), metric_type
      )

  def test_refuses_bad_parameters(self):
    for args in ((-1.0, _K, _BOUND), (1.0, 0.0, _BOUND), (1.0, _K, 0.0)):
      with self.assertRaises(ValueError):
        client_metrics.dp_client_metrics(*args)


if __name__ == "__main__":
  tf.test.main()
