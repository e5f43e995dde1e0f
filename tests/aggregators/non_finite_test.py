"""Every tff_priv factory and the dp client metrics with a NaN or inf client."""

import collections
import functools

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.aggregators import distortion
from tff_priv.aggregators import dp_ftrl
from tff_priv.aggregators import smp as smp_aggregators
from tff_priv.aggregators import udp
from tff_priv.learning import client_metrics
from tff_priv.mechanisms import clipping
from tff_priv.mechanisms import smp as smp_mechanisms

_D = 6
_TYPE = tff.TensorType(np.float32, [_D])
_GOOD = [np.full(_D, 0.1, np.float32), np.full(_D, -0.2, np.float32)]
_BAD = {
    'nan': np.array([np.nan] + [0.3] * (_D - 1), np.float32),
    'inf': np.array([np.inf] + [0.3] * (_D - 1), np.float32),
}


def _factories(noise):
  """name -> (factory, weighted); noise 0 makes the result exact."""
  return {
      'udp_weighted': (udp.GaussianUDPFactory(noise, sensitivity=1.0), True),
      'udp_unweighted': (
          udp.GaussianUDPFactory(
              noise,
              sensitivity=1.0,
              inner_agg_factory=tff.aggregators.UnweightedMeanFactory(),
          ),
          False,
      ),
      'smp_central': (
          smp_aggregators.SparsifiedSecureSumFactory(
              noise_multiplier=noise,
              clip=1.0,
              compression=1.0,
              expected_clients_per_round=3,
              secure=False,
          ),
          False,
      ),
      'distortion': (
          distortion.DistortionFactory(
              noise_stddev=noise, parameter_variance=1.0, clip=1.0
          ),
          False,
      ),
      'dp_ftrl': (
          dp_ftrl.TreeRestartFactory(max(noise, 1e-9), 3, 1.0, 2, noise_seed=1),
          False,
      ),
  }


def _result(factory, weighted, values):
  process = (
      factory.create(_TYPE)
      if not weighted
      else factory.create(_TYPE, tff.TensorType(np.float32))
  )
  args = [process.initialize(), values]
  if weighted:
    args.append([1.0] * len(values))
  output = process.next(*args)
  return np.asarray(output.result), output.measurements


class NonFiniteTest(tf.test.TestCase, parameterized.TestCase):
  """Each factory, and the metrics, stay finite with a NaN or inf client.

  tff_priv's one policy (`tff_priv.mechanisms.clipping`): a client whose value
  is not finite contributes zeros. An aggregate that turned NaN exactly when one
  client sent NaN would identify that client (eps = infinity for that
  neighbour); here each one stays finite and equals its all-zeros-client run in
  the noise-free case.
  """

  @parameterized.product(
      name=(
          'udp_weighted',
          'udp_unweighted',
          'smp_central',
          'distortion',
          'dp_ftrl',
      ),
      bad=('nan', 'inf'),
  )
  @pytest.mark.slow
  def test_a_non_finite_client_contributes_zeros(self, name, bad):
    exact, weighted = _factories(0.0)[name]
    got, measurements = _result(exact, weighted, _GOOD + [_BAD[bad]])
    zeros, _ = _result(
        _factories(0.0)[name][0],
        weighted,
        _GOOD + [np.zeros(_D, np.float32)],
    )
    self.assertTrue(np.all(np.isfinite(got)), got)
    self.assertAllClose(got, zeros, atol=1e-6)
    for leaf in tf.nest.flatten(
        tff.structure.to_odict_or_tuple(
            tff.structure.from_container(measurements, recursive=True)
        )
    ):
      if np.issubdtype(np.asarray(leaf).dtype, np.floating):
        self.assertTrue(np.all(np.isfinite(leaf)))
    noised, weighted = _factories(1.0)[name]
    got, _ = _result(noised, weighted, _GOOD + [_BAD[bad]])
    self.assertTrue(np.all(np.isfinite(got)), got)

  @pytest.mark.slow
  def test_smp_drops_a_client_whose_nan_the_mask_drops(self):
    # rand_k keeps k of d coordinates: a client whose NaN sits in a dropped
    # coordinate contributes zeros too (its kept values are not sent).
    seed, k = 5, smp_mechanisms.num_kept(_D, 0.5)
    kept = set(
        smp_mechanisms.rand_k_indices(
            smp_mechanisms.round_seed(tf.constant([seed, 0], tf.int64), 0),
            _D,
            k,
        )
        .numpy()
        .tolist()
    )
    dropped = min(set(range(_D)) - kept)
    bad = np.full(_D, 0.3, np.float32)
    bad[dropped] = np.nan
    for secure in (False, True):
      factory = functools.partial(
          smp_aggregators.SparsifiedSecureSumFactory,
          noise_multiplier=0.0,
          clip=1.0,
          compression=0.5,
          expected_clients_per_round=3,
          secure=secure,
          mask_seed=seed,
      )
      # The round's mask does drop that coordinate (and keeps the others).
      finite, _ = _result(
          factory(), False, _GOOD + [np.full(_D, 0.3, np.float32)]
      )
      self.assertEqual(float(np.asarray(finite).ravel()[dropped]), 0.0)
      self.assertNotEqual(float(np.asarray(finite).ravel()[min(kept)]), 0.0)
      got, _ = _result(factory(), False, _GOOD + [bad])
      zeros, _ = _result(factory(), False, _GOOD + [np.zeros(_D, np.float32)])
      self.assertAllClose(got, zeros, atol=1e-6, msg=f'secure={secure}')

  def test_clip_l2_policy(self):
    nested = collections.OrderedDict(
        a=tf.constant([3.0, 4.0]), b=tf.constant([np.nan])
    )
    out = clipping.clip_l2(nested, 1.0)
    self.assertAllEqual(out['a'], [0.0, 0.0])
    self.assertAllEqual(out['b'], [0.0])
    self.assertAllClose(
        clipping.clip_l2(tf.constant([3.0, 4.0]), 1.0), [0.6, 0.8]
    )
    self.assertAllClose(
        clipping.clip_l2(tf.constant([3.0, 4.0]), None), [3.0, 4.0]
    )
    self.assertAllEqual(
        clipping.clip_l2(tf.constant([np.inf, 1.0]), None), [0.0, 0.0]
    )

  def test_dp_client_metrics_with_a_nan_loss(self):
    metric_type = collections.OrderedDict(
        sparse_categorical_accuracy=[np.float32, np.float32],
        loss=[np.float32, np.float32],
        num_examples=[np.int64],
    )
    polymorphic = client_metrics.dp_client_metrics(0.0, 3.0, 2.0)(
        collections.OrderedDict((k, None) for k in metric_type)
    )
    computation = tff.federated_computation(
        lambda m: polymorphic(m),  # noqa: PLW0108 (TFF reads its parameter)
        tff.FederatedType(metric_type, tff.CLIENTS),
    )

    def client(loss, correct, examples):
      return collections.OrderedDict(
          sparse_categorical_accuracy=[correct, examples],
          loss=[loss * examples, examples],
          num_examples=[int(examples)],
      )

    out = computation([client(0.5, 3.0, 4.0), client(np.nan, 1.0, 2.0)])
    # The NaN client contributes zeros: loss 0.5 / 3, accuracy 0.75 / 3, and
    # it is not counted.
    self.assertAllClose(out[client_metrics.DP_LOSS], 0.5 / 3, rtol=1e-6)
    self.assertAllClose(out[client_metrics.DP_ACCURACY], 0.75 / 3, rtol=1e-6)
    self.assertAllClose(out[client_metrics.DP_CLIENTS], 1.0, rtol=1e-6)


if __name__ == '__main__':
  tf.test.main()
