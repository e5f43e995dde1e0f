"""Tests for tff_priv.mechanisms.split_shuffle (LDP-FL's split and shuffle)."""

import collections
import itertools
import math
from unittest import mock
import warnings

from absl.testing import parameterized
import numpy as np
from scipy import stats
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.aggregators import ldp as ldp_aggregators
from tff_priv.mechanisms import ldp as ldp_mechanisms
from tff_priv.mechanisms import split_shuffle

_P_MIN = 1e-4


def _encoded_reports(num_clients, shapes, seed, nan_fraction=0.0):
  """Per-client lists of encoded tensors (two-point values, NaN = no report)."""
  rng = np.random.default_rng(seed)
  reports = []
  for u in range(num_clients):
    report = []
    for l, shape in enumerate(shapes):
      w = rng.normal(0.0, 0.5, size=shape).astype(np.float32)
      w[rng.random(size=shape) < nan_fraction] = np.nan
      enc = ldp_mechanisms.encode(
          w, 0.1 * l, 1.0 + l, 1.0, tf.constant([seed, 100 * u + l], tf.int64)
      ).encoded.numpy()
      report.append(enc)
    reports.append(report)
  return reports


def _tagged_clients(sizes):
  """One flat tensor per client; value = the message's index in all messages."""
  starts = np.cumsum([0] + list(sizes))
  return [
      split_shuffle.split([np.arange(a, b, dtype=np.float32)])
      for a, b in zip(starts[:-1], starts[1:])
  ]


class SplitTest(tf.test.TestCase):

  def test_one_message_per_finite_scalar_in_id_order(self):
    encoded = collections.OrderedDict(
        a=np.array([[1.0, np.nan], [3.0, 4.0]], np.float32),
        b=np.array([5.0, np.inf, 7.0], np.float32),
    )
    m = split_shuffle.split(encoded)
    self.assertEqual(
        list(zip(m.tensor_id, m.flat_index, m.value)),
        [(0, 0, 1.0), (0, 2, 3.0), (0, 3, 4.0), (1, 0, 5.0), (1, 2, 7.0)],
    )
    self.assertLen(m, 5)
    self.assertIsNone(m.send_time)
    self.assertEqual(m.tensor_id.dtype, np.int32)
    self.assertEqual(m.flat_index.dtype, np.int32)
    self.assertEqual(m.value.dtype, np.float32)

  def test_finite_reports_share_read_only_ids(self):
    a = split_shuffle.split([np.zeros([2, 3], np.float32), np.ones([4])])
    b = split_shuffle.split([np.ones([2, 3], np.float32), np.zeros([4])])
    self.assertIs(a.tensor_id, b.tensor_id)
    self.assertIs(a.flat_index, b.flat_index)
    self.assertFalse(a.flat_index.flags.writeable)
    self.assertAllEqual(a.flat_index, [0, 1, 2, 3, 4, 5, 0, 1, 2, 3])

  def test_empty_structure(self):
    with self.assertRaisesRegex(ValueError, 'encoded'):
      split_shuffle.split([])


class MergeTest(tf.test.TestCase, parameterized.TestCase):
  """The merge of the clients' messages into one shuffled stream.

  Fixed seeds throughout. Statistical checks state their tolerance: 5 standard
  errors, or a goodness-of-fit p-value (chi-square, Kolmogorov-Smirnov) above
  1e-4, i.e. a correct sampler fails a given check for a given seed with
  probability 1e-4.
  """

  @parameterized.parameters(1, 7, 300, 10**6)
  def test_every_message_arrives_exactly_once(self, chunk_size):
    # 1 -> 1,000 chunks (16-bit labels), 7 -> 143, 300 -> 4, 10^6 -> 1.
    clients = _tagged_clients([400, 0, 250, 350])
    merged = split_shuffle.merge(clients, 11, 2.0, chunk_size)
    self.assertLen(merged, 1000)
    self.assertAllEqual(np.sort(merged.value), np.arange(1000))
    # Ids travel with their value: value v of a client whose first value is
    # s is its scalar v - s (client 1 sent nothing).
    starts = np.array([0, 400, 650])
    owner = np.searchsorted(starts, merged.value, 'right') - 1
    self.assertAllEqual(merged.flat_index, merged.value - starts[owner])
    self.assertAllEqual(merged.tensor_id, np.zeros(1000))

  @parameterized.parameters(1, 13, 10**6)
  def test_send_times_non_decreasing_and_uniform(self, chunk_size):
    t = 3.0
    clients = _tagged_clients([20_000, 30_000])
    merged = split_shuffle.merge(clients, 7, t, chunk_size)
    self.assertEqual(merged.send_time.dtype, np.float64)
    self.assertTrue(np.all(np.diff(merged.send_time) >= 0))
    self.assertAllInRange(merged.send_time, 0.0, t)
    # The set of arrival times is N independent U(0, T) draws.
    self.assertGreater(
        stats.kstest(merged.send_time / t, 'uniform').pvalue, _P_MIN
    )

  @parameterized.parameters(1, 2, 4)
  def test_order_is_uniform_over_all_permutations(self, chunk_size):
    # 2 clients x 2 messages: all 24 orders equally likely, whatever the
    # chunking (1 -> 4 chunks, 2 -> 2, 4 -> 1). 7,200 streams: 300 per order.
    clients = _tagged_clients([2, 2])
    rng = np.random.default_rng(100 + chunk_size)
    index = {p: i for i, p in enumerate(itertools.permutations(range(4)))}
    counts = np.zeros(24)
    for _ in range(7200):
      m = split_shuffle.merge(clients, rng, 1.0, chunk_size)
      counts[index[tuple(m.value.astype(int))]] += 1
    self.assertGreater(stats.chisquare(counts).pvalue, _P_MIN)

  def test_tagged_message_position_and_time_are_uniform(self):
    # 3 clients x 4 messages, 3 chunks. Message 0 arrives at each of the 12
    # positions with probability 1/12 (chi-square, 500 per position) and
    # its delay is U(0, T) (Kolmogorov-Smirnov).
    clients = _tagged_clients([4, 4, 4])
    rng = np.random.default_rng(5)
    positions, times = [], []
    for _ in range(6000):
      m = split_shuffle.merge(clients, rng, 2.0, chunk_size=5)
      k = int(np.flatnonzero(m.value == 0)[0])
      positions.append(k)
      times.append(m.send_time[k])
    counts = np.bincount(positions, minlength=12)
    self.assertGreater(stats.chisquare(counts).pvalue, _P_MIN)
    self.assertGreater(
        stats.kstest(np.array(times) / 2.0, 'uniform').pvalue, _P_MIN
    )

  def test_arrival_times_are_uniform_order_statistics(self):
    # N = 6 messages in 3 chunks: the k-th arrival time / T ~ Beta(k, N+1-k)
    # (Kolmogorov-Smirnov for every k, over 6,000 streams).
    n, t = 6, 5.0
    clients = _tagged_clients([3, 3])
    rng = np.random.default_rng(9)
    times = np.stack(
        [
            split_shuffle.merge(clients, rng, t, chunk_size=2).send_time
            for _ in range(6000)
        ]
    )
    for k in range(1, n + 1):
      p = stats.kstest(times[:, k - 1] / t, 'beta', args=(k, n + 1 - k)).pvalue
      self.assertGreater(p, _P_MIN, msg=f'arrival {k}')

  def test_clients_interleave_and_position_says_nothing_of_send_time(self):
    clients = [
        split_shuffle.split([np.full([500], u, np.float32)]) for u in range(4)
    ]
    merged = split_shuffle.merge(clients, 3, 1.0, chunk_size=300)
    # In the first half of the stream every client has about a quarter of
    # the messages (binomial, 5 standard errors).
    first = merged.value[:1000]
    for u in range(4):
      self.assertNear(np.mean(first == u), 0.25, 5 * math.sqrt(0.1875 / 1000))
    # One client's scalar index and arrival time: rank correlation ~ 0 with
    # standard error 1 / sqrt(d).
    d = 100_000
    one = split_shuffle.merge(
        [split_shuffle.split([np.zeros([d], np.float32)])], 7, 3.0, 4096
    )
    rho = stats.spearmanr(one.flat_index, one.send_time)[0]
    self.assertLess(abs(rho), 5 / math.sqrt(d))

  def test_same_seed_same_stream_and_chunks_concatenate_to_merge(self):
    clients = _tagged_clients([300, 500, 200])
    a = split_shuffle.merge(clients, 3, 1.0, chunk_size=64)
    b = split_shuffle.merge(clients, np.random.default_rng(3), 1.0, 64)
    chunks = list(split_shuffle.merge_chunks(clients, 3, 1.0, chunk_size=64))
    other = split_shuffle.merge(clients, 4, 1.0, chunk_size=64)
    self.assertGreater(len(chunks), 1)
    self.assertLessEqual(len(chunks), 16)  # ceil(1000 / 64) labels
    for name in split_shuffle.Messages._fields:
      self.assertAllEqual(getattr(a, name), getattr(b, name))
      self.assertAllEqual(
          getattr(a, name), np.concatenate([getattr(c, name) for c in chunks])
      )
    self.assertNotAllEqual(a.value, other.value)

  def test_clients_without_messages(self):
    clients = [split_shuffle.split([np.full([3], np.nan, np.float32)])] * 2
    merged = split_shuffle.merge(clients, 0, 1.0)
    self.assertLen(merged, 0)
    self.assertEqual(merged.value.dtype, np.float32)
    self.assertEqual(merged.send_time.dtype, np.float64)
    self.assertEmpty(list(split_shuffle.merge_chunks(clients, 0, 1.0)))
    self.assertAllEqual(
        split_shuffle.average_by_id(merged, [(3,)])[0], np.zeros(3)
    )

  @parameterized.named_parameters(
      ('zero', 0.0),
      ('negative', -1.0),
      ('inf', math.inf),
      ('nan', math.nan),
      ('string', '1'),
  )
  def test_bad_max_delay(self, max_delay):
    clients = _tagged_clients([3])
    with self.assertRaisesRegex(ValueError, 'max_delay'):
      split_shuffle.merge(clients, 0, max_delay)
    with self.assertRaisesRegex(ValueError, 'max_delay'):
      split_shuffle.merge_chunks(clients, 0, max_delay)

  @parameterized.named_parameters(
      ('zero', 0, ValueError),
      ('negative', -5, ValueError),
      ('float', 2.0, TypeError),
      ('bool', True, TypeError),
  )
  def test_bad_chunk_size(self, chunk_size, error):
    clients = _tagged_clients([3])
    with self.assertRaisesRegex(error, 'chunk_size'):
      split_shuffle.merge(clients, 0, 1.0, chunk_size)
    with self.assertRaisesRegex(error, 'chunk_size'):
      split_shuffle.merge_chunks(clients, 0, 1.0, chunk_size)

  def test_bad_client_messages(self):
    (one,) = _tagged_clients([3])
    with self.assertRaisesRegex(ValueError, 'client_messages'):
      split_shuffle.merge([], 0, 1.0)
    with self.assertRaisesRegex(ValueError, 'client_messages'):
      split_shuffle.merge(one, 0, 1.0)  # a single Messages, not a list
    with self.assertRaisesRegex(TypeError, r'client_messages\[1\]'):
      split_shuffle.merge([one, (one.tensor_id, one.flat_index)], 0, 1.0)
    sent = split_shuffle.merge([one], 0, 1.0)
    with self.assertRaisesRegex(ValueError, 'already has send times'):
      split_shuffle.merge([one, sent], 0, 1.0)
    ragged = one._replace(value=one.value[:2])
    with self.assertRaisesRegex(ValueError, 'different lengths'):
      split_shuffle.merge([ragged], 0, 1.0)


class AverageByIdTest(tf.test.TestCase, parameterized.TestCase):

  def test_mean_of_received_values(self):
    shapes = [(3, 2), (4,)]
    reports = _encoded_reports(5, shapes, seed=1, nan_fraction=0.3)
    for r in reports:
      r[1][0] = np.nan  # nobody reports tensor 1, index 0
    reports[0][1][:] = np.nan  # client 0 reports nothing of tensor 1
    merged = split_shuffle.merge(
        [split_shuffle.split(r) for r in reports], 2, 1.0
    )
    means = split_shuffle.average_by_id(merged, shapes)
    for l, shape in enumerate(shapes):
      stacked = np.stack([r[l] for r in reports]).astype(np.float64)
      with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)  # all-NaN columns
        expected = np.nan_to_num(np.nanmean(stacked, axis=0), nan=0.0)
      self.assertEqual(means[l].shape, shape)
      self.assertEqual(means[l].dtype, np.float32)
      self.assertAllClose(means[l], expected, rtol=1e-6, atol=1e-7)
    self.assertEqual(means[1][0], 0.0)

  @parameterized.parameters(1, 5, 64, 2**21)
  def test_chunks_and_buffer_flushes_give_the_same_mean(self, piece):
    # Any cut of the stream, and any buffer size, count the same messages;
    # float64 sums of the same values in another grouping agree to rounding
    # (1e-12 relative, values of order 1).
    shapes = [(7, 3), (5,)]
    reports = _encoded_reports(6, shapes, seed=4, nan_fraction=0.2)
    clients = [split_shuffle.split(r) for r in reports]
    whole = split_shuffle.average_by_id(
        split_shuffle.merge(clients, 8, 1.0), shapes, dtype=np.float64
    )
    with mock.patch.object(split_shuffle, '_AVERAGE_PIECE', piece):
      chunked = split_shuffle.average_by_id(
          split_shuffle.merge_chunks(clients, 8, 1.0, chunk_size=9),
          shapes,
          dtype=np.float64,
      )
    for a, b in zip(whole, chunked):
      self.assertEqual(b.dtype, np.float64)
      self.assertAllClose(a, b, rtol=1e-12, atol=1e-12)

  def test_empty_iterable_gives_zeros(self):
    means = split_shuffle.average_by_id(iter([]), [(2,), (1, 3)])
    self.assertAllEqual(means[0], np.zeros(2))
    self.assertAllEqual(means[1], np.zeros([1, 3]))
    self.assertEqual(means[0].dtype, np.float64)

  def test_rejects_messages_outside_shapes(self):
    m = split_shuffle.split([np.zeros([4], np.float32)])
    with self.assertRaisesRegex(ValueError, 'flat_index'):
      split_shuffle.average_by_id(m, [(3,)])
    with self.assertRaisesRegex(ValueError, 'flat_index'):
      split_shuffle.average_by_id([m], [(3,)])
    with self.assertRaisesRegex(ValueError, 'tensor_id'):
      split_shuffle.average_by_id(m, [])
    # Index 1 of tensor 0 (size 1) would land on tensor 1's first key.
    bad = split_shuffle.Messages(
        np.array([0], np.int32), np.array([1], np.int32), np.ones(1)
    )
    with self.assertRaisesRegex(ValueError, 'flat_index'):
      split_shuffle.average_by_id(bad, [(1,), (4,)])
    with self.assertRaisesRegex(TypeError, 'messages'):
      split_shuffle.average_by_id(3, [(3,)])


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
        [split_shuffle.split(r) for r in reports], 10, 5.0, chunk_size=16
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
    # The factory releases no count of the missing reports (an exact client
    # statistic); the stream simply lacks them.
    self.assertEmpty(tf.nest.flatten(output.measurements))
    self.assertEqual(
        len(merged),
        sum(np.prod(s) for s in shapes) * num_clients - sum(expected_missing),
    )


if __name__ == '__main__':
  tf.test.main()
