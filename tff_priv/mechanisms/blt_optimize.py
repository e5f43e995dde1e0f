"""The BLT optimiser: exact gradients over the (theta, theta_hat) pair.

The loss of a BLT C for n rounds and (k, b) participation is
`error(C^{-1}) x sensitivity^2(C)` (`blt.BLT.loss`), minimised as jax_privacy's
`buffered_toeplitz.optimize` minimises it: L-BFGS with exact gradients over the
"buf_decay pair" parameterization, here in TensorFlow (`make_loss`,
`minimize`, `optimize_buffers`); jax_privacy is not a dependency of this stack
(TFF 0.87 pins JAX 0.4.13).
"""

import numpy as np
import tensorflow as tf

_PENALTY = 1e-8
_MIN_GAP = 1e-12
# The largest decay (of C or C^{-1}): sigmoid(a) is exactly 1.0 in float64
# for a > 37, a decay the inversion theorem and `BLT.check_stable` refuse.
_MAX_DECAY = 1 - 1e-9
_LOG_MAX_DECAY = float(np.log(_MAX_DECAY))


def _decays(logits):
  """(theta, log theta) = (min(sigmoid(a), 1 - 1e-9), its log), a tensor."""
  log_theta = tf.minimum(-tf.nn.softplus(-logits), _LOG_MAX_DECAY)
  return tf.exp(log_theta), log_theta


def _output_scales(theta, theta_hat):
  """C's output scales omega from the decays of C and of C^{-1}.

  omega_i = prod_j (theta_i - theta_hat_j) / prod_{j != i} (theta_i - theta_j).
  """
  numerators = tf.reduce_prod(theta[:, None] - theta_hat[None, :], axis=1)
  differences = tf.linalg.set_diag(
      theta[:, None] - theta[None, :], tf.ones_like(theta)
  )
  return numerators / tf.reduce_prod(differences, axis=1)


def _coefs(log_theta, omega, n):
  """c_0 = 1, c_k = sum_i omega_i theta_i^(k - 1), k < n."""
  k = tf.range(n - 1, dtype=tf.float64)
  powers = tf.exp(k[None, :] * log_theta[:, None])
  return tf.concat(
      [
          tf.ones([1], tf.float64),
          tf.reduce_sum(omega[:, None] * powers, axis=0),
      ],
      0,
  )


def _sensitivity_squared(c, n, min_sep, k):
  """||sum_{m < k} C[:, m b]||^2 (C >= 0 non-increasing: the worst pattern)."""
  # column[j] = sum_{m < k, m b <= j} c[j - m b], as one gather (k and b
  # may be tensors: one trace serves every participation pattern).
  shifts = tf.range(k)[:, None] * min_sep
  index = tf.range(n)[None, :] - shifts
  column = tf.reduce_sum(
      tf.where(
          index >= 0,
          tf.gather(c, tf.maximum(index, 0)),
          tf.zeros([], tf.float64),
      ),
      axis=0,
  )
  return tf.reduce_sum(column**2)


def _barrier(x):
  """-log(x) where x > 0, +inf where not."""
  safe = tf.where(x > 0, x, tf.ones_like(x))
  return tf.where(
      x > 0,
      -tf.math.log(safe),
      tf.fill(tf.shape(x), tf.constant(np.inf, tf.float64)),
  )


def _min_gap(theta):
  gaps = tf.abs(theta[:, None] - theta[None, :])
  return tf.reduce_min(
      tf.linalg.set_diag(
          gaps, tf.fill(tf.shape(theta), tf.constant(np.inf, tf.float64))
      )
  )


# One traced loss per buffer count, shared by every n, error, k and b: a
# trace (about a second) costs more than a whole search at small n.
_TRACED = {}


def _traced_loss(num_buffers: int):
  """The traced loss of `num_buffers` buffers, cached.

  (params, n, max error?, b, k, approx optimum) -> (penalised loss, gradient).
  """
  if num_buffers in _TRACED:
    return _TRACED[num_buffers]

  @tf.function(
      autograph=False,
      input_signature=[
          tf.TensorSpec([2 * num_buffers], tf.float64),
          tf.TensorSpec([], tf.int32),
          tf.TensorSpec([], tf.bool),
          tf.TensorSpec([], tf.int32),
          tf.TensorSpec([], tf.int32),
          tf.TensorSpec([], tf.float64),
      ],
  )
  def value_and_gradient(params, n, max_error, min_sep, k, approx_optimum):
    with tf.GradientTape() as tape:
      tape.watch(params)
      loss, penalty = _parts(params, n, max_error, min_sep, k, num_buffers)
      value = loss / approx_optimum + _PENALTY * penalty
    gradient = tape.gradient(value, params)
    finite = tf.math.is_finite(value) & tf.reduce_all(
        tf.math.is_finite(gradient)
    )
    value = tf.where(finite, value, tf.constant(np.inf, tf.float64))
    gradient = tf.where(finite, gradient, tf.zeros_like(gradient))
    return value, gradient

  _TRACED[num_buffers] = value_and_gradient
  return value_and_gradient


def _parts(params, n, max_error, min_sep, k, num_buffers):
  """(loss, barrier penalty) of `params` = (logit theta, logit theta_hat)."""
  theta, log_theta = _decays(params[:num_buffers])
  theta_hat, log_theta_hat = _decays(params[num_buffers:])
  omega = _output_scales(theta, theta_hat)
  omega_hat = _output_scales(theta_hat, theta)
  c = _coefs(log_theta, omega, n)
  c_hat = _coefs(log_theta_hat, omega_hat, n)
  per_query = tf.cumsum(tf.cumsum(c_hat) ** 2)
  err = tf.where(max_error, per_query[-1], tf.reduce_mean(per_query))
  loss = err * _sensitivity_squared(c, n, min_sep, k)
  penalty = (
      tf.reduce_sum(_barrier(omega))
      + tf.reduce_sum(_barrier(-omega_hat))
      + _barrier(1 - tf.reduce_sum(omega))
      + _barrier(1 - tf.reduce_sum(omega / theta))
  )
  if num_buffers > 1:
    penalty += _barrier(_min_gap(theta) - _MIN_GAP) + _barrier(
        _min_gap(theta_hat) - _MIN_GAP
    )
  return loss, penalty


def make_loss(n: int, error: str, min_sep: int, k: int, num_buffers: int):
  """(params [2 nbuf] -> penalised normalised loss, params -> plain loss).

  The loss of a BLT C for n rounds and (k, b) participation is
  `error(C^{-1}) x sensitivity^2(C)` (`blt.BLT.loss`). jax_privacy's
  `buffered_toeplitz.optimize` (the reference: McMahan et al. 2024,
  "Hassle-free DP-FTRL"; McMahan and Pillutla 2025, "An inversion theorem for
  BLT matrices") minimises it by L-BFGS with exact (JAX) gradients over the
  "buf_decay pair" parameterization: the decays theta of C and theta_hat of
  C^{-1} are the parameters, and both output scales follow in closed form
  (Dvijotham et al. 2024, Lemma 5.2, as the inversion theorem's Theorem 2
  writes it):

    omega_i = prod_j (theta_i - theta_hat_j) / prod_{j != i} (theta_i - theta_j)

  and symmetrically for C^{-1}'s omega_hat (theta and theta_hat swapped). The
  loss is normalised by its approximate optimum (k + (1 + ln n / pi)^2) and the
  conditions of the inversion theorem's Theorem 1(a) (omega > 0, omega_hat < 0,
  sum omega < 1, sum omega / theta < 1, distinct decays) are log barriers of
  strength 1e-8. Here the same loss, parameterization and barriers run in
  TensorFlow (float64; theta = min(sigmoid(a), 1 - 1e-9), so 0 < theta < 1 by
  construction: with several participations the optimum pushes a decay towards
  1, where sigmoid rounds to exactly 1.0 in float64 and the BLT is refused as
  unstable; 1 - 1e-9 differs from 1 by less than 1e-4 over 10^5 rounds) with
  L-BFGS and a backtracking line search, which shrinks a step that leaves the
  barriers' domain (`minimize`); jax_privacy is not a dependency of this stack
  (TFF 0.87 pins JAX 0.4.13). The loss is computed from the materialised
  Toeplitz coefficients of C and C^{-1} (O(n x buffers) per evaluation;
  jax_privacy's closed forms for single participation give the same values).
  """
  traced = _traced_loss(num_buffers)
  args = (
      tf.constant(n, tf.int32),
      tf.constant(error == 'max'),
      tf.constant(min_sep, tf.int32),
      tf.constant(k, tf.int32),
      tf.constant(k + (1 + np.log(n) / np.pi) ** 2, tf.float64),
  )

  def value_and_gradient(params):
    return traced(params, *args)

  def plain(params):
    return float(
        _parts(
            tf.constant(params, tf.float64),
            n,
            error == 'max',
            min_sep,
            k,
            num_buffers,
        )[0]
    )

  return value_and_gradient, plain


def to_params(theta: np.ndarray, theta_hat: np.ndarray) -> np.ndarray:
  """The parameters (logit theta, logit theta_hat); inverse of `from_params`."""
  clip = lambda x: np.clip(np.asarray(x, np.float64), 1e-15, 1 - 1e-15)
  return np.concatenate(
      [
          np.log(clip(theta)) - np.log1p(-clip(theta)),
          np.log(clip(theta_hat)) - np.log1p(-clip(theta_hat)),
      ]
  )


def from_params(params: np.ndarray, num_buffers: int):
  """(theta, omega, theta_hat): C's decays and scales, C^{-1}'s decays."""
  params = tf.constant(params, tf.float64)
  theta = _decays(params[:num_buffers])[0]
  theta_hat = _decays(params[num_buffers:])[0]
  return (
      theta.numpy(),
      _output_scales(theta, theta_hat).numpy(),
      theta_hat.numpy(),
  )


def minimize(
    value_and_gradient,
    params: np.ndarray,
    max_iterations: int,
    memory: int = 15,
) -> np.ndarray:
  """L-BFGS from `params`, with a backtracking (Armijo) line search.

  Written here (numpy around the traced loss) rather than scipy's L-BFGS-B,
  whose line search does not step back from the barriers' +inf, or TFP's
  `lbfgs_minimize`, whose graph takes longer to trace than the whole search
  takes to run at these sizes.
  """

  def evaluate(x):
    value, gradient = value_and_gradient(tf.constant(x, tf.float64))
    return float(value), gradient.numpy()

  x = np.asarray(params, np.float64)
  f, g = evaluate(x)
  pairs = []
  stalled = 0
  for _ in range(max_iterations):
    # Two-loop recursion: d = -H g.
    q = g.copy()
    alphas = []
    for s_vec, y_vec, rho in reversed(pairs):
      alpha = rho * s_vec @ q
      alphas.append(alpha)
      q -= alpha * y_vec
    if pairs:
      s_vec, y_vec, _ = pairs[-1]
      q *= (s_vec @ y_vec) / (y_vec @ y_vec)
    else:
      q /= max(1.0, np.linalg.norm(g))
    for (s_vec, y_vec, rho), alpha in zip(pairs, reversed(alphas)):
      q += s_vec * (alpha - rho * y_vec @ q)
    direction = -q
    slope = g @ direction
    if not slope < 0:
      direction, slope = -g, -(g @ g)
      pairs = []
    step, accepted = 1.0, False
    for _ in range(60):
      x_new = x + step * direction
      f_new, g_new = evaluate(x_new)
      if np.isfinite(f_new) and f_new <= f + 1e-4 * step * slope:
        accepted = True
        break
      step *= 0.5
    if not accepted:
      break
    s_vec, y_vec = x_new - x, g_new - g
    if s_vec @ y_vec > 1e-16 * np.linalg.norm(s_vec) * np.linalg.norm(y_vec):
      pairs.append((s_vec, y_vec, 1.0 / (s_vec @ y_vec)))
      pairs = pairs[-memory:]
    stalled = stalled + 1 if f - f_new <= 1e-13 * abs(f) else 0
    x, f, g = x_new, f_new, g_new
    if stalled >= 5 or np.linalg.norm(g) <= 1e-12:
      break
  return x


def widened(theta: np.ndarray, theta_hat: np.ndarray):
  """The pair with one more buffer that nearly cancels (same C, feasible).

  The new decay sits below every other (theta_new < all theta, theta_hat),
  with theta_hat_new just under it: its omega is tiny and positive, its
  omega_hat tiny and negative, and the others' keep their signs.
  """
  low = 0.5 * float(np.min(np.concatenate([theta, theta_hat])))
  return (np.append(theta, low), np.append(theta_hat, low * (1 - 1e-4)))


def optimize_buffers(
    n: int, error: str, min_sep: int, k: int, starts, max_iterations: int
):
  """The best (theta, omega, theta_hat, loss) over `starts`.

  `starts`: a sequence of (theta, theta_hat).

  `blt.optimize` tries 1, 2, ... buffers; each count starts from jax_privacy's
  rational-approximation init and from the previous count's optimum with one
  more buffer that (nearly) cancels (the previous loss, feasible), keeps the
  better, and stops when a buffer improves the loss by less than `rtol`
  (jax_privacy's 1.01). Warm starts make more buffers never worse.
  """
  best = None
  for theta, theta_hat in starts:
    num_buffers = len(theta)
    value_and_gradient, plain = make_loss(n, error, min_sep, k, num_buffers)
    x0 = to_params(theta, theta_hat)
    if not np.isfinite(value_and_gradient(tf.constant(x0))[0].numpy()):
      continue  # Not inside the barriers' domain.
    x = minimize(value_and_gradient, x0, max_iterations)
    loss = plain(x)
    if np.isfinite(loss) and (best is None or loss < best[3]):
      best = (*from_params(x, num_buffers), loss)
  return best
