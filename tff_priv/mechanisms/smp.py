"""Fed-SMP's client step: shared mask, L2 clip, noise on the kept coordinates.

Sparsified model perturbation (Hu, Guo, Gong, "Federated Learning with
Sparsified Model Perturbation"). Everything here is pure TensorFlow (no TFF
types), usable in and out of `tff.tensorflow.computation`s. A round is a
Gaussian mechanism of sensitivity C (add/remove one client) and noise
multiplier sigma whatever the number n of reporting clients, for the order of
steps `sparsify_clip_noise` follows, the only correct one.
"""

import math
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from tff_priv.mechanisms import clipping
from tff_priv.mechanisms import gaussian


def num_kept(dimension: int, compression: float) -> int:
  """Number of kept coordinates k = min(d, max(1, floor(p d + 1/2))).

  Args:
    dimension: d >= 1, the number of coordinates of the flat update.
    compression: p = k / d in (0, 1].

  Returns:
    k, the round of p * d to the nearest integer, at least 1 and at most d.

  Raises:
    ValueError: `dimension` < 1 or `compression` outside (0, 1].
  """
  if dimension < 1:
    raise ValueError(f'dimension must be >= 1, got {dimension}')
  if not 0.0 < compression <= 1.0:
    raise ValueError(f'compression must be in (0, 1], got {compression}')
  return int(min(dimension, max(1, math.floor(compression * dimension + 0.5))))


def rand_k_scale(dimension: int, k: int) -> float:
  """The rand_k rescaling d / k that makes the sparsified update unbiased."""
  return dimension / k


def client_noise_stddev(
    noise_multiplier: float, clip: float, num_clients: Any
) -> tf.Tensor:
  """Per-client, per-kept-coordinate noise std sigma * C / sqrt(n).

  The sum of the n reporting clients' independent noises then has std exactly
  sigma * C on every kept coordinate, whatever n is.

  Args:
    noise_multiplier: sigma >= 0.
    clip: C > 0.
    num_clients: n, the round's reporting clients (number or integer tensor);
      n < 1 is treated as 1.

  Returns:
    A float32 scalar tensor.
  """
  n = tf.maximum(tf.cast(num_clients, tf.float32), 1.0)
  return tf.constant(noise_multiplier * clip, tf.float32) / tf.sqrt(n)


def secure_sum_bound(
    clip: float,
    noise_multiplier: float,
    num_stddevs: float,
) -> float:
  """Bound B = C + z sigma C on every uploaded value.

  After clipping, a kept coordinate is at most C in absolute value (all of the
  norm on one coordinate); a client's noise std is sigma C / sqrt(n) <= sigma C
  and exceeds z of its standard deviations with probability 2 (1 - Phi(z))
  per value (about 2e-9 at z = 6). A secure sum clipping to [-B, B] therefore
  alters only values whose noise is beyond z standard deviations, for any n.
  """
  return clip + num_stddevs * noise_multiplier * clip


def round_seed(seed: Any, round_num: Any) -> tf.Tensor:
  """The public seed of round `round_num`: `seed` (int64 [2]) folded with it."""
  return tf.random.experimental.stateless_fold_in(
      tf.cast(seed, tf.int64), tf.cast(round_num, tf.int64)
  )


def rand_k_indices(seed: Any, dimension: int, k: int) -> tf.Tensor:
  """Exactly k of d coordinates, uniformly without replacement (public seed).

  A stateless Fisher-Yates shuffle of 0..d-1 keyed by `seed` (int64 [2]),
  truncated to its first k entries: every k-subset is equally likely, and the
  same seed gives the same subset on every machine, so the server can send the
  seed instead of the indices. When k == d the result is 0..d-1.

  Args:
    seed: int64 tensor of shape [2] (e.g. from `round_seed`).
    dimension: d.
    k: number of coordinates to keep, 1 <= k <= d.

  Returns:
    int32 tensor [k] of distinct indices in [0, d), sorted increasingly.
  """
  if not 1 <= k <= dimension:
    raise ValueError(f'k must be in [1, {dimension}], got {k}')
  if k == dimension:
    return tf.range(dimension, dtype=tf.int32)
  permutation = tf.random.experimental.stateless_shuffle(
      tf.range(dimension, dtype=tf.int32), seed=tf.cast(seed, tf.int64)
  )
  # Sorted indices make the gather and scatter sequential in memory.
  return tf.sort(permutation[:k])


def top_k_indices(scores: Any, k: int) -> tf.Tensor:
  """Indices of the k largest `scores` (ties: lower index first), sorted.

  Sorted increasingly.
  """
  scores = tf.convert_to_tensor(scores)
  dimension = scores.shape[0]
  if dimension is not None and not 1 <= k <= dimension:
    raise ValueError(f'k must be in [1, {dimension}], got {k}')
  # sorted=True: TF documents that equal values then keep the lower index,
  # which makes the choice deterministic under ties.
  indices = tf.math.top_k(scores, k=k, sorted=True).indices
  return tf.sort(indices)


def top_k_mask_from_public_update(
    theta_pub: Any, theta: Any, k: int
) -> tf.Tensor:
  """Fed-SMP's top_k mask: the k largest |theta_pub - theta| coordinates.

  `theta` is the round's global model and `theta_pub` the model the server
  obtained by training from `theta` on its public data (same optimizer and
  local period as the clients). Both are public, so the mask is too: it does
  not depend on any client's data.

  Args:
    theta_pub: structure of float tensors (the public-data model).
    theta: structure of float tensors like `theta_pub` (the global model).
    k: number of coordinates to keep.

  Returns:
    int32 tensor [k] of indices into `flatten(theta)`, sorted increasingly.
  """
  tf.nest.assert_same_structure(theta_pub, theta)
  return top_k_indices(tf.abs(flatten(theta_pub) - flatten(theta)), k)


def flatten(structure: Any) -> tf.Tensor:
  """Concatenates a structure of tensors into one vector, in `tf.nest` order."""
  tensors = [tf.reshape(t, [-1]) for t in tf.nest.flatten(structure)]
  if len(tensors) == 1:
    return tensors[0]
  return tf.concat(tensors, axis=0)


def unflatten(flat: Any, template: Any) -> Any:
  """Inverse of `flatten`: `template`, a structure of tensors or TensorSpecs."""
  leaves = tf.nest.flatten(template)
  shapes = [tf.TensorShape(leaf.shape) for leaf in leaves]
  sizes = [int(s.num_elements()) for s in shapes]
  if len(leaves) == 1:
    parts = [flat]
  else:
    parts = tf.split(flat, sizes)
  return tf.nest.pack_sequence_as(
      template, [tf.reshape(p, s) for p, s in zip(parts, shapes)]
  )


def sparsify(update: Any, indices: Optional[Any], scale: float = 1.0) -> Any:
  """`scale * flatten(update)[indices]`, without building the flat vector.

  Args:
    update: a tensor or a structure of tensors (d values in `flatten` order).
    indices: int tensor [k] of coordinates of `flatten(update)`, sorted
      increasingly and distinct (as `rand_k_indices` and `top_k_indices`
      return them); None keeps every coordinate and returns `update` itself
      (scaled), with its structure.
    scale: multiplies the kept values (d / k for rand_k).

  Returns:
    A tensor [k] (or the scaled structure when `indices` is None).
  """
  if indices is None:
    if scale == 1.0:
      return update
    return tf.nest.map_structure(
        lambda t: t * tf.constant(scale, t.dtype), update
    )
  leaves = [tf.reshape(t, [-1]) for t in tf.nest.flatten(update)]
  indices = tf.cast(indices, tf.int32)
  if len(leaves) == 1:
    kept = tf.gather(leaves[0], indices)
  else:
    # The indices are sorted, so those of leaf i form one contiguous run,
    # [offsets[i], offsets[i + 1]) in value: gather each run from its own
    # leaf. This avoids a copy of all d values per client (tf.concat).
    sizes = [int(leaf.shape[0]) for leaf in leaves]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    bounds = tf.searchsorted(indices, tf.constant(offsets), side='left')
    kept = tf.concat(
        [
            tf.gather(leaf, indices[bounds[i] : bounds[i + 1]] - offsets[i])
            for i, leaf in enumerate(leaves)
        ],
        axis=0,
    )
    kept.set_shape(indices.shape)  # The runs add up to the k indices.
  if scale != 1.0:
    kept = kept * tf.constant(scale, kept.dtype)
  return kept


def sparsify_clip_noise(
    update: Any,
    indices: Optional[Any],
    *,
    scale: float,
    clip: float,
    noise_stddev: float,
    seed: Optional[Any] = None,
) -> Any:
  """One client's Fed-SMP upload: sparsify (and scale), THEN clip, THEN noise.

  A client's update is one flat vector `Delta` of `d` values (a structure of
  tensors is flattened in `tf.nest` order). One round of Fed-SMP with K expected
  clients, noise multiplier sigma, clip C, `k` kept coordinates and n clients
  that report in the round:

  1. Mask. The server picks one set `S` of exactly `k` coordinates for the
     round, the same for every client of the round, fresh every round, never
     derived from private data:
     * rand_k: `S` is a uniform k-subset of {0, ..., d-1} (`rand_k_indices`,
       from a public seed);
     * top_k: `S` holds the `k` largest |theta_pub - theta| coordinates of an
       update trained by the server on public data
       (`top_k_mask_from_public_update`).
  2. Sparsify: `v = s * Delta[S]`, with `s = d / k` for rand_k (so that
     E_S[scatter(v)] = Delta: unbiased) and `s = 1` for top_k (biased).
  3. Clip: `v <- v * min(1, C / ||v||_2)`, so ||v||_2 <= C.
  4. Noise on the kept coordinates only: `v <- v + N(0, sigma^2 C^2 / n I_k)`
     (`client_noise_stddev`; n is counted by a secure sum and broadcast first).
  5. Upload the `k` values of `v` (through secure aggregation); the server
     divides the sum by the fixed K and scatters it back into the `d`
     coordinates.

  Guarantee: the sum of the n uploads is the sum of n vectors of L2 norm <= C
  plus exactly N(0, sigma^2 C^2 I_k) whatever n is, a Gaussian mechanism of
  sensitivity C (add/remove one client) and noise multiplier sigma:
  (alpha, alpha / (2 sigma^2))-RDP per round, whatever k, d and n; the mask is
  public and data-independent, so it releases nothing. (The paper's per-client
  noise sigma^2 C^2 / K gives the sum a noise std sigma C sqrt(n / K) that
  reveals n and is below sigma C whenever fewer than K clients report.)

  Order traps (the order above is the only correct one): clipping before
  sparsifying and rescaling leaves the uploaded norm up to (d/k) C, not C (the
  sensitivity argument fails); noise added before masking and clipping goes
  through the d/k scaling and a data-dependent clip factor, so its std on the
  kept coordinates is no longer sigma C / sqrt(n); noise on all d coordinates
  puts d sigma^2 C^2 / K^2 of noise energy into the average instead of
  k sigma^2 C^2 / K^2; a per-client mask breaks secure aggregation and leaks
  data.

  Args:
    update: the client's update, a tensor or structure of tensors of d values.
    indices: the round's k mask indices (int [k], sorted, distinct); None keeps
      all d coordinates (k = d: DP-FedAvg's client step with the noise at the
      client).
    scale: d / k for rand_k (`rand_k_scale`), 1 for top_k.
    clip: C > 0, bound on the L2 norm of the k scaled values.
    noise_stddev: per-coordinate noise std, sigma C / sqrt(n)
      (`client_noise_stddev`).
    seed: see `gaussian.add_gaussian_noise` (None in production).

  Returns:
    The upload `clip_l2(scale * flatten(update)[indices], C) + noise`: a
    tensor [k], or a structure like `update` when `indices` is None. An
    update with any value that is not finite, kept by the mask or not, is
    sent as noise alone (tff_priv's policy: the client contributes zeros).
  """
  kept = sparsify(update, indices, scale)
  if indices is not None:
    # A NaN the mask drops still makes the whole client non-finite.
    finite = tf.reduce_all(
        [tf.reduce_all(tf.math.is_finite(t)) for t in tf.nest.flatten(update)]
    )
    kept = tf.where(finite, kept, tf.zeros_like(kept))
  return gaussian.add_gaussian_noise(
      clipping.clip_l2(kept, clip), noise_stddev, seed
  )


def densify(values: Any, indices: Optional[Any], dimension: int) -> tf.Tensor:
  """Scatters k values back into d coordinates (zeros elsewhere).

  `indices` None: the identity.
  """
  values = tf.convert_to_tensor(values)
  if indices is None:
    return values
  return tf.scatter_nd(
      tf.expand_dims(tf.cast(indices, tf.int32), 1), values, [dimension]
  )


def check_mask_indices(indices: Any, k: int) -> np.ndarray:
  """Validates externally supplied mask indices; returns them sorted as int32.

  Args:
    indices: array-like of k distinct non-negative integers.
    k: the expected number of indices.

  Returns:
    np.int32 array [k], sorted increasingly.

  Raises:
    ValueError: wrong shape or length, non-integer, negative or repeated
      indices (the upper bound d is checked by the aggregator, which knows d).
  """
  array = np.asarray(indices)
  if array.ndim != 1 or array.shape[0] != k:
    raise ValueError(f'indices must have shape [{k}], got {array.shape}')
  if not np.issubdtype(array.dtype, np.integer):
    raise ValueError(f'indices must be integers, got dtype {array.dtype}')
  if k and array.min() < 0:
    raise ValueError(f'indices must be >= 0, got {array.min()}')
  if len(np.unique(array)) != k:
    raise ValueError('indices must be distinct')
  if k and array.max() > np.iinfo(np.int32).max:
    raise ValueError(f'indices must fit in int32, got {array.max()}')
  return np.sort(array).astype(np.int32)
