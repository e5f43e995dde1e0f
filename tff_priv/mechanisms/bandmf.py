"""Banded Toeplitz matrix factorization with amplification by sampling (no TFF).

Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta, Xu, "(Amplified)
Banded Matrix Factorization: A unified approach to private training" (NeurIPS
2023, arXiv 2306.08153); McKenna, "Scaling up the Banded Matrix Factorization
Mechanism for Differentially Private ML" (arXiv 2405.15913). The reference
implementation is jax_privacy's `matrix_factorization/toeplitz.py` (`loss`,
`optimize_banded_toeplitz`, `optimize_coefs_for_amplifications`) and
`accounting.amplified_bandmf_event`; this module follows its math in
TensorFlow / numpy (jax_privacy is not a dependency of this stack). The
strategy and its privacy: `BandChoice`; its error: `loss`.
"""

import dataclasses
import functools
import math
from typing import Optional

import numpy as np
import tensorflow as tf

from tff_priv import validation
from tff_priv.mechanisms import blt_optimize


def max_error_start(bands: int) -> np.ndarray:
  """jax_privacy's start: c_k = prod_{j<=k} (2j - 1) / (2j), c_0 = 1."""
  k = np.arange(bands, dtype=np.float64)
  ratios = np.ones(bands)
  ratios[1:] = (2 * k[1:] - 1) / (2 * k[1:])
  return np.cumprod(ratios)


def inverse_coefs(coefs, n: int) -> np.ndarray:
  """The first n Toeplitz coefficients of C^{-1} (numpy)."""
  c = np.asarray(coefs, np.float64)
  w = np.zeros(n)
  for t in range(n):
    acc = 1.0 if t == 0 else 0.0
    for i in range(1, min(len(c), t + 1)):
      acc -= c[i] * w[t - i]
    w[t] = acc / c[0]
  return w


def prefix_variances(coefs, n: int) -> np.ndarray:
  """Each round's prefix-sum noise variance with unit z (numpy), [n]."""
  b = np.cumsum(inverse_coefs(coefs, n))
  return np.cumsum(b * b)


def loss(coefs, n: int) -> float:
  """Mean prefix-sum variance x ||c||^2 (jax_privacy `toeplitz.loss`, mean).

  Error (jax_privacy `toeplitz.loss` with `reduction_fn=jnp.mean`). With unit
  noise the prefix sums' noise is B z, B = A C^{-1}, lower-triangular Toeplitz
  with coefficients cumsum(C^{-1} e_1) (= C^{-1} 1); the variance of prefix
  sum t is sum_{j <= t} B_j^2, and the loss is its mean over t times ||c||^2
  (the sensitivity^2 of a column). The loss is scale-free in c; `optimize`
  minimises it over c with exact TensorFlow gradients (L-BFGS,
  `blt_optimize.minimize`) from jax_privacy's start (the coefficients of the
  optimal max-error Toeplitz factor, `optimal_max_error_strategy_coefs`).
  """
  c = np.asarray(coefs, np.float64)
  return float(np.mean(prefix_variances(c, n)) * (c @ c))


@functools.lru_cache(maxsize=None)
def _traced_loss(n: int, bands: int):
  @tf.function(
      input_signature=[tf.TensorSpec([bands], tf.float64)],
      reduce_retracing=True,
  )
  def value_and_gradient(c):
    with tf.GradientTape() as tape:
      tape.watch(c)
      # Row i of the banded form is C's i-th subdiagonal (all c_i).
      banded = tf.tile(c[:, tf.newaxis], [1, n])
      b = tf.linalg.banded_triangular_solve(
          banded, tf.ones([n, 1], tf.float64), lower=True
      )[:, 0]
      value = tf.reduce_mean(tf.cumsum(b * b)) * tf.reduce_sum(c * c)
    return value, tape.gradient(value, c)

  return value_and_gradient


def optimize(n: int, bands: int, max_iterations: int = 250) -> np.ndarray:
  """The b-banded Toeplitz C (unit L2 norm) of least `loss` for n rounds."""
  n = validation.int_at_least('n', n, 1)
  bands = validation.int_at_least('bands', bands, 1)
  bands = min(bands, n)
  start = max_error_start(bands)
  if bands == 1:
    return start
  value_and_gradient = _traced_loss(n, bands)

  def guarded(c):
    value, gradient = value_and_gradient(c)
    # c_0 <= 0 leaves C singular or its inverse unstable: outside.
    if not float(c[0]) > 0:
      return tf.constant(np.inf, tf.float64), gradient
    return value, gradient

  c = blt_optimize.minimize(guarded, start, max_iterations)
  if not (np.all(np.isfinite(c)) and loss(c, n) <= loss(start, n)):
    c = start
  return c / np.linalg.norm(c)


def candidate_bands(
    population: int, clients_per_round: int, total_rounds: int
) -> list[int]:
  """b in 1..N // K (q = K / floor(N / b) <= 1), as jax_privacy: divisors of N.

  jax_privacy's `optimize_coefs_for_amplifications` searches the divisors of
  the dataset size (no client left over); capped at T (more bands than
  rounds changes nothing).
  """
  top = min(population // clients_per_round, total_rounds)
  return [b for b in range(1, top + 1) if population % b == 0] or [1]


@dataclasses.dataclass(frozen=True)
class BandChoice:
  """One number of bands: its strategy, sampling, rounds per client and loss.

  The strategy. C is lower-triangular Toeplitz with `bands` = b nonzero
  coefficients c_0..c_{b-1} (C[i, j] = c_{i-j} for 0 <= i - j < b), scaled to
  unit L2 norm, so every column of C has norm <= 1. As in every matrix
  mechanism (`tff_priv.mechanisms.blt`), the server adds sigma (C^{-1} z)_t to
  round t's clipped sum, z_t ~ N(0, I); the released prefix sums carry
  sigma A C^{-1} z, a post-processing of C x + sigma z. (C^{-1} z)_t needs the
  last b - 1 outputs only: w_t = (z_t - sum_{i=1}^{b-1} c_i w_{t-i}) / c_0
  (jax_privacy `inverse_as_streaming_matrix`, Algorithm 9 of 2306.08153).

  The privacy (Theorem 4 of 2306.08153, jax_privacy `amplified_bandmf_event`).
  The N clients are split by a secret permutation into b groups of
  floor(N / b) (the N mod b left over never take part); round t draws from
  group (t - 1) mod b, each of its clients independently with probability
  q = K / floor(N / b). A client's rounds are then b apart, where the columns
  of a b-banded C do not overlap, and T rounds are, for every client, the
  adaptive composition of ceil(T / b) Poisson-subsampled Gaussian mechanisms of
  noise multiplier z (sigma = z x clip, the column norm being 1):
  `SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)),
  ceil(T / b))` under add-or-remove-one. b = 1 is DP-FedAvg with Poisson
  sampling (C = [1]); b = N // K with q = 1 is the cyclic (k, b) schedule of
  `tff_priv.program.StreamSampler` without amplification.
  `tff_priv.aggregators.bandmf.plan_bands` picks b by the error model of
  `loss`, a function of (T, N, K, eps, delta) only.

  Attributes:
    bands: b.
    coefs: C's b Toeplitz coefficients, unit L2 norm.
    sampling_probability: q = K / floor(N / b).
    participations: ceil(T / b), the events composed.
    noise_multiplier: z for the target (None when not calibrated).
    score: z^2 x `loss(coefs, T)`: the mean prefix-sum noise variance in
      units of clip^2 (None when not calibrated).
  """

  bands: int
  coefs: np.ndarray
  sampling_probability: float
  participations: int
  noise_multiplier: Optional[float] = None
  score: Optional[float] = None


def band_choice(
    total_rounds: int, population: int, clients_per_round: int, bands: int
) -> BandChoice:
  """The strategy and sampling of `bands` bands (not calibrated)."""
  total_rounds = validation.int_at_least('total_rounds', total_rounds, 1)
  population = validation.int_at_least('population', population, 1)
  k = validation.int_at_least('clients_per_round', clients_per_round, 1)
  bands = validation.int_at_least('bands', bands, 1)
  if bands > population // k:
    raise ValueError(
        f'bands={bands} exceeds population // clients_per_round = '
        f'{population // k}: a group of floor(N / b) = {population // bands} '
        f'clients cannot give {k} clients a round'
    )
  if bands > total_rounds:
    # Groups past round T would never train, and the window would hold T
    # coefficients while q is b's.
    raise ValueError(f'bands={bands} exceeds total_rounds={total_rounds}')
  coefs = optimize(total_rounds, bands)
  return BandChoice(
      bands, coefs, k / (population // bands), math.ceil(total_rounds / bands)
  )
