"""Tests of tff_priv.learning.ldp (LDP-FL weights/deltas processes, report)."""

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.accounting import closed_forms
from tff_priv.accounting import guarantees
from tff_priv.aggregators import ldp as ldp_aggregators
from tff_priv.learning import ldp as ldp_learning
from tff_priv.mechanisms import ldp as ldp_mechanisms

_DIM = 6
_CLASSES = 3
_LR = 0.1


def _model_fn():
  keras_model = tf.keras.Sequential(
      [
          tf.keras.layers.InputLayer(input_shape=(_DIM,)),
          tf.keras.layers.Dense(
              _CLASSES,
              kernel_initializer=tf.keras.initializers.RandomUniform(
                  -0.2, 0.2, seed=1
              ),
          ),
      ]
  )
  return tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(
          tf.TensorSpec([None, _DIM], tf.float32),
          tf.TensorSpec([None], tf.int32),
      ),
  )


def _client_data(num_clients, seed=0):
  """Deterministic datasets (no shuffling): local training is reproducible."""
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(num_clients):
    x = rng.normal(size=(8, _DIM)).astype(np.float32)
    y = rng.integers(0, _CLASSES, size=8).astype(np.int32)
    out.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(4))
  return out


def _sgd():
  return tff.learning.optimizers.build_sgdm(_LR)


def _trainable(process, state):
  return [np.asarray(w) for w in process.get_model_weights(state).trainable]


def _local_weights(data):
  """Each client's trained weights from the weights-mode client work."""
  work = ldp_learning.build_weights_client_work(_model_fn, _sgd())
  proc = ldp_learning.build_ldp_fl_process(
      _model_fn, client_optimizer_fn=_sgd(), epsilon=None, mode='weights'
  )
  weights = proc.get_model_weights(proc.initialize())
  output = work.next(work.initialize(), [weights] * len(data), data)
  return weights, [[np.asarray(t) for t in r.update] for r in output.result]


class LdpFlProcessTest(tf.test.TestCase, parameterized.TestCase):

  def test_noise_free_weights_mode_equals_fedavg(self):
    # Mean of the local weights = w - mean of the deltas: unweighted FedAvg
    # with server SGD lr 1. Exact up to float32 rounding.
    data = _client_data(4)
    weights_proc = ldp_learning.build_ldp_fl_process(
        _model_fn, client_optimizer_fn=_sgd(), epsilon=None, mode='weights'
    )
    fedavg = tff.learning.algorithms.build_unweighted_fed_avg(
        _model_fn,
        client_optimizer_fn=_sgd(),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
    )
    s1 = weights_proc.next(weights_proc.initialize(), data).state
    s2 = fedavg.next(fedavg.initialize(), data).state
    for a, b in zip(_trainable(weights_proc, s1), _trainable(fedavg, s2)):
      self.assertAllClose(a, b, atol=1e-6, rtol=1e-6)

  @pytest.mark.slow
  def test_client_work_returns_local_weights(self):
    # The local weights are the client's own training result: a client with
    # no data (an empty dataset) returns the global weights unchanged.
    data = _client_data(2)
    empty = data[0].take(0)
    weights, local = _local_weights([data[0], empty])
    for g, l in zip(weights.trainable, local[1]):
      self.assertAllClose(g, l)
    moved = max(
        np.max(np.abs(g - l)) for g, l in zip(weights.trainable, local[0])
    )
    self.assertGreater(moved, 1e-4)

  @pytest.mark.slow
  def test_large_epsilon_weights_mode_tracks_fedavg(self):
    # eps = 50: q = 1 + 2 / (e^50 - 1) = 1 in float, but the encoder is
    # still a two-point randomized rounding to c +- r (Lemma 3: Var = r^2 -
    # (w - c)^2), so it is NOT exact. The new model equals FedAvg's mean of
    # weights within the Lemma 4 standard deviation: every one of the d = 21
    # coordinates within 6 standard deviations (a mean of 40 independent
    # bounded reports is close to Gaussian; P(|Z| > 6) ~ 2e-9 each).
    num_clients = 40
    data = _client_data(num_clients, seed=1)
    _, local = _local_weights(data)
    radius = 0.5
    proc = ldp_learning.build_ldp_fl_process(
        _model_fn,
        client_optimizer_fn=_sgd(),
        epsilon=50.0,
        mode='weights',
        radius=radius,
    )
    tf.random.set_seed(3)
    state = proc.next(proc.initialize(), data).state
    for l, got in enumerate(_trainable(proc, state)):
      values = np.stack([c[l] for c in local])
      self.assertLess(np.max(np.abs(values)), radius)  # No clipping.
      sd = np.sqrt(ldp_mechanisms.mean_variance(values, 0.0, radius, 50.0))
      z = (got - values.mean(0)) / sd
      self.assertLess(np.max(np.abs(z)), 6.0)

  @pytest.mark.slow
  def test_weights_mode_is_unbiased(self):
    # E[new model] = mean of the local weights (Lemma 2). Repeating one round
    # R times from the same state, the average of the R new models has, per
    # coordinate, standard error sqrt(Var_Lemma4 / R); we test the mean z over
    # the d = 21 coordinates: it is N(0, 1/d) if unbiased, tolerance 5 / sqrt(d)
    # (5 standard errors), and the mean z^2 is 1 +- 5 sqrt(2 / d) if the
    # variance is Lemma 4's (chi-square, 5 standard errors).
    num_clients, repeats, eps, radius = 5, 30, 1.0, 0.5
    data = _client_data(num_clients, seed=2)
    _, local = _local_weights(data)
    proc = ldp_learning.build_ldp_fl_process(
        _model_fn,
        client_optimizer_fn=_sgd(),
        epsilon=eps,
        mode='weights',
        radius=radius,
    )
    init = proc.initialize()
    tf.random.set_seed(4)
    runs = [
        _trainable(proc, proc.next(init, data).state) for _ in range(repeats)
    ]
    zs = []
    for l in range(len(local[0])):
      values = np.stack([c[l] for c in local])
      var = ldp_mechanisms.mean_variance(values, 0.0, radius, eps).numpy()
      got = np.stack([r[l] for r in runs])
      # Single-round z per repeat, then averaged over repeats.
      zs.append(((got - values.mean(0)) / np.sqrt(var)).reshape(repeats, -1))
    z = np.concatenate(zs, axis=1)  # [repeats, d]
    d = z.shape[1]
    mean_z = z.mean(0) * np.sqrt(repeats)  # ~N(0, 1) per coordinate.
    self.assertLess(abs(mean_z.mean()), 5 / np.sqrt(d))
    self.assertAllClose(np.mean(z**2), 1.0, atol=5 * np.sqrt(2 / z.size))

  def test_deltas_mode_composes(self):
    data = _client_data(3)
    proc = ldp_learning.build_ldp_fl_process(
        _model_fn, client_optimizer_fn=_sgd(), epsilon=1.0, radius=0.05
    )
    state = proc.initialize()
    before = _trainable(proc, state)
    output = proc.next(state, data)
    after = _trainable(proc, output.state)
    agg = output.metrics['aggregator']
    self.assertAllClose(agg['radius'], [0.05, 0.05])
    self.assertAllClose(agg['center'], [0.0, 0.0])
    q = float(ldp_mechanisms.two_point_q(1.0))
    for b, a in zip(before, after):
      # w' = w - mean of reports, each report = +-r q: |w' - w| <= r q.
      self.assertLessEqual(np.max(np.abs(a - b)), 0.05 * q + 1e-6)
      self.assertGreater(np.max(np.abs(a - b)), 0.0)

  def test_weights_mode_uses_paper_range_by_default(self):
    proc = ldp_learning.build_ldp_fl_process(
        _model_fn, client_optimizer_fn=_sgd(), epsilon=2.0, mode='weights'
    )
    output = proc.next(proc.initialize(), _client_data(2))
    agg = output.metrics['aggregator']
    self.assertAllClose(
        agg['radius'], [ldp_learning.DEFAULT_WEIGHTS_RADIUS] * 2
    )
    low, high = ldp_mechanisms.output_values(0.0, 0.075, 2.0)
    for w in _trainable(proc, output.state):
      # Mean of 2 reports in {c - r q, c + r q}: one of 3 values.
      allowed = np.array([low, (low + high) / 2, high], np.float32)
      self.assertAllClose(
          np.min(np.abs(w.reshape(-1, 1) - allowed), axis=1),
          np.zeros(w.size),
          atol=1e-6,
      )

  @parameterized.named_parameters(
      ('bad_mode', dict(mode='both'), ValueError),
      ('bad_epsilon', dict(epsilon=-1.0), ValueError),
      ('bad_range_mode', dict(range_mode='median'), ValueError),
      ('bad_radius', dict(radius=0.0), ValueError),
      ('quantile_needs_clients', dict(range_mode='quantile'), ValueError),
      ('bad_optimizer', dict(client_optimizer_fn='sgd'), TypeError),
      ('bad_model_fn', dict(model_fn=3), TypeError),
  )
  def test_bad_arguments(self, override, error):
    kwargs = dict(model_fn=_model_fn, client_optimizer_fn=_sgd(), epsilon=1.0)
    kwargs.update(override)
    model_fn = kwargs.pop('model_fn')
    with self.assertRaises(error):
      ldp_learning.build_ldp_fl_process(model_fn, **kwargs)


class PrivacyReportTest(tf.test.TestCase, parameterized.TestCase):

  def test_parts_are_the_ldp_reports(self):
    report = ldp_learning.ldp_privacy_report(
        0.5, num_values=1000, rounds=7, num_clients=10**6, delta=1e-5
    )
    for rounds, part in ((1, 'per_round'), (7, 'cumulative')):
      self.assertEqual(
          report[part],
          ldp_learning.ldp_report(
              0.5,
              delta=1e-5,
              rounds=rounds,
              num_values=1000,
              num_clients=10**6,
          ),
      )

  @parameterized.parameters(1, 3, 10)
  def test_cumulative_is_rounds_times_per_round(self, rounds):
    report = ldp_learning.ldp_privacy_report(
        2.0, num_values=50, rounds=rounds, num_clients=100, delta=1e-5
    )
    self.assertEqual(
        report['cumulative']['plain_composition_epsilon'],
        rounds * report['per_round']['plain_composition_epsilon'],
    )
    self.assertEqual(
        report['per_round']['plain_composition_epsilon'],
        closed_forms.ldp_plain_composition_epsilon(2.0, 50, 1),
    )
    self.assertEqual(report['cumulative']['paper_epsilon_per_value'], 2.0)
    self.assertIn('guarantee', report['cumulative'])

  def test_shuffle_condition_reported(self):
    small = ldp_learning.ldp_privacy_report(
        1.0, num_values=10, rounds=2, num_clients=100, delta=1e-5
    )
    self.assertFalse(small['cumulative']['shuffle_applicable'])
    self.assertTrue(small['cumulative']['shuffle_reason'])
    big = ldp_learning.ldp_privacy_report(
        0.1, num_values=10, rounds=2, num_clients=10**7, delta=1e-5
    )
    self.assertTrue(big['cumulative']['shuffle_applicable'])
    self.assertEqual(
        big['cumulative']['shuffle_epsilon'],
        closed_forms.ldp_shuffle_composed(0.1, 10**7, 10, 2, 1e-5).epsilon,
    )

  def test_range_release(self):
    fixed = ldp_learning.ldp_privacy_report(
        1.0, num_values=10, rounds=2, num_clients=100, delta=1e-5
    )
    self.assertTrue(fixed['range_release']['private'])
    minmax = ldp_learning.ldp_privacy_report(
        1.0,
        num_values=10,
        rounds=2,
        num_clients=100,
        delta=1e-5,
        range_mode='minmax',
    )
    self.assertFalse(minmax['range_release']['private'])
    self.assertEqual(minmax['range_release']['epsilon'], float('inf'))
    factory = ldp_aggregators.LDPEncodeFactory(
        1.0, 'quantile', 0.0, 0.1, expected_clients_per_round=100
    )
    process = factory.create(tff.TensorType(np.float32, [10]))
    output = process.next(
        process.initialize(), [np.zeros([10], np.float32)] * 3
    )
    # The round's event: [10 eps-LDP values, the range release].
    event = guarantees.extract_dp_event(output.state).events[1]
    quantile = ldp_learning.ldp_privacy_report(
        1.0,
        num_values=10,
        rounds=2,
        num_clients=100,
        delta=1e-5,
        range_mode='quantile',
        range_event=event,
    )['range_release']
    self.assertTrue(quantile['private'])
    self.assertGreater(quantile['rdp_epsilon'], 0.0)
    # The range release adds to the values' loss, never lowers it.
    self.assertGreater(
        quantile['with_values_rdp_epsilon'],
        fixed['cumulative']['rdp_epsilon'],
    )
    with self.assertRaises(ValueError):
      ldp_learning.ldp_privacy_report(
          1.0,
          num_values=10,
          rounds=2,
          num_clients=100,
          delta=1e-5,
          range_mode='quantile',
      )

  @parameterized.named_parameters(
      ('rounds', dict(rounds=0), ValueError),
      ('range_mode', dict(range_mode='x'), ValueError),
      ('epsilon', dict(epsilon=0.0), ValueError),
      ('delta', dict(delta=2.0), ValueError),
  )
  def test_report_bad_arguments(self, override, error):
    kwargs = dict(
        epsilon=1.0, num_values=10, rounds=2, num_clients=100, delta=1e-5
    )
    kwargs.update(override)
    eps = kwargs.pop('epsilon')
    with self.assertRaises(error):
      ldp_learning.ldp_privacy_report(eps, **kwargs)


if __name__ == '__main__':
  tf.test.main()
