"""Tests for tff_priv.mechanisms.split_shuffle (LDP-FL's split and shuffle).

Fixed seeds throughout. Statistical checks state their tolerance: 5 standard
errors, or a Kolmogorov-Smirnov p-value above 1e-4.
"""

import collections
import math
import warnings

from absl.testing import parameterized
import numpy as np
from scipy import stats
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.aggregators import ldp_encode as ldp_aggregators
from tff_priv.mechanisms import ldp_encode
from tff_priv.mechanisms import split_shuffle


def _encoded_reports(num_clients, shapes, seed, nan_fraction=0.0):
  """Per-client lists of encoded tensors (two-point values, NaN = no report)."""
  rng = np.random.default_rng(seed)
  reports = []
  for u in range(num_clients):
    report = []
    for l, shape in enumerate(shapes):
      w = rng.normal(0.0, 0.5, size=shape).astype(np.float32)
      w[rng.random(size=shape) < nan_fraction] = np.nan
      enc = ldp_encode.encode(
          w, 0.1 * l, 1.0 + l, 1.0, tf.constant([seed, 100 * u + l], tf.int64)
      ).encoded.numpy()
      report.append(enc)
    reports.append(report)
  return reports


class SplitTest(tf.test.TestCase, parameterized.TestCase):

  def test_one_message_per_finite_scalar(self):
    encoded = collections.OrderedDict(
        a=np.array([[1.0, np.nan], [3.0, 4.0]], np.float32),
        b=np.array([5.0, np.inf, 7.0], np.float32),
    )
    m = split_shuffle.split(encoded, 0, max_delay=2.0)
    got = sorted(zip(m.tensor_id, m.flat_index, m.value))
    self.assertEqual(
        got, [(0, 0, 1.0), (0, 2, 3.0), (0, 3, 4.0), (1, 0, 5.0), (1, 2, 7.0)]
    )
    self.assertEqual(m.tensor_id.dtype, np.int32)
    self.assertEqual(m.flat_index.dtype, np.int32)
    self.assertEqual(m.value.dtype, np.float32)

  def test_send_times_are_sorted_uniform_and_unrelated_to_position(self):
    d, t = 100_000, 3.0
    m = split_shuffle.split([np.zeros([d], np.float32)], 7, max_delay=t)
    self.assertTrue(np.all(np.diff(m.send_time) >= 0))
    self.assertAllInRange(m.send_time, 0.0, t)
    self.assertGreater(stats.kstest(m.send_time / t, 'uniform').pvalue, 1e-4)
    # The position of a scalar says nothing about when it is sent: rank
    # correlation ~ 0 with standard error 1 / sqrt(d).
    rho = stats.spearmanr(m.flat_index, m.send_time)[0]
    self.assertLess(abs(rho), 5 / math.sqrt(d))

  def test_same_seed_same_messages(self):
    x = [np.arange(10, dtype=np.float32)]
    a, b = split_shuffle.split(x, 3, 1.0), split_shuffle.split(x, 3, 1.0)
    for fa, fb in zip(a, b):
      self.assertAllEqual(fa, fb)

  @parameterized.parameters(0.0, -1.0, math.inf, math.nan)
  def test_bad_max_delay(self, max_delay):
    with self.assertRaisesRegex(ValueError, 'max_delay'):
      split_shuffle.split([np.zeros(3)], 0, max_delay)


class MergeAndAverageTest(tf.test.TestCase):

  def test_merge_is_time_ordered_and_keeps_every_message(self):
    clients = [
        split_shuffle.split([np.full([500], u, np.float32)], u, 1.0)
        for u in range(4)
    ]
    merged = split_shuffle.merge(clients)
    self.assertLen(merged, 2000)
    self.assertTrue(np.all(np.diff(merged.send_time) >= 0))
    self.assertCountEqual(
        zip(merged.flat_index, merged.value),
        [(i, v) for c in clients for i, v in zip(c.flat_index, c.value)],
    )
    # Clients interleave: in the first half of the stream every client has
    # about a quarter of the messages (binomial, 5 standard errors).
    first = merged.value[:1000]
    for u in range(4):
      self.assertNear(np.mean(first == u), 0.25, 5 * math.sqrt(0.1875 / 1000))

  def test_average_by_id_is_the_mean_of_received_values(self):
    shapes = [(3, 2), (4,)]
    reports = _encoded_reports(5, shapes, seed=1, nan_fraction=0.3)
    for r in reports:
      r[1][0] = np.nan  # nobody reports tensor 1, index 0
    reports[0][1][:] = np.nan  # client 0 reports nothing of tensor 1
    merged = split_shuffle.merge(
        [split_shuffle.split(r, u, 1.0) for u, r in enumerate(reports)]
    )
    means = split_shuffle.average_by_id(merged, shapes)
    for l, shape in enumerate(shapes):
      stacked = np.stack([r[l] for r in reports]).astype(np.float64)
      with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)  # all-NaN columns
        expected = np.nan_to_num(np.nanmean(stacked, axis=0), nan=0.0)
      self.assertEqual(means[l].shape, shape)
      self.assertAllClose(means[l], expected, rtol=1e-6, atol=1e-7)
    self.assertEqual(means[1][0], 0.0)

  def test_average_by_id_rejects_messages_outside_shapes(self):
    m = split_shuffle.split([np.zeros([4], np.float32)], 0, 1.0)
    with self.assertRaisesRegex(ValueError, 'flat_index'):
      split_shuffle.average_by_id(m, [(3,)])
    with self.assertRaisesRegex(ValueError, 'tensor_id'):
      split_shuffle.average_by_id(m, [])


class EquivalenceWithFactoryTest(tf.test.TestCase):

  def test_equals_the_factorys_mean_of_the_same_reports(self):
    shapes = [(20, 3), (7,), (2, 2, 2)]
    num_clients = 9
    reports = _encoded_reports(num_clients, shapes, seed=5, nan_fraction=0.1)
    value_type = tff.StructWithPythonType(
        [tff.TensorType(np.float32, s) for s in shapes], list
    )
    process = ldp_aggregators.ReportMeanFactory().create(value_type)
    output = process.next(process.initialize(), reports)

    merged = split_shuffle.merge(
        [split_shuffle.split(r, 10 + u, 5.0) for u, r in enumerate(reports)]
    )
    means = split_shuffle.average_by_id(merged, shapes)
    # Same reports, same rule. TFF sums in float32, average_by_id in float64:
    # the results differ by the float32 rounding of a sum of at most n terms,
    # n * 2^-24 * max|report| / (reports at the coordinate) <= n * 2^-24 * max.
    max_abs = max(np.nanmax(np.abs(r)) for rep in reports for r in rep)
    tol = num_clients * 2.0**-24 * max_abs
    for got, expected in zip(output.result, means):
      self.assertAllClose(got, expected, rtol=0, atol=tol)
    expected_missing = [
        sum(int(np.isnan(rep[l]).sum()) for rep in reports)
        for l in range(len(shapes))
    ]
    self.assertAllEqual(
        output.measurements['missing_count'], expected_missing
    )
    self.assertEqual(
        len(merged),
        sum(np.prod(s) for s in shapes) * num_clients
        - sum(expected_missing),
    )


if __name__ == '__main__':
  tf.test.main()
