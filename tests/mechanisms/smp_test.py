"""Tests for mechanisms.smp (Fed-SMP's client step, masks, formulas)."""

import collections
import itertools
import math

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

from tff_priv.mechanisms import clipping
from tff_priv.mechanisms import gaussian
from tff_priv.mechanisms import smp


def _relative_se_of_std(n):
  """Relative standard error of a sample standard deviation of n Gaussians."""
  return 1.0 / math.sqrt(2.0 * (n - 1))


class NumKeptTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(
      (10, 0.5, 5),
      (10, 1.0, 10),
      (10, 0.01, 1),  # at least one coordinate
      (10, 0.25, 3),  # 2.5 rounds half up
      (10, 0.24, 2),
      (1663370, 0.1, 166337),
  )
  def test_values(self, d, p, k):
    self.assertEqual(smp.num_kept(d, p), k)

  @parameterized.parameters((0, 0.5), (10, 0.0), (10, -0.1), (10, 1.01))
  def test_bad_arguments(self, d, p):
    with self.assertRaises(ValueError):
      smp.num_kept(d, p)


class RandKIndicesTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters((1000, 1), (1000, 100), (1000, 999), (7, 3))
  def test_exactly_k_distinct_sorted_in_range(self, d, k):
    idx = smp.rand_k_indices(tf.constant([3, 4], tf.int64), d, k).numpy()
    self.assertEqual(idx.dtype, np.int32)
    self.assertEqual(idx.shape, (k,))
    self.assertEqual(len(np.unique(idx)), k)
    self.assertTrue(np.all(np.diff(idx) > 0))
    self.assertGreaterEqual(idx.min(), 0)
    self.assertLess(idx.max(), d)

  def test_k_equals_d_is_every_coordinate(self):
    idx = smp.rand_k_indices(tf.constant([3, 4], tf.int64), 12, 12)
    self.assertAllEqual(idx, np.arange(12))

  def test_same_seed_same_mask_other_seed_other_mask(self):
    a = smp.rand_k_indices(tf.constant([1, 2], tf.int64), 10000, 50)
    b = smp.rand_k_indices(tf.constant([1, 2], tf.int64), 10000, 50)
    c = smp.rand_k_indices(tf.constant([1, 3], tf.int64), 10000, 50)
    self.assertAllEqual(a, b)
    self.assertNotAllEqual(a, c)

  def test_round_seed_changes_every_round(self):
    seed = tf.constant([5, 0], tf.int64)
    masks = [
        smp.rand_k_indices(smp.round_seed(seed, r), 10000, 50).numpy()
        for r in range(4)
    ]
    for a, b in itertools.combinations(masks, 2):
      self.assertFalse(np.array_equal(a, b))
    # Deterministic: a public function of (seed, round).
    self.assertAllEqual(
        masks[2],
        smp.rand_k_indices(smp.round_seed(seed, 2), 10000, 50),
    )

  @pytest.mark.slow
  def test_every_k_subset_equally_likely(self):
    # d = 5, k = 2: 10 subsets, each with probability 0.1 over 3000 seeds.
    # Tolerance: 5 standard errors of a frequency, 5 sqrt(0.1 * 0.9 / n).
    n, d, k = 3000, 5, 2
    counts = collections.Counter(
        tuple(
            smp.rand_k_indices(
                smp.round_seed(tf.constant([11, 0], tf.int64), r), d, k
            ).numpy()
        )
        for r in range(n)
    )
    self.assertLen(counts, math.comb(d, k))
    tol = 5 * math.sqrt(0.1 * 0.9 / n)
    for subset, c in counts.items():
      self.assertAlmostEqual(c / n, 0.1, delta=tol, msg=str(subset))

  @pytest.mark.slow
  def test_rescaled_rand_k_is_unbiased(self):
    # E_S[densify((d/k) x[S])] = x. Per coordinate the estimator is (d/k) x_i
    # with probability k/d and 0 otherwise: variance x_i^2 (d/k - 1).
    # Tolerance: 5 standard errors of the mean over n masks.
    n, d, k = 2000, 20, 5
    x = np.linspace(-1.0, 2.0, d).astype(np.float32)
    scale = smp.rand_k_scale(d, k)
    total = np.zeros(d)
    for r in range(n):
      idx = smp.rand_k_indices(
          smp.round_seed(tf.constant([7, 7], tf.int64), r), d, k
      )
      total += smp.densify(smp.sparsify(x, idx, scale), idx, d).numpy()
    se = np.abs(x) * math.sqrt((d / k - 1) / n)
    self.assertTrue(np.all(np.abs(total / n - x) <= 5 * se + 1e-6))


class TopKTest(tf.test.TestCase):

  def test_top_k_indices_exact(self):
    scores = tf.constant([0.1, 5.0, -3.0, 4.0, 0.0, 4.5])
    self.assertAllEqual(smp.top_k_indices(scores, 3), [1, 3, 5])

  def test_top_k_ties_take_lower_index(self):
    scores = tf.constant([1.0, 2.0, 2.0, 2.0, 0.0])
    self.assertAllEqual(smp.top_k_indices(scores, 2), [1, 2])

  def test_mask_from_public_update_uses_absolute_difference(self):
    theta = [tf.constant([[1.0, 1.0], [1.0, 1.0]]), tf.constant([0.0, 0.0])]
    theta_pub = [
        tf.constant([[1.0, -2.0], [1.1, 1.0]]),
        tf.constant([0.5, 0.0]),
    ]
    # |diff| flattened in tf.nest order: [0, 3, 0.1, 0, 0.5, 0].
    self.assertAllEqual(
        smp.top_k_mask_from_public_update(theta_pub, theta, 2), [1, 4]
    )
    self.assertAllEqual(
        smp.top_k_mask_from_public_update(theta_pub, theta, 3), [1, 2, 4]
    )

  def test_mask_from_public_update_rejects_mismatched_structures(self):
    with self.assertRaises((ValueError, TypeError)):
      smp.top_k_mask_from_public_update(
          [tf.zeros([2])], [tf.zeros([2]), tf.zeros([1])], 1
      )


class FlattenTest(tf.test.TestCase):

  def test_round_trip_of_nested_structure(self):
    value = collections.OrderedDict(
        b=[tf.reshape(tf.range(6.0), [2, 3]), tf.constant([7.0])],
        a=tf.constant(8.0),
    )
    flat = smp.flatten(value)
    self.assertEqual(flat.shape, [8])
    back = smp.unflatten(flat, value)
    tf.nest.map_structure(self.assertAllEqual, back, value)
    specs = tf.nest.map_structure(tf.TensorSpec.from_tensor, value)
    tf.nest.map_structure(
        self.assertAllEqual, smp.unflatten(flat, specs), value
    )

  def test_single_tensor(self):
    x = tf.reshape(tf.range(6.0), [3, 2])
    self.assertAllEqual(smp.flatten(x), tf.range(6.0))
    self.assertAllEqual(smp.unflatten(tf.range(6.0), x), x)


class ClientStepTest(tf.test.TestCase, parameterized.TestCase):

  def test_clip_after_rand_k_rescaling(self):
    # x = ones(10), 5 kept, scale 2: kept values 2, norm 2 sqrt(5) -> clipped to
    # norm 1: each value 1/sqrt(5). Clipping first (norm sqrt(10)) and then
    # rescaling would give 2/sqrt(10) per value and a norm of sqrt(2).
    d, idx = 10, tf.constant([0, 3, 4, 6, 9])
    out = smp.sparsify_clip_noise(
        tf.ones([d]),
        idx,
        scale=smp.rand_k_scale(d, 5),
        clip=1.0,
        noise_stddev=0.0,
    )
    self.assertEqual(out.shape, [5])
    self.assertAllClose(out, np.full(5, 1 / math.sqrt(5)), rtol=1e-6)
    self.assertAllClose(tf.norm(out), 1.0, rtol=1e-6)

  def test_clip_after_top_k_masking(self):
    # A large coordinate outside the mask must not shrink the kept ones: the
    # kept values have norm 0.2 < C and stay as they are. Clipping before
    # masking would divide them by ~10.
    x = tf.constant([10.0, 0.1, 0.1, 0.1, 0.1])
    out = smp.sparsify_clip_noise(
        x, tf.constant([1, 3]), scale=1.0, clip=1.0, noise_stddev=0.0
    )
    self.assertAllClose(out, [0.1, 0.1])

  def test_unclipped_values_pass_unchanged(self):
    x = tf.constant([0.3, -0.4, 0.0, 2.0])
    out = smp.sparsify_clip_noise(
        x, tf.constant([0, 1]), scale=1.0, clip=1.0, noise_stddev=0.0
    )
    self.assertAllEqual(out, np.array([0.3, -0.4], np.float32))

  def test_upload_is_k_values_and_zero_outside_mask(self):
    d, idx = 50, tf.constant([2, 7, 30, 49])
    out = smp.sparsify_clip_noise(
        tf.zeros([d]),
        idx,
        scale=12.5,
        clip=1.0,
        noise_stddev=0.5,
        seed=tf.constant([1, 2], tf.int64),
    )
    self.assertEqual(out.shape, [4])
    self.assertTrue(np.all(out.numpy() != 0.0))  # noise on every kept value
    dense = smp.densify(out, idx, d).numpy()
    outside = np.setdiff1d(np.arange(d), idx.numpy())
    self.assertTrue(np.all(dense[outside] == 0.0))
    self.assertAllEqual(dense[idx.numpy()], out)

  def test_structure_sparsify_equals_flat_gather(self):
    # Sorted indices: runs inside one leaf, across leaves, and a leaf with
    # no kept index at all (the [1] leaf at flat position 6).
    value = [
        tf.reshape(tf.range(1.0, 7.0), [2, 3]),
        tf.constant([7.0]),
        tf.constant([[8.0, 9.0], [10.0, 11.0]]),
    ]
    for indices in (
        [0, 5, 7, 10],
        [2, 3, 4],
        [6],
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        [9],
    ):
      idx = tf.constant(indices, tf.int32)
      out = smp.sparsify(value, idx, 3.0)
      self.assertEqual(out.shape, [len(indices)])
      self.assertAllEqual(
          out, 3.0 * tf.gather(smp.flatten(value), idx), msg=str(indices)
      )

  def test_structure_clip_uses_global_norm(self):
    value = collections.OrderedDict(
        a=tf.constant([3.0]), b=tf.constant([[4.0]])
    )
    out = clipping.clip_l2(value, 1.0)
    self.assertAllClose(out['a'], [0.6])
    self.assertAllClose(out['b'], [[0.8]])

  def test_full_step_on_structure_keeps_structure(self):
    value = [tf.constant([3.0, 0.0]), tf.constant([[4.0]])]
    out = smp.sparsify_clip_noise(
        value, None, scale=1.0, clip=1.0, noise_stddev=0.0
    )
    self.assertAllClose(out[0], [0.6, 0.0])
    self.assertAllClose(out[1], [[0.8]])
    noised = gaussian.add_gaussian_noise(
        [tf.zeros([50]), tf.zeros([50])], 1.0, tf.constant([1, 1], tf.int64)
    )
    # One seed, independent noise per leaf.
    self.assertNotAllEqual(noised[0], noised[1])

  def test_all_coordinates_when_indices_is_none(self):
    x = tf.constant([3.0, 4.0])
    out = smp.sparsify_clip_noise(
        x, None, scale=1.0, clip=1.0, noise_stddev=0.0
    )
    self.assertAllClose(out, [0.6, 0.8])
    self.assertAllEqual(smp.densify(out, None, 2), out)

  @parameterized.parameters(tf.float32, tf.float64)
  def test_noise_std_and_dtype(self, dtype):
    # Tolerance: 5 relative standard errors of a sample std over n draws.
    n, std = 20000, 0.37
    out = gaussian.add_gaussian_noise(tf.zeros([n], dtype), std)
    self.assertEqual(out.dtype, dtype)
    self.assertAllClose(np.mean(out), 0.0, atol=5 * std / math.sqrt(n))
    self.assertAllClose(
        np.std(out, ddof=1), std, rtol=5 * _relative_se_of_std(n)
    )

  def test_unseeded_noise_is_fresh_seeded_noise_is_reproducible(self):
    a = gaussian.add_gaussian_noise(tf.zeros([100]), 1.0)
    b = gaussian.add_gaussian_noise(tf.zeros([100]), 1.0)
    self.assertNotAllEqual(a, b)
    seed = tf.constant([9, 9], tf.int64)
    self.assertAllEqual(
        gaussian.add_gaussian_noise(tf.zeros([100]), 1.0, seed),
        gaussian.add_gaussian_noise(tf.zeros([100]), 1.0, seed),
    )

  def test_zero_stddev_adds_nothing(self):
    x = tf.constant([1.0, 2.0])
    self.assertAllEqual(gaussian.add_gaussian_noise(x, 0.0), x)


class FormulaTest(tf.test.TestCase):

  def test_sum_of_n_client_noises_has_std_sigma_c_for_every_n(self):
    # n clients each add N(0, client_noise_stddev(n)^2); the sum must have std
    # sigma * C whatever n is. Tolerance: 5 relative standard errors over the
    # coordinates.
    sigma, c, size = 1.3, 0.5, 20000
    for n in (1, 4, 25):
      s = smp.client_noise_stddev(sigma, c, n)
      self.assertAllClose(s, sigma * c / math.sqrt(n))
      total = tf.add_n(
          [
              gaussian.add_gaussian_noise(tf.zeros([size], tf.float32), s)
              for _ in range(n)
          ]
      )
      self.assertAllClose(
          np.std(total, ddof=1), sigma * c, rtol=5 * _relative_se_of_std(size)
      )

  def test_client_noise_stddev_of_an_empty_count_is_that_of_one(self):
    self.assertAllClose(smp.client_noise_stddev(1.5, 2.0, 0), 3.0)
    self.assertAllClose(smp.client_noise_stddev(1.0, 1.0, tf.constant(4)), 0.5)

  def test_secure_sum_bound_covers_clip_and_noise_tail(self):
    # Without noise the bound is the clip (a clipped value reaches at most C).
    self.assertEqual(smp.secure_sum_bound(0.7, 0.0, 6.0), 0.7)
    # With noise, the largest per-client std is sigma C (n = 1); a fraction
    # 2 (1 - Phi(z)) of pure-noise values then exceed the bound minus C: at
    # z = 2 about 4.55%. Tolerance: 5 standard errors.
    sigma, c, size = 1.0, 1.0, 20000
    bound = smp.secure_sum_bound(c, sigma, 2.0)
    noise = gaussian.add_gaussian_noise(
        tf.zeros([size], tf.float32), smp.client_noise_stddev(sigma, c, 1)
    ).numpy()
    frac = np.mean(np.abs(noise) > bound - c)
    p = math.erfc(2.0 / math.sqrt(2.0))
    self.assertAlmostEqual(frac, p, delta=5 * math.sqrt(p * (1 - p) / size))


class CheckMaskIndicesTest(tf.test.TestCase, parameterized.TestCase):

  def test_sorts_and_casts(self):
    out = smp.check_mask_indices([5, 1, 3], 3)
    self.assertEqual(out.dtype, np.int32)
    self.assertAllEqual(out, [1, 3, 5])

  @parameterized.named_parameters(
      ('wrong_length', [1, 2], 3),
      ('two_dims', [[1, 2, 3]], 3),
      ('negative', [-1, 2, 3], 3),
      ('repeated', [1, 1, 3], 3),
      ('floats', [1.0, 2.0, 3.0], 3),
  )
  def test_rejects(self, indices, k):
    with self.assertRaises(ValueError):
      smp.check_mask_indices(indices, k)


if __name__ == '__main__':
  tf.test.main()
