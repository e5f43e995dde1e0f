"""Tests for tff_priv.mechanisms.ldp (the LDP-FL two-point encoder)."""

import math

from absl.testing import parameterized
import numpy as np
from scipy import stats
import tensorflow as tf

from tff_priv.mechanisms import ldp

_EPSILONS = (0.1, 1.0, 5.0, 10.0, 20.0)


def _seed(*s):
  """A stateless seed: the statistical tests use fixed ones.

  Statistical tests use fixed seeds and a tolerance of 5 standard errors of the
  estimate (two-sided, a false-alarm probability below 1e-6 for a fresh seed);
  the standard errors come from the exact distribution of the two-point output.
  """
  return tf.constant(s, tf.int64)


class FormulaTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(*_EPSILONS)
  def test_q_is_the_papers_ratio(self, eps):
    expected = (math.exp(eps) + 1) / (math.exp(eps) - 1)
    self.assertAllClose(ldp.two_point_q(eps), expected, rtol=1e-12)
    # q = coth(eps / 2), an independent closed form.
    self.assertAllClose(
        ldp.two_point_q(eps), 1 / math.tanh(eps / 2), rtol=1e-12
    )

  def test_q_accurate_for_small_epsilon(self):
    eps = 1e-6
    # coth(x) = 1/x + x/3 - ... ; q = 2/eps + eps/6 to 1e-12 relative.
    self.assertAllClose(ldp.two_point_q(eps), 2 / eps + eps / 6, rtol=1e-12)

  @parameterized.parameters(*_EPSILONS)
  def test_prob_high_is_the_papers_expression(self, eps):
    c, r = 0.3, 0.2
    w = np.linspace(c - r, c + r, 9)
    e = math.exp(eps)
    # Algorithm 2, line 3, as printed.
    expected = ((w - c) * (e - 1) + r * (e + 1)) / (2 * r * (e + 1))
    self.assertAllClose(ldp.prob_high(w, c, r, eps), expected, rtol=1e-12)

  @parameterized.parameters(*_EPSILONS)
  def test_likelihood_ratio_of_formula_is_at_most_e_eps(self, eps):
    c, r = -0.1, 0.5
    # Inputs inside and outside the range (outside ones are clipped first).
    w = np.linspace(c - 3 * r, c + 3 * r, 601)
    p = ldp.prob_high(w, c, r, eps).numpy()
    self.assertAllInRange(p, 0.0, 1.0)
    # Pr[low | w] = 1 - p+(w) = p+(2c - w) (the mechanism is symmetric); the
    # latter avoids the cancellation of 1 - p+ in float64 at large eps.
    p_low = ldp.prob_high(2 * c - w, c, r, eps).numpy()
    self.assertAllClose(p_low, 1.0 - p, atol=1e-15)
    for probs in (p, p_low):  # high output, low output
      ratio = probs.max() / probs.min()
      # Tight: the extremes of the range reach e^eps exactly.
      self.assertAllClose(ratio, math.exp(eps), rtol=1e-9)

  def test_variance_lemma_3_and_mean_variance_lemma_4(self):
    eps, c, r = 1.0, 0.2, 0.4
    q = (math.e + 1) / (math.e - 1)
    w = np.array([[-0.1, 0.2, 0.5], [0.6, 0.0, 0.3]])  # n = 2 clients
    self.assertAllClose(ldp.variance(w, c, r, eps), r**2 * q**2 - (w - c) ** 2)
    n = w.shape[0]
    lemma4 = r**2 * q**2 / n - np.sum((w - c) ** 2, axis=0) / n**2
    self.assertAllClose(ldp.mean_variance(w, c, r, eps), lemma4)
    # The paper's bounds around Lemma 4.
    v = ldp.mean_variance(w, c, r, eps).numpy()
    self.assertAllGreaterEqual(v - (r**2 * q**2 / n - r**2 / n), -1e-12)
    self.assertAllLessEqual(v, r**2 * q**2 / n)

  def test_variance_does_not_vanish_for_large_epsilon(self):
    # The paper's "r^2 O(e^-eps + e^-2eps)" is wrong: Var -> r^2 - (w - c)^2.
    self.assertAllClose(ldp.variance(0.0, 0.0, 1.0, 30.0), 1.0)

  @parameterized.parameters(tf.float32, tf.float64)
  def test_output_values(self, dtype):
    lo, hi = ldp.output_values(
        tf.constant(0.5, dtype), tf.constant(0.25, dtype), 1.0
    )
    q = (math.e + 1) / (math.e - 1)
    self.assertAllClose([lo, hi], [0.5 - 0.25 * q, 0.5 + 0.25 * q])
    self.assertEqual(lo.dtype, dtype)


class ImplementationPrivacyTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(tf.float32, tf.float64)
  def test_coins_are_uniform_integers(self, dtype):
    n = ldp.COIN_RESOLUTION
    k = ldp.coins([1001, 1000], _seed(3, 4), dtype).numpy()
    self.assertEqual(k.dtype, dtype.as_numpy_dtype)
    self.assertAllEqual(k, np.floor(k))
    self.assertAllInRange(k, 0, n - 1)
    # Uniform on {0..N-1}: both bytes uniform (chi-square, 256 cells), and
    # neighbouring coins (two halves of one Philox word) unrelated.
    k = k.astype(np.int64).reshape(-1)
    for byte in (k % 256, k // 256):
      counts = np.bincount(byte, minlength=256)
      self.assertGreater(stats.chisquare(counts).pvalue, 1e-4)
    pairs = np.bincount((k[0::2] % 16) * 16 + k[1::2] % 16, minlength=256)
    self.assertGreater(stats.chisquare(pairs).pvalue, 1e-4)

  def test_odd_sizes_and_empty(self):
    for shape in ([7], [3, 5], [0]):
      k = ldp.coins(shape, _seed(1, 2))
      self.assertEqual(k.shape, shape)

  @parameterized.product(
      eps=_EPSILONS, dtype=(tf.float32, tf.float64), center=(0.0, 3.0)
  )
  def test_likelihood_ratio_of_implementation_is_at_most_e_eps(
      self, eps, dtype, center
  ):
    r = 0.01
    w = tf.constant(np.linspace(center - 2 * r, center + 2 * r, 1001), dtype)
    p = ldp.realized_prob_high(w, center, r, eps).numpy()
    # Exact probabilities (multiples of 1/N); no tolerance on the bound.
    for probs in (p, 1.0 - p):
      self.assertGreater(probs.min(), 0.0)
      self.assertLessEqual(probs.max() / probs.min(), math.exp(eps))

  @parameterized.parameters(0.5, 5.0)
  def test_implementation_is_unbiased_to_float_resolution(self, eps):
    c, r = 0.25, 0.125
    w = tf.constant(np.linspace(c - r, c + r, 257), tf.float32)
    # The float32 outputs the encoder emits.
    lo, hi = ldp.output_values(
        tf.constant(c, tf.float32), tf.constant(r, tf.float32), eps
    )
    lo, hi = float(lo), float(hi)
    p = ldp.realized_prob_high(w, c, r, eps).numpy()
    mean = lo + (hi - lo) * p  # exact expectation of the implementation
    # The bias bound of `ldp.threshold_bounds` (its docstring),
    # 2 r q (1 + 2^-8) / N, plus the float32 rounding of the two outputs.
    rq = r * float(ldp.two_point_q(eps))
    bound = 2 * rq * (1 + 2.0**-8) / ldp.COIN_RESOLUTION
    bound += (abs(c) + rq) * 2.0**-23
    self.assertAllClose(mean, w.numpy().astype(np.float64), atol=bound, rtol=0)

  @parameterized.parameters(0.1, 1.0, 10.0)
  def test_empirical_frequency_matches_realized_probability(self, eps):
    c, r, n = 0.0, 1.0, 400_000
    for w in (-1.0, -0.3, 0.0, 0.7, 1.0):
      out = ldp.encode(
          tf.fill([n], w), c, r, eps, _seed(11, int(10 * w) + 20)
      ).encoded.numpy()
      _, hi = ldp.output_values(tf.constant(c, tf.float32), r, eps)
      freq = np.mean(out == hi.numpy())
      p = ldp.realized_prob_high(
          tf.constant([w], tf.float32), c, r, eps
      ).numpy()[0]
      self.assertNear(freq, p, 5 * math.sqrt(p * (1 - p) / n))


class EncodeTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.product(eps=(0.5, 2.0), center=(0.0, -1.5), radius=(0.01, 3.0))
  def test_outputs_are_exactly_the_two_values(self, eps, center, radius):
    w = tf.random.stateless_normal(
        [5000], _seed(1, 2), mean=center, stddev=2 * radius
    )
    result = ldp.encode(w, center, radius, eps, _seed(5, 6))
    lo, hi = ldp.output_values(
        tf.constant(center, tf.float32), tf.constant(radius, tf.float32), eps
    )
    self.assertCountEqual(np.unique(result.encoded), [lo.numpy(), hi.numpy()])

  def test_values_outside_range_are_clipped_first(self):
    eps, c, r, n = 1.0, 0.0, 0.5, 200_000
    w = np.array([-3.0, -0.5, 0.2, 0.5, 7.0], np.float32)
    result = ldp.encode(w, c, r, eps, _seed(0, 1))
    self.assertEqual(result.num_clipped, 2)
    self.assertEqual(result.num_nonfinite, 0)
    self.assertEqual(result.finite_min, -3.0)
    self.assertEqual(result.finite_max, 7.0)
    # Far outside the range behaves exactly as the range's end.
    self.assertAllEqual(
        ldp.realized_prob_high(w, c, r, eps).numpy()[[0, 4]],
        ldp.realized_prob_high(w, c, r, eps).numpy()[[1, 3]],
    )
    # And the encoder estimates the clipped value: mean of n encodings of
    # w = 7 is c + r = 0.5 (not 7), within 5 standard errors.
    out = ldp.encode(tf.fill([n], 7.0), c, r, eps, _seed(0, 2))
    sd = math.sqrt(ldp.variance(0.5, c, r, eps).numpy() / n)
    self.assertNear(np.mean(out.encoded), 0.5, 5 * sd)
    self.assertEqual(out.num_clipped, n)

  @parameterized.parameters(
      (0.5, 0.0, 1.0, -0.9),
      (1.0, 0.1, 0.2, 0.25),
      (5.0, -2.0, 0.5, -2.0),
      (10.0, 0.0, 1.0, 0.99),
  )
  def test_unbiased_with_variance_of_lemma_3(self, eps, c, r, w):
    n = 400_000
    x = (
        ldp.encode(
            tf.fill([n], tf.constant(w, tf.float32)), c, r, eps, _seed(7, 8)
        )
        .encoded.numpy()
        .astype(np.float64)
    )
    var = float(ldp.variance(w, c, r, eps))
    self.assertNear(x.mean(), w, 5 * math.sqrt(var / n))
    # Standard error of the sample variance: sqrt((mu4 - var^2) / n), with
    # the fourth central moment of the two-point output.
    lo, hi = (float(v) for v in ldp.output_values(c, r, eps))
    p = float(ldp.prob_high(w, c, r, eps))
    mu4 = p * (hi - w) ** 4 + (1 - p) * (lo - w) ** 4
    # x.var() = mean((x - w)^2) - (mean(x) - w)^2: 5 standard errors of the
    # first term plus the second term's bound at 5 standard errors, 25 var/n.
    self.assertNear(
        x.var(), var, 5 * math.sqrt((mu4 - var**2) / n) + 25 * var / n
    )

  def test_lemma_4_variance_of_mean_of_n_clients(self):
    eps, c, r, n, trials = 1.0, 0.0, 1.0, 20, 50_000
    w = np.linspace(-1.0, 1.0, n).astype(np.float32)  # one value per client
    x = (
        ldp.encode(tf.tile(w[None, :], [trials, 1]), c, r, eps, _seed(9, 9))
        .encoded.numpy()
        .astype(np.float64)
    )
    means = x.mean(axis=1)  # the server's mean, one per trial
    v = float(ldp.mean_variance(w[:, None], c, r, eps)[0])
    self.assertNear(means.mean(), w.mean(), 5 * math.sqrt(v / trials))
    # Sample variance of a near-Gaussian mean: SE = v sqrt(2 / (trials - 1)).
    self.assertNear(means.var(ddof=1), v, 5 * v * math.sqrt(2 / (trials - 1)))

  def test_same_seed_same_output(self):
    w = tf.random.stateless_uniform([1000], _seed(1, 1), -1.0, 1.0)
    a = ldp.encode(w, 0.0, 1.0, 1.0, _seed(4, 2)).encoded
    b = ldp.encode(w, 0.0, 1.0, 1.0, _seed(4, 2)).encoded
    self.assertAllEqual(a, b)

  def test_fresh_seeds_give_uncorrelated_outputs_despite_global_seed(self):
    tf.random.set_seed(0)  # must not make fresh_seed() repeat

    @tf.function
    def client(w):
      return ldp.encode(w, 0.0, 1.0, 1.0, ldp.fresh_seed())

    n = 100_000
    w = tf.zeros([n])  # p = 1/2, outputs +-q with mean 0
    a = client(w).encoded.numpy().astype(np.float64)
    b = client(w).encoded.numpy().astype(np.float64)
    q = float(ldp.two_point_q(1.0))
    corr = np.mean(a * b) / q**2
    # Independent +-q coins: corr has mean 0 and standard error 1/sqrt(n).
    self.assertLess(abs(corr), 5 / math.sqrt(n))
    self.assertNotAllEqual(ldp.fresh_seed(), ldp.fresh_seed())

  @parameterized.parameters(0, 50_000, 99_999)
  def test_nonfinite_values_are_dropped_and_counted(self, position):
    w = np.full([100_000], 0.1, np.float32)
    w[position] = np.nan
    w[(position + 7) % w.size] = np.inf
    w[(position + 13) % w.size] = -np.inf
    w[(position + 21) % w.size] = 5.0  # clipped, finite
    result = ldp.encode(w, 0.0, 1.0, 1.0, _seed(2, 3))
    bad = ~np.isfinite(w)
    self.assertEqual(result.num_nonfinite, 3)
    self.assertEqual(result.num_clipped, 1)
    self.assertTrue(np.all(np.isnan(result.encoded.numpy()[bad])))
    self.assertTrue(np.all(np.isfinite(result.encoded.numpy()[~bad])))
    self.assertEqual(result.finite_min, np.float32(0.1))
    self.assertEqual(result.finite_max, 5.0)

  def test_all_nonfinite(self):
    result = ldp.encode(
        tf.constant([np.nan, np.inf]), 0.0, 1.0, 1.0, _seed(2, 3)
    )
    self.assertEqual(result.num_nonfinite, 2)
    self.assertEqual(result.finite_min, np.inf)
    self.assertEqual(result.finite_max, -np.inf)

  @parameterized.parameters(tf.float16, tf.bfloat16, tf.float32, tf.float64)
  def test_dtypes(self, dtype):
    w = tf.cast(tf.tile([-2.0, -1.5, -0.5, 0.0, 0.5, 1.5, 2.0], [20]), dtype)
    result = ldp.encode(w, 0.0, 1.0, 2.0, _seed(1, 5))
    self.assertEqual(result.encoded.dtype, dtype)
    self.assertEqual(result.encoded.shape, w.shape)
    self.assertLen(np.unique(result.encoded.numpy()), 2)
    self.assertEqual(result.num_clipped, 80)

  def test_rejects_integer_values(self):
    with self.assertRaisesRegex(TypeError, 'values'):
      ldp.encode(tf.constant([1, 2]), 0.0, 1.0, 1.0, _seed(1, 1))

  def test_shape_is_kept(self):
    w = tf.zeros([3, 4, 5])
    self.assertEqual(
        ldp.encode(w, 0.0, 1.0, 1.0, _seed(1, 1)).encoded.shape,
        [3, 4, 5],
    )


if __name__ == '__main__':
  tf.test.main()
