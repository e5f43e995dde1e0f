"""Client-side Gaussian noise on a structure of tensors.

`add_gaussian_noise(value, stddev)` returns value + N(0, stddev^2 I): every
coordinate of every tensor gets its own standard normal draw scaled by
`stddev`. Used by UDP (noise on the uploaded model, Wei et al. eq. (10) /
Algorithm 1) and by parameter distortion (W~ = W + N(0, sigma_e^2 I)).

Randomness: the draws come from `tf.random.normal` with no seed, i.e. TF's
nondeterministically seeded kernel, so two clients (or two rounds) with the
same input get independent noise; nothing derived from a broadcast value
enters it. tests/mechanisms/gaussian_test.py checks the moments and the
independence, and tests/aggregators/gaussian_udp_test.py checks it through
TFF across clients and rounds.
"""

import tensorflow as tf


def add_gaussian_noise(value, stddev):
  """value + N(0, stddev^2 I), coordinate-wise, for a structure of float tensors.

  Args:
    value: a tensor or a (nested) structure of float tensors.
    stddev: scalar noise standard deviation (Python number or tensor), >= 0.

  Returns:
    The same structure with independent Gaussian noise added.
  """

  def noise(t):
    t = tf.convert_to_tensor(t)
    std = tf.cast(stddev, t.dtype)
    return t + tf.random.normal(tf.shape(t), stddev=std, dtype=t.dtype)

  return tf.nest.map_structure(noise, value)
