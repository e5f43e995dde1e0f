"""The two-point LDP encoder of LDP-FL (Sun, Qian, Chen 2021, Algorithm 2).

Pure TensorFlow; no TFF types. `encode` clips a value w to [c - r, c + r]
and outputs c + r q or c - r q, q = (e^eps + 1) / (e^eps - 1), an unbiased
estimate of the clipped value, eps-LDP for each value: exactly so for the
float implementation, not only for the formula (`EncodeResult`,
`threshold_bounds`). Each client draws its own seed (`fresh_seed`).
"""

import math
from typing import NamedTuple

import tensorflow as tf


def two_point_q(epsilon):
  """q = (e^eps + 1) / (e^eps - 1) = 1 + 2 / (e^eps - 1), computed with expm1.

  Args:
    epsilon: eps > 0 (Python number or tensor; Python numbers give float64).

  Returns:
    q as a tensor of `epsilon`'s float dtype.
  """
  epsilon = tf.convert_to_tensor(epsilon, dtype_hint=tf.float64)
  return 1.0 + 2.0 / tf.math.expm1(epsilon)


def output_values(center, radius, epsilon):
  """The two outputs (c - r q, c + r q) of the encoder."""
  center, radius, q = _as_float(center, radius, two_point_q(epsilon))
  return center - radius * q, center + radius * q


def prob_high(values, center, radius, epsilon):
  """p+(w) = 1/2 + (clip(w, c - r, c + r) - c) / (2 r q) (real-number formula).

  Evaluated without cancellation as the paper's Algorithm 2 writes it,
  [(w - c)(e^eps - 1) + r (e^eps + 1)] / [2 r (e^eps + 1)]
  = ((1 + z) sigmoid(eps) + (1 - z) sigmoid(-eps)) / 2,  z = (w - c) / r,
  so that p+(c - r) = 1 / (e^eps + 1) keeps full relative precision.

  Args:
    values: the inputs w (any shape).
    center: c, broadcastable to `values`.
    radius: r > 0, broadcastable to `values`.
    epsilon: eps > 0.

  Returns:
    The probability of the high output c + r q, shaped like `values`.
  """
  values, center, radius, epsilon = _as_float(
      values, center, radius, _float64(epsilon)
  )
  z = tf.clip_by_value((values - center) / radius, -1.0, 1.0)
  return 0.5 * (
      (1.0 + z) * tf.math.sigmoid(epsilon)
      + (1.0 - z) * tf.math.sigmoid(-epsilon)
  )


def variance(values, center, radius, epsilon):
  """Lemma 3: Var[M(w)] = r^2 q^2 - (clip(w, c - r, c + r) - c)^2."""
  values, center, radius, q = _as_float(
      values, center, radius, two_point_q(epsilon)
  )
  clipped = tf.clip_by_value(values, center - radius, center + radius)
  return tf.square(radius * q) - tf.square(clipped - center)


def mean_variance(values, center, radius, epsilon):
  """Lemma 4: variance of the mean of n independent reports, per coordinate.

  Var[(1/n) sum_u M(w_u)] = (1/n^2) sum_u Var[M(w_u)]
                          = r^2 q^2 / n - (1/n^2) sum_u (w_u - c)^2.

  Args:
    values: the clients' inputs stacked on axis 0, shape [n, ...].
    center: c, broadcastable to `values`.
    radius: r > 0, broadcastable to `values`.
    epsilon: eps > 0.

  Returns:
    The variance of the mean, shaped like `values[0]`.
  """
  per_report = variance(values, center, radius, epsilon)
  n = tf.cast(tf.shape(per_report)[0], per_report.dtype)
  return tf.reduce_sum(per_report, axis=0) / tf.square(n)


# The encoder's coins are integers k uniform in {0, ..., COIN_RESOLUTION - 1}:
# 16 random bits per value (half a Philox uint32).
COIN_BITS = 16
COIN_RESOLUTION = 2**COIN_BITS


def compute_dtype(dtype):
  """Dtype the encoder computes in: float64 for float64 values, else float32."""
  return tf.float64 if tf.as_dtype(dtype) == tf.float64 else tf.float32


def threshold_bounds(epsilon):
  """(k_min, N - k_min), N = COIN_RESOLUTION, k_min = ceil(N / (e^eps + 1)).

  The encoder clips its threshold to these integers, so every realized
  probability of the high output lies in [k_min / N, (N - k_min) / N] and no
  likelihood ratio exceeds (N - k_min) / k_min <= e^eps.

  The privacy of the float implementation is exact, not only that of the
  formula. Each value's coin is an integer k uniform in {0, ..., N - 1},
  N = 2^16 (16 Philox bits), and the output is high iff k < x(w), a threshold
  that the encoder clips to the integers [k_min, N - k_min],
  k_min = ceil(N / (e^eps + 1)). So the realized probability of the high
  output, ceil(x(w)) / N, lies in [k_min / N, (N - k_min) / N] for every
  input, and any likelihood ratio is at most (N - k_min) / k_min <= e^eps; the
  same holds for the low output. (For eps > ln(N - 1) ~ 11.1, k_min = 1 and
  the implementation is ln(N - 1)-LDP, more private than asked.) The price is
  a bias of at most 2 r q (1 + 2^-8) / N per value (the probability is
  rounded to the coin grid 1 / N, plus the float32 rounding of x, below
  2^-8), about 3e-5 r q, far below the noise (standard deviation ~ r q).
  `realized_prob_high` gives the exact probability of the implementation;
  tests check its ratios. Sixteen bits instead of a float32 uniform (23 bits)
  halve the random-number cost, the dominant cost.

  Args:
    epsilon: eps > 0 (Python number or tensor).

  Returns:
    Two float64 scalar tensors holding integers.
  """
  n = float(COIN_RESOLUTION)
  # p_min = 1 / (e^eps + 1) = sigmoid(-eps), in float64.
  k_min = tf.maximum(tf.math.ceil(n * tf.math.sigmoid(-_float64(epsilon))), 1.0)
  return k_min, n - k_min


def threshold(values, center, radius, epsilon):
  """The implementation's threshold x(w): high output iff coin k < x(w).

  x(w) = clip(N p+(w) - 1/2, k_min, N - k_min), computed in
  `compute_dtype(values.dtype)` as w a + b with a = N / (2 r q) and
  b = (N - 1) / 2 - c a (rounding errors are those of w itself, about
  2^-24 |w| for float32). Pr[k < x] = ceil(x) / N, so the shift by 1/2 rounds
  N p+(w) to the nearest integer. Clipping x is the same as clipping w to
  [c - r, c + r] first (x is increasing in w), up to the resolution 1 / N.

  Args:
    values: the inputs w (a float tensor).
    center: scalar c.
    radius: scalar r > 0.
    epsilon: scalar eps > 0.

  Returns:
    x(w), shaped like `values`, in the compute dtype.
  """
  values = tf.convert_to_tensor(values)
  dtype = compute_dtype(values.dtype)
  values = tf.cast(values, dtype)
  center = _cast(center, dtype)
  radius = _cast(radius, dtype)
  q = tf.cast(two_point_q(_float64(epsilon)), dtype)
  k_min, k_max = (tf.cast(k, dtype) for k in threshold_bounds(epsilon))
  n = float(COIN_RESOLUTION)
  scale = n / (2.0 * radius * q)
  offset = (n - 1.0) / 2.0 - center * scale
  # The ClipByValue kernel is one pass; tf.clip_by_value is two (min, max).
  return tf.raw_ops.ClipByValue(
      t=values * scale + offset, clip_value_min=k_min, clip_value_max=k_max
  )


def realized_prob_high(values, center, radius, epsilon):
  """Exact probability that `encode` outputs c + r q: ceil(x(w)) / N.

  Exact given uniform coins k (Philox output bits): Pr[k < x] = ceil(x) / N.

  Args:
    values: the inputs w (a float tensor).
    center: scalar c.
    radius: scalar r > 0.
    epsilon: scalar eps > 0.

  Returns:
    float64 probabilities shaped like `values`.
  """
  x = tf.cast(threshold(values, center, radius, epsilon), tf.float64)
  return tf.math.ceil(x) / float(COIN_RESOLUTION)


def coins(shape, seed, dtype=tf.float32):
  """Integers uniform in {0, ..., COIN_RESOLUTION - 1}, as `dtype`, from seed.

  16 bits per coin, taken from full-range uint32 Philox output (two coins per
  uint32): half the random bits, and half the time, of a float32 uniform.

  Args:
    shape: the output shape (a 1-D int tensor or list).
    seed: int32/int64 tensor of shape [2].
    dtype: a float dtype that holds the integers exactly (float32 or float64).

  Returns:
    A tensor of `shape` and `dtype`.
  """
  size = tf.reduce_prod(tf.cast(shape, tf.int64))
  words = tf.random.stateless_uniform(
      [(size + 1) // 2], seed, minval=None, maxval=None, dtype=tf.uint32
  )
  halves = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:size]
  return tf.reshape(tf.cast(halves, dtype), shape)


class EncodeResult(NamedTuple):
  """What `encode` returns for one tensor.

  Guarantees of the real-number mechanism (proved in the paper's appendix):

  * eps-LDP for each value (Thm 1): for any inputs w, w' and either output,
    Pr[M(w) = y] / Pr[M(w') = y] <= p+(c + r) / p+(c - r) = e^eps.
  * Unbiased (Lemma 2): E[M(w)] = w for w in [c - r, c + r]; a clipped value is
    estimated without bias as its clipped value.
  * Exact variance (Lemma 3): Var[M(w)] = r^2 q^2 - (w - c)^2. (The paper also
    writes r^2 O(e^-eps + e^-2eps); that is wrong: q -> 1 as eps -> infinity, so
    the variance tends to r^2 - (w - c)^2, not to 0.)
  * Mean of n independent reports (Lemma 4):
    Var[(1/n) sum_u M(w_u)] = r^2 q^2 / n - (1/n^2) sum_u (w_u - c)^2.

  Non-finite inputs (NaN, +-inf) are not encoded: their output is NaN, which
  means "no report" (the aggregator excludes it and counts it), and they are
  counted in `EncodeResult.num_nonfinite`.

  Attributes:
    encoded: c - r q or c + r q for each finite input; NaN ("no report") for
      each non-finite input. Same shape and dtype as the input.
    num_clipped: int64 scalar, finite inputs outside [c - r, c + r].
    num_nonfinite: int64 scalar, non-finite inputs (not encoded).
    finite_min: min of the finite inputs (+inf if there are none).
    finite_max: max of the finite inputs (-inf if there are none).
  """

  encoded: tf.Tensor
  num_clipped: tf.Tensor
  num_nonfinite: tf.Tensor
  finite_min: tf.Tensor
  finite_max: tf.Tensor


def fresh_seed() -> tf.Tensor:
  """A new int64[2] seed from OS-seeded entropy, drawn at every execution.

  Not affected by `tf.random.set_seed`; the paragraph below says why two
  clients' seeds (and one client's seeds in two rounds) are independent.

  Randomness. `encode` is a deterministic function of its `seed` (stateless
  Philox sampling), so mechanism tests are reproducible. In federated use each
  client must draw its own seed with `fresh_seed()` inside its own computation:
  it runs TensorFlow's `NonDeterministicInts` kernel, which draws from a
  generator seeded from OS entropy and ignores `tf.random.set_seed`, so the seed
  depends on nothing the server sends or any graph-level seed. Two clients (or
  one client in two rounds) run two executions of the kernel and get different
  seeds, so their outputs are independent even when their inputs are identical.
  Independence here is statistical: TensorFlow's non-deterministic generator is
  not a cryptographic one, so a deployment must seed each client from a CSPRNG.
  """
  return tf.raw_ops.NonDeterministicInts(shape=[2], dtype=tf.int64)


def encode(values, center, radius, epsilon, seed) -> EncodeResult:
  """Encodes every value of `values` with the two-point mechanism.

  For a value w, a center c, a radius r > 0 and a privacy parameter eps > 0,
  let q = (e^eps + 1) / (e^eps - 1). The encoder clips w to [c - r, c + r],
  then outputs

      c + r q   with probability  p+(w) = 1/2 + (w - c) / (2 r q),
      c - r q   otherwise.

  Vectorised: 16 Philox bits per value and a few elementwise passes. One min
  and one max reduction pick the bookkeeping needed: none when all values are
  inside [c - r, c + r], a clipped count when all are finite, the masking of
  non-finite values otherwise.

  Args:
    values: a float tensor (any shape); computed in float32 (float64 for
      float64 input), output cast back to its dtype.
    center: scalar c.
    radius: scalar r > 0.
    epsilon: scalar eps > 0.
    seed: int32/int64 tensor of shape [2] (stateless Philox); in federated
      use, `fresh_seed()` drawn by the client itself.

  Returns:
    An `EncodeResult`.
  """
  values = tf.convert_to_tensor(values)
  if not values.dtype.is_floating:
    raise TypeError(f'values must be a float tensor, got {values.dtype}')
  dtype = compute_dtype(values.dtype)
  x = tf.cast(values, dtype)
  center = _cast(center, dtype)
  radius = _cast(radius, dtype)
  rq = radius * tf.cast(two_point_q(_float64(epsilon)), dtype)
  low_out, high_out = center - rq, center + rq

  high = coins(tf.shape(x), seed, dtype) < threshold(x, center, radius, epsilon)
  encoded = tf.where(high, high_out, low_out)

  x_min, x_max = tf.reduce_min(x), tf.reduce_max(x)
  range_low, range_high = center - radius, center + radius
  # reduce_min/max propagate NaN (and +-inf reaches the max/min), so both are
  # finite iff every value is, and the comparisons are False for NaN.
  all_finite = tf.logical_and(
      tf.math.is_finite(x_min), tf.math.is_finite(x_max)
  )
  in_range = tf.logical_and(x_min >= range_low, x_max <= range_high)
  zero = tf.constant(0, tf.int64)

  def fast():
    return encoded, zero, zero, x_min, x_max

  def clipping():
    clipped = tf.raw_ops.ClipByValue(
        t=x, clip_value_min=range_low, clip_value_max=range_high
    )
    num_clipped = tf.reduce_sum(tf.cast(tf.not_equal(x, clipped), tf.int32))
    return encoded, tf.cast(num_clipped, tf.int64), zero, x_min, x_max

  def nonfinite():
    finite = tf.math.is_finite(x)
    outside = tf.logical_or(x < range_low, x > range_high)
    num_clipped = tf.math.count_nonzero(tf.logical_and(finite, outside))
    num_nonfinite = tf.math.count_nonzero(tf.logical_not(finite))
    nan = tf.constant(math.nan, dtype)
    inf = tf.constant(math.inf, dtype)
    return (
        tf.where(finite, encoded, nan),
        num_clipped,
        num_nonfinite,
        tf.reduce_min(tf.where(finite, x, inf)),
        tf.reduce_max(tf.where(finite, x, -inf)),
    )

  out, num_clipped, num_nonfinite, finite_min, finite_max = tf.cond(
      in_range,
      fast,
      lambda: tf.cond(all_finite, clipping, nonfinite),
  )
  return EncodeResult(
      encoded=tf.cast(out, values.dtype),
      num_clipped=num_clipped,
      num_nonfinite=num_nonfinite,
      finite_min=tf.cast(finite_min, values.dtype),
      finite_max=tf.cast(finite_max, values.dtype),
  )


def _cast(x, dtype):
  """tf.cast that does not round a Python float to float32 on the way."""
  return tf.cast(tf.convert_to_tensor(x, dtype_hint=dtype), dtype)


def _float64(x):
  return _cast(x, tf.float64)


def _as_float(*args):
  """Casts args to one dtype: the first float argument's, or float64."""
  dtype = tf.float64
  for a in args:
    a_dtype = getattr(a, 'dtype', None)
    if a_dtype is not None and tf.as_dtype(a_dtype).is_floating:
      dtype = tf.as_dtype(a_dtype)
      break
  return tuple(_cast(a, dtype) for a in args)
