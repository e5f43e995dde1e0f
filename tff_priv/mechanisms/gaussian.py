"""Client-side Gaussian noise on a structure of tensors.

The one noise primitive of tff_priv's factories (UDP, distortion, Fed-SMP):
`add_gaussian_noise(value, stddev)` returns value + N(0, stddev^2 I), its
draws (without a seed) independent across clients and rounds.
"""

from typing import Any, Optional

import tensorflow as tf


def add_gaussian_noise(
    value: Any, stddev: Any, seed: Optional[Any] = None
) -> Any:
  """value + N(0, stddev^2 I), coordinate-wise, on a structure of float tensors.

  Every coordinate of every tensor gets its own standard normal draw scaled by
  `stddev`. Used by UDP (noise on the uploaded model, Wei et al. eq. (10) /
  Algorithm 1) and by parameter distortion (W~ = W + N(0, sigma_e^2 I)).

  Randomness: the draws come from `tf.random.normal` with no seed, i.e. TF's
  nondeterministically seeded kernel, so two clients (or two rounds) with the
  same input get independent noise; nothing derived from a broadcast value
  enters it. tests/mechanisms/gaussian_test.py checks the moments and the
  independence, and tests/aggregators/udp_test.py checks it through
  TFF across clients and rounds.

  Args:
    value: a tensor or a (nested) structure of float tensors.
    stddev: scalar noise standard deviation (Python number or tensor), >= 0;
      the number 0 returns `value` unchanged.
    seed: None (default): TF's nondeterministically seeded kernel, so every
      client gets its own fresh randomness. An int64 [2] tensor makes the
      noise a deterministic function of the seed (tests only: a seed known to
      the server, such as the round's mask seed, must never drive a client's
      noise, since the server could then subtract it).

  Returns:
    The same structure with independent Gaussian noise added.
  """
  if isinstance(stddev, (int, float)) and stddev == 0.0:
    return value
  leaves = [tf.convert_to_tensor(t) for t in tf.nest.flatten(value)]
  noised = []
  for i, t in enumerate(leaves):
    std = tf.cast(stddev, t.dtype)
    if seed is None:
      noise = tf.random.normal(tf.shape(t), stddev=std, dtype=t.dtype)
    else:
      leaf_seed = tf.random.experimental.stateless_fold_in(
          tf.cast(seed, tf.int64), i
      )
      noise = tf.random.stateless_normal(
          tf.shape(t), seed=leaf_seed, stddev=std, dtype=t.dtype
      )
    noised.append(t + noise)
  return tf.nest.pack_sequence_as(value, noised)
