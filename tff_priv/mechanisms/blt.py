"""Buffered Linear Toeplitz (BLT) matrix factorization for DP-FTRL (no TFF).

References: Dvijotham, McMahan, Pillutla, Steinke, Thakurta, "Efficient and
near-optimal noise generation for streaming differential privacy" (arXiv
2404.16706); McMahan, Xu, Zhang et al., "Hassle-free DP-FTRL for production"
(arXiv 2408.08868); the open implementation in jax_privacy
(`jax_privacy/matrix_factorization/buffered_toeplitz.py`, `toeplitz.py`,
`sensitivity.py`), whose math this module follows in numpy / TensorFlow. The
mechanism, its error and its constraints: `BLT`.
"""

import dataclasses
from typing import Optional, Sequence

import numpy as np
import scipy.linalg
import scipy.signal
import scipy.special
import tensorflow as tf

from tff_priv.mechanisms import blt_sensitivity

ERRORS = ('max', 'mean')


@dataclasses.dataclass(frozen=True)
class BLT:
  """A lower-triangular Toeplitz C = BLT(buf_decay, output_scale), float64.

  Matrix factorization. The prefix sums of the clients' clipped sums x_1..x_T
  are A x, A the all-ones lower-triangular T x T matrix. A = B C with C
  lower-triangular Toeplitz; the mechanism releases A (x + C^{-1} sigma z)
  = A x + B sigma z, z ~ N(0, I): a post-processing of C x + sigma z, a Gaussian
  mechanism whose sensitivity is that of C (`blt_sensitivity`). In training the
  server adds, at round t, the noise sigma (C^{-1} z)_t to the round's sum.

  The BLT. `buf_decay` theta (num_buffers values in (0, 1)) and `output_scale`
  omega define C's Toeplitz coefficients
      c_0 = 1,  c_k = sum_i omega_i theta_i^(k-1)  (k >= 1)
  (jax_privacy `BufferedToeplitz.toeplitz_coefs`). C^{-1} is again lower
  triangular Toeplitz and again a BLT (`inverse`: 2404.16706 Lemma 5.2 /
  jax_privacy `BufferedToeplitz.inverse`, diagonalising Theta - omega 1^T).
  Its product with a stream needs no matrix: Algorithm 3 of 2408.08868
  (jax_privacy `StreamingMatrixBuilder.build_inverse`), with num_buffers
  buffers of the value's shape, each round
      x_t = z_t - sum_i omega_i buf_i ;  buf_i <- theta_i buf_i + x_t,
  O(num_buffers x d) work and state; x_t = (C^{-1} z)_t.

  Error. With unit noise the released prefix sums' noise is B z, B = A C^{-1},
  lower-triangular Toeplitz with coefficients b = cumsum(C^{-1} coefs); the
  variance of prefix sum t is sum_{j<=t} b_j^2 (increasing in t, so the max
  error is the last round's). The optimiser minimises error x sensitivity^2
  (the noise std is proportional to the sensitivity at a fixed privacy level).

  Constraints (as in jax_privacy `LossFn.compute_penalties`, after "An
  inversion theorem for BLT matrices", arXiv 2504.21413, Thm 1(a)): theta in
  (0, 1), omega > 0, sum_i omega_i / theta_i < 1 (the "Pillutla score"). Then
  c_k > 0 and non-increasing (c_1 = sum omega < sum omega / theta < 1 = c_0) and
  C^{-1}'s decays lie in (0, 1): the streaming inverse is stable. The
  parameterization theta = sigmoid(a), omega_i = theta_i s p_i, s = sigmoid(u),
  p = softmax(v) satisfies all of them for any real (a, v, u), so scipy's
  L-BFGS-B runs unconstrained.
  """

  buf_decay: np.ndarray
  output_scale: np.ndarray

  def __post_init__(self):
    theta = np.atleast_1d(np.asarray(self.buf_decay, np.float64))
    omega = np.atleast_1d(np.asarray(self.output_scale, np.float64))
    if theta.ndim != 1 or theta.shape != omega.shape:
      raise ValueError(
          'buf_decay and output_scale must be 1-D of one length, got '
          f'{theta.shape} and {omega.shape}'
      )
    if not (np.all(np.isfinite(theta)) and np.all(np.isfinite(omega))):
      raise ValueError('buf_decay and output_scale must be finite')
    object.__setattr__(self, 'buf_decay', theta)
    object.__setattr__(self, 'output_scale', omega)

  @classmethod
  def identity(cls) -> 'BLT':
    """C = I (no buffers): independent noise each round, plain DP-SGD."""
    return cls(np.zeros(0), np.zeros(0))

  @property
  def num_buffers(self) -> int:
    return int(self.buf_decay.size)

  def toeplitz_coefs(self, n: int) -> np.ndarray:
    """c_0..c_{n-1}: c_0 = 1, c_k = sum_i omega_i theta_i^(k-1)."""
    powers = np.arange(max(n - 1, 0))[:, None]
    tail = (self.buf_decay[None, :] ** powers * self.output_scale).sum(axis=1)
    return np.concatenate([[1.0], tail])[:n]

  def materialize(self, n: int) -> np.ndarray:
    """The n x n matrix C."""
    return lower_triangular_toeplitz(self.toeplitz_coefs(n))

  def inverse_coefs(self, n: int) -> np.ndarray:
    """C^{-1}'s Toeplitz coefficients (= the streaming inverse of e_0).

    C's generating function is the rational 1 + sum_i omega_i x / (1 -
    theta_i x) = P(x) / Q(x), Q = prod_i (1 - theta_i x), so C^{-1}'s is
    Q / P: scipy's `lfilter` expands it in O(n num_buffers) compiled work
    (the Python loop of `streaming_inverse` is what the optimiser would
    otherwise call at every loss evaluation; tests check the two agree).
    """
    impulse = np.zeros(n)
    if n:
      impulse[0] = 1.0
    if self.num_buffers == 0:
      return impulse
    poly = np.polynomial.polynomial
    factors = [np.array([1.0, -theta]) for theta in self.buf_decay]
    q = np.array([1.0])
    for factor in factors:
      q = poly.polymul(q, factor)
    p = q
    for i, omega in enumerate(self.output_scale):
      others = np.array([0.0, omega])  # omega_i x
      for j, factor in enumerate(factors):
        if j != i:
          others = poly.polymul(others, factor)
      p = poly.polyadd(p, others)
    # Coefficients in increasing powers of x, as lfilter takes them.
    return scipy.signal.lfilter(q, p, impulse)

  def inverse(self) -> 'BLT':
    """The BLT of C^{-1} (jax_privacy `BufferedToeplitz.inverse`).

    C^{-1} is the BLT-like stream with state matrix Theta - omega 1^T and
    output -omega; diagonalising it (its eigenvectors have the closed form
    omega_i / (lambda_j - theta_i)) gives buf_decay lambda and output scale
    (E^{-1} (-omega)) * (E^T 1). Needs distinct decays.
    """
    if self.num_buffers == 0:
      return self
    theta, omega = self.buf_decay, self.output_scale
    if self.num_buffers > 1:
      gaps = np.abs(theta[:, None] - theta[None, :]) + np.eye(theta.size)
      if np.min(gaps) < 1e-9:
        raise ValueError('inverse needs buf_decay values at least 1e-9 apart')
    evals = np.linalg.eigvals(
        np.diag(theta) - np.outer(omega, np.ones_like(omega))
    )
    if np.max(np.abs(evals.imag)) > 1e-9:
      raise ValueError(f'the inverse of this BLT is not a real BLT: {evals}')
    evals = evals.real
    evecs = omega[:, None] / (evals[None, :] - theta[:, None])
    out = np.linalg.solve(evecs, -omega) * (evecs.T @ np.ones_like(omega))
    order = np.argsort(evals)[::-1]
    return BLT(evals[order], out[order])

  def inverse_buf_decay(self) -> np.ndarray:
    """Eigenvalues of Theta - omega 1^T: C^{-1}'s decays (stable if |.| < 1)."""
    if self.num_buffers == 0:
      return np.zeros(0)
    theta, omega = self.buf_decay, self.output_scale
    return np.linalg.eigvals(
        np.diag(theta) - np.outer(omega, np.ones_like(omega))
    )

  def check_stable(self) -> 'BLT':
    """self, if theta in (0,1), C >= 0 non-increasing and C^{-1} stable."""
    if self.num_buffers and not np.all(
        (self.buf_decay > 0) & (self.buf_decay < 1)
    ):
      raise ValueError(f'buf_decay must lie in (0, 1), got {self.buf_decay}')
    if self.num_buffers and np.max(np.abs(self.inverse_buf_decay())) >= 1:
      raise ValueError(
          'the streaming inverse of this BLT is unstable (C^{-1} has a decay '
          f'of modulus >= 1: {self.inverse_buf_decay()})'
      )
    return self

  def streaming_inverse(self, z) -> np.ndarray:
    """C^{-1} z for z of shape [T, ...], round by round (Alg. 3, 2408.08868)."""
    z = np.asarray(z, np.float64)
    buffers = np.zeros((self.num_buffers,) + z.shape[1:])
    out = np.empty_like(z)
    for t in range(z.shape[0]):
      out[t], buffers = inverse_step(
          buffers, z[t], self.buf_decay, self.output_scale
      )
    return out

  def prefix_errors(self, n: int) -> np.ndarray:
    """Variance of each released prefix sum's noise, unit noise, C's scale."""
    return prefix_errors_from_noising(self.inverse_coefs(n))

  def sensitivity(self, n: int, min_sep: int = 1, max_participations: int = 1):
    """The L2 sensitivity of C over n rounds, (k, b) participation."""
    if max_participations == 1:
      return blt_sensitivity.single_participation_sensitivity(
          self.toeplitz_coefs(n)
      )
    return blt_sensitivity.minsep_sensitivity(
        self.toeplitz_coefs(n), min_sep, max_participations
    )

  def loss(self, n, error='max', min_sep=1, max_participations=1) -> float:
    """max (or mean) prefix-sum variance x sensitivity^2 (unit noise)."""
    errors = self.prefix_errors(n)
    value = errors[-1] if error == 'max' else errors.mean()
    return float(value * self.sensitivity(n, min_sep, max_participations) ** 2)


def lower_triangular_toeplitz(coefs) -> np.ndarray:
  """The lower-triangular Toeplitz matrix of first column `coefs`."""
  coefs = np.asarray(coefs, np.float64)
  return scipy.linalg.toeplitz(coefs, np.zeros_like(coefs))


def prefix_errors_from_noising(noising_coefs) -> np.ndarray:
  """Row norms^2 of B = A C^{-1} from C^{-1}'s Toeplitz coefficients."""
  b = np.cumsum(np.asarray(noising_coefs, np.float64))
  return np.cumsum(b * b)


def inverse_step(buffers, z, buf_decay, output_scale):
  """One round of C^{-1}: (x_t, new buffers), numpy or TF tensors.

  Args:
    buffers: [num_buffers, *shape], zeros before the first round.
    z: this round's input, [*shape].
    buf_decay: C's BLT buffer decays theta, [num_buffers].
    output_scale: C's BLT output scales omega, [num_buffers].

  Returns:
    x_t = z_t - sum_i omega_i buf_i, and buf_i <- theta_i buf_i + x_t.
  """
  if isinstance(z, np.ndarray) or np.isscalar(z):
    theta = np.reshape(buf_decay, (-1,) + (1,) * np.ndim(z))
    omega = np.reshape(output_scale, (-1,) + (1,) * np.ndim(z))
    x = z - np.sum(omega * buffers, axis=0)
    return x, theta * buffers + x
  z = tf.convert_to_tensor(z)
  shape = tf.concat([[-1], tf.ones([tf.rank(z)], tf.int32)], axis=0)
  theta = tf.reshape(tf.cast(buf_decay, z.dtype), shape)
  omega = tf.reshape(tf.cast(output_scale, z.dtype), shape)
  x = z - tf.reduce_sum(omega * buffers, axis=0)
  return x, theta * buffers + x[tf.newaxis]


# ---------------------------------------------------------------------------
# Optimisation.


def rational_approx_init(num_buffers: int) -> BLT:
  """jax_privacy's `BufferedToeplitz.from_rational_approx_to_sqrt_x` init.

  The BLT of C^{-1} from the rational approximation of sqrt(1 - x)
  (2404.16706 Prop. 4.5), inverted, then scaled to max decay 1 - 1e-6 and
  Pillutla score 1 - 1e-6 (jax_privacy `get_init_blt`).
  """
  d1 = (num_buffers + 1) // 2
  h = 1.6 * np.pi / np.sqrt(2 * (d1 + 1))
  ks = np.arange(-d1 + 1, num_buffers - d1 + 1) - 1
  decay = 1 / (1 + np.exp(2 * h * ks))
  scale = -(decay**2) * np.exp(3 * h * ks) / np.sum(np.exp(h * ks) * decay)
  blt = BLT(decay, scale).inverse()
  theta = blt.buf_decay * min(1.0, (1 - 1e-6) / np.max(blt.buf_decay))
  omega = blt.output_scale
  omega = omega * min(1.0, (1 - 1e-6) / np.sum(omega / theta))
  return BLT(theta, omega)


def optimize(
    n: int,
    *,
    error: str = 'max',
    min_sep: int = 1,
    max_participations: Optional[int] = 1,
    num_buffers: Optional[int] = None,
    max_buffers: int = 6,
    rtol: float = 1.01,
    init: Optional[BLT] = None,
    max_iterations: int = 600,
) -> BLT:
  """A BLT minimising (max or mean) prefix-sum error x sensitivity^2, n rounds.

  L-BFGS with exact gradients over jax_privacy's (theta, theta_hat)
  parameterization (`blt_optimize`). With `num_buffers` None, 1, 2, ...
  buffers are tried, each from the rational-approximation init and from the
  previous count's optimum widened by a cancelling buffer (so more buffers
  are never worse), while each adds at least `rtol`'s improvement
  (jax_privacy `_optimize_increasing_nbuf`).

  Args:
    n: number of rounds T.
    error: 'max' (last round's variance) or 'mean' (over rounds).
    min_sep: b of the participation pattern (b, k) of the sensitivity.
    max_participations: k of that pattern (k = 1: single participation).
    num_buffers: a fixed number of buffers (reached through 1, 2, ...:
      each count warm-starts the next), or None to choose.
    max_buffers: the most buffers tried when choosing.
    rtol: relative improvement needed to accept one more buffer.
    init: a start for a fixed `num_buffers` (beside the default one).
    max_iterations: L-BFGS iterations per start.

  Returns:
    The best BLT found; its loss is `blt.loss(n, error, min_sep, k)`.
  """
  # pylint: disable=g-import-not-at-top
  from tff_priv.mechanisms import blt_optimize
  # pylint: enable=g-import-not-at-top
  if error not in ERRORS:
    raise ValueError(f'error must be one of {ERRORS}, got {error!r}')
  k = blt_sensitivity.true_max_participations(n, min_sep, max_participations)
  if n == 1:
    return BLT.identity()

  def starts(nbuf, previous):
    out = []
    if init is not None and init.num_buffers == nbuf:
      out.append((init.buf_decay, init.inverse().buf_decay))
    rational = rational_approx_init(nbuf)
    out.append((rational.buf_decay, rational.inverse().buf_decay))
    if previous is not None:
      out.append(blt_optimize.widened(*previous))
    return out

  def fit(nbuf, previous):
    found = blt_optimize.optimize_buffers(
        n, error, min_sep, k, starts(nbuf, previous), max_iterations
    )
    if found is None:
      return None
    theta, omega, theta_hat, _ = found
    blt = BLT(theta, omega)
    return blt, blt.loss(n, error, min_sep, k), (theta, theta_hat)

  if num_buffers is not None:
    # Each count from its own init and from the one before, widened: the
    # 1-buffer optimum warm-starts the 2-buffer search, and so on (from the
    # rational init alone, a search can stall with a buffer switched off).
    previous, found = None, (BLT.identity(), None, None)
    for nbuf in range(1, num_buffers + 1):
      found = fit(nbuf, previous)
      if found is None:
        raise RuntimeError(f'no stable BLT of {nbuf} buffers found')
      previous = found[2]
    return found[0].check_stable()
  best = BLT.identity()
  best_loss = best.loss(n, error, min_sep, k)
  previous = None
  for nbuf in range(1, max_buffers + 1):
    found = fit(nbuf, previous)
    if found is None or not rtol * found[1] < best_loss:
      break
    best, best_loss, previous = found
  return best.check_stable()


def blt_from_lists(
    buf_decay: Sequence[float], output_scale: Sequence[float]
) -> BLT:
  """A checked BLT from plain lists (flags, configs)."""
  return BLT(np.asarray(buf_decay), np.asarray(output_scale)).check_stable()
