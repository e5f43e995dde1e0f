"""Tests for tff_priv.mechanisms.blt and blt_sensitivity."""

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from tff_priv.mechanisms import blt
from tff_priv.mechanisms import blt_sensitivity

# An optimised 2-buffer BLT for 100 rounds (max error, single participation).
_BLT = blt.BLT(
    np.array([0.98885972, 0.7729885]), np.array([0.14602768, 0.32354102])
)


def _blts():
  return [
      _BLT,
      blt.rational_approx_init(3),
      blt.rational_approx_init(1),
      blt.BLT(np.array([0.9]), np.array([0.5])),
  ]


def test_coefficients_follow_the_definition():
  coefs = _BLT.toeplitz_coefs(5)
  theta, omega = _BLT.buf_decay, _BLT.output_scale
  expected = [1.0] + [np.sum(omega * theta ** (k - 1)) for k in range(1, 5)]
  np.testing.assert_allclose(coefs, expected, rtol=1e-15)
  np.testing.assert_array_equal(
      blt.BLT.identity().toeplitz_coefs(4), [1, 0, 0, 0]
  )


@pytest.mark.parametrize('index', range(4))
def test_c_times_its_inverse_is_the_identity(index):
  strategy = _blts()[index]
  n = 40
  c = strategy.materialize(n)
  c_inv = blt.lower_triangular_toeplitz(strategy.inverse_coefs(n))
  np.testing.assert_allclose(c @ c_inv, np.eye(n), atol=1e-12)
  np.testing.assert_allclose(c_inv @ c, np.eye(n), atol=1e-12)
  # The inverse is itself a BLT (2404.16706 Lemma 5.2): same coefficients.
  np.testing.assert_allclose(
      strategy.inverse().toeplitz_coefs(n),
      strategy.inverse_coefs(n),
      atol=1e-12,
  )
  # ... with decays in (0, 1) and negative output scales (2504.21413 Thm 1).
  inverse = strategy.inverse()
  assert np.all((inverse.buf_decay > 0) & (inverse.buf_decay < 1))
  assert np.all(inverse.output_scale < 0)


def test_inverse_coefficients_equal_the_streaming_inverse_of_an_impulse():
  # inverse_coefs expands C's rational generating function (scipy lfilter);
  # the stream is Algorithm 3 itself: the two must agree over long horizons.
  # The direct-form filter loses digits when decays nearly coincide near 1
  # (5 buffers, decays up to 1 - 1e-6): measured 3e-11 on a coefficient and
  # 4e-8 on the prefix sums of O(1) the error is made of.
  n = 2000
  impulse = np.zeros(n)
  impulse[0] = 1.0
  for strategy in _blts() + [blt.rational_approx_init(5), blt.BLT.identity()]:
    fast = strategy.inverse_coefs(n)
    streamed = strategy.streaming_inverse(impulse)
    np.testing.assert_allclose(fast, streamed, rtol=0, atol=1e-9)
    np.testing.assert_allclose(
        np.cumsum(fast), np.cumsum(streamed), rtol=0, atol=1e-6
    )
  assert blt.BLT.identity().inverse_coefs(0).size == 0


def test_streaming_noise_equals_the_materialised_inverse():
  n, d = 12, 5
  z = np.random.default_rng(0).normal(size=(n, d))
  for strategy in _blts():
    expected = np.linalg.solve(strategy.materialize(n), z)
    np.testing.assert_allclose(
        strategy.streaming_inverse(z), expected, atol=1e-12
    )
    # The TF step the factory runs, in float64 and float32.
    for dtype, tol in ((tf.float64, 1e-12), (tf.float32, 2e-5)):
      buffers = tf.zeros([strategy.num_buffers, d], dtype)
      out = []
      for t in range(n):
        x, buffers = blt.inverse_step(
            buffers,
            tf.constant(z[t], dtype),
            strategy.buf_decay,
            strategy.output_scale,
        )
        out.append(x.numpy())
      np.testing.assert_allclose(np.stack(out), expected, atol=tol)


@pytest.mark.statistical
def test_prefix_sum_noise_has_the_strategy_covariance():
  # Released prefix sums' noise: A C^{-1} z, covariance B B^T with
  # B = A C^{-1} computed from the inverse BLT's closed form (not from the
  # stream). For each of J fixed directions v, v^T noise over m independent
  # columns is N(0, v^T B B^T v): m s^2 / var ~ chi^2_m exactly; two-sided
  # tests at 1e-7 / J each, so the false-alarm probability is <= 1e-7.
  n, m = 16, 20000
  rng = np.random.default_rng(1234)
  z = rng.normal(size=(n, m))
  noise = np.cumsum(_BLT.streaming_inverse(z), axis=0)
  b = np.tril(np.ones((n, n))) @ blt.lower_triangular_toeplitz(
      _BLT.inverse().toeplitz_coefs(n)
  )
  cov = b @ b.T
  directions = list(np.eye(n))
  directions += [
      np.eye(n)[i] + np.eye(n)[j] for i, j in ((0, 5), (3, 15), (10, 11))
  ]
  directions += list(np.random.default_rng(7).normal(size=(10, n)))
  alpha = 1e-7 / len(directions)
  lo = scipy.stats.chi2.ppf(alpha / 2, m)
  hi = scipy.stats.chi2.isf(alpha / 2, m)
  for v in directions:
    stat = np.sum((v @ noise) ** 2) / (v @ cov @ v)
    assert lo < stat < hi, (v, stat / m)
  # The per-round variances are the optimiser's error formula.
  np.testing.assert_allclose(np.diag(cov), _BLT.prefix_errors(n), rtol=1e-10)


@pytest.mark.parametrize('n', [1, 2, 5, 8, 12])
def test_sensitivity_closed_form_equals_brute_force(n):
  for strategy in (_BLT, blt.rational_approx_init(2), blt.BLT.identity()):
    coefs = strategy.toeplitz_coefs(n)
    matrix = strategy.materialize(n)
    assert blt_sensitivity.single_participation_sensitivity(coefs) == (
        pytest.approx(np.linalg.norm(matrix, axis=0).max(), rel=1e-12)
    )
    for k in range(1, n + 1):
      for b in range(1, n + 1):
        closed = blt_sensitivity.minsep_sensitivity(coefs, b, k)
        brute = blt_sensitivity.brute_force_sensitivity(matrix, b, k)
        assert closed == pytest.approx(brute, rel=1e-12), (n, k, b)


def test_increasing_or_negative_c_is_refused():
  with pytest.raises(ValueError, match='non-increasing'):
    blt_sensitivity.minsep_sensitivity([1.0, 0.5, 0.7], 1, 2)
  with pytest.raises(ValueError, match='non-negative'):
    blt_sensitivity.minsep_sensitivity([1.0, -0.1, -0.2], 1, 2)
  # A BLT whose c_1 = sum(omega) > 1 = c_0 is increasing.
  increasing = blt.BLT(np.array([0.9]), np.array([1.5]))
  with pytest.raises(ValueError):
    blt_sensitivity.minsep_sensitivity(increasing.toeplitz_coefs(10), 2, 3)


def test_unstable_inverse_is_refused():
  with pytest.raises(ValueError, match='unstable'):
    blt.blt_from_lists([0.9], [2.5])  # C^{-1} decays at 0.9 - 2.5.
  with pytest.raises(ValueError, match='buf_decay'):
    blt.blt_from_lists([1.2], [0.1])


@pytest.mark.slow
def test_optimised_blt_beats_identity_and_restarts():
  n = 100
  strategy = blt.optimize(n)
  loss = strategy.loss(n)
  identity = blt.BLT.identity().loss(n)  # Independent noise: error n.
  assert identity == pytest.approx(n)
  # Optimal Toeplitz max loss is about (1 + ln(n) / pi)^2 (2404.16706): 6.1.
  assert loss < 7.0
  assert loss < identity / 10
  # The restart at the first round only of TFF's tree, as a matrix
  # factorization without Honaker's estimator: the prefix sum of round t
  # adds popcount(t) nodes; a client is in ceil(log2 n) + 1 of them.
  depth = int(np.ceil(np.log2(n))) + 1
  tree = max(bin(t).count('1') for t in range(1, n + 1)) * depth
  assert loss < tree
  # Constraints of the optimised C: decays in (0, 1), positive scales,
  # coefficients non-negative and non-increasing.
  assert np.all((strategy.buf_decay > 0) & (strategy.buf_decay < 1))
  assert np.all(strategy.output_scale > 0)
  blt_sensitivity.check_non_negative_non_increasing(strategy.toeplitz_coefs(n))
  # Mean error, and multiple participations.
  mean = blt.optimize(n, error='mean')
  assert mean.loss(n, 'mean') < blt.BLT.identity().loss(n, 'mean') / 5
  multi = blt.optimize(n, min_sep=20, max_participations=5, max_buffers=3)
  assert multi.loss(n, 'max', 20, 5) < blt.BLT.identity().loss(n, 'max', 20, 5)


# jax_privacy's `buffered_toeplitz.optimize` (the reference optimiser) on the
# same (n, k, b): the RMSE sqrt(sensitivity^2 x mean prefix-sum variance) of
# its optimum for the mean error, both libraries' losses agreeing on the same
# parameters. The settings of the matrix-factorization papers: StackOverflow
# (2052, 6, 342), CIFAR-10 (2000, 20, 100).
_REFERENCE_RMSE = {
    (500, 4, 125): 6.214,
    (2000, 4, 500): 7.113,
    (2052, 6, 342): 9.183,
    (2000, 20, 100): 21.374,
}


@pytest.mark.parametrize('setting', sorted(_REFERENCE_RMSE))
def test_multi_participation_optimum_is_the_reference(setting):
  n, k, b = setting
  strategy = blt.optimize(
      n, error='mean', min_sep=b, max_participations=k, num_buffers=2
  )
  rmse = np.sqrt(strategy.loss(n, 'mean', b, k))
  # Within 0.1 % (the reference is given to 4 digits); the bar is 1 %.
  assert rmse == pytest.approx(_REFERENCE_RMSE[setting], rel=1e-3)


def test_a_decay_pushed_to_one_stays_stable():
  # (n, b, k) = (200, 50, 4): the cyclic stream of N = 1,000, K = 20, 200
  # rounds. Its optimum pushes a decay to 1, where sigmoid rounded to 1.0 in
  # float64 and `optimize` raised "buf_decay must lie in (0, 1)".
  n, b, k = 200, 50, 4
  strategy = blt.optimize(n, min_sep=b, max_participations=k)
  assert np.all((strategy.buf_decay > 0) & (strategy.buf_decay < 1))
  blt_sensitivity.check_non_negative_non_increasing(strategy.toeplitz_coefs(n))
  identity = blt.BLT.identity().loss(n, 'max', b, k)
  assert strategy.loss(n, 'max', b, k) < identity / 2


@pytest.mark.slow
def test_single_participation_golden_and_near_optimal():
  # jax_privacy's golden test: n = 10^5, 2 buffers.
  golden = blt.optimize(100_000, num_buffers=2)
  np.testing.assert_allclose(
      golden.output_scale, [0.0122853238, 0.1878393665], rtol=1e-5
  )
  np.testing.assert_allclose(
      golden.buf_decay, [0.9999528892, 0.9857068667], rtol=1e-5
  )
  # Its near-optimality test at n = 10^4: sqrt(max loss) within 3 % of
  # 1 + ln(n) / pi (R. Mathias' bound), with 3 buffers; 4 never worse.
  n = 10_000
  scores = [
      np.sqrt(blt.optimize(n, num_buffers=b).loss(n)) / (1 + np.log(n) / np.pi)
      for b in (3, 4)
  ]
  assert scores[0] <= 1.03
  assert scores[1] <= scores[0]


def test_bad_arguments():
  with pytest.raises(ValueError):
    blt.BLT(np.array([0.5, 0.4]), np.array([0.1]))
  with pytest.raises(ValueError):
    blt.optimize(10, error='median')
  with pytest.raises(ValueError):
    blt_sensitivity.minsep_sensitivity([1.0, 0.5], 0, 1)
