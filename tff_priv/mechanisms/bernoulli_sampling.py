"""Data generation: Bernoulli (Poisson) mini-batches of a client's dataset.

Zhang, Chen, Yang's "data generation": each local example joins a mini-batch
independently with probability rho, so a batch has Binomial(|D|, rho) examples
(mean rho |D|), and inclusions are independent across examples and batches.
This is also the Poisson sampling of DP-SGD's privacy amplification.
"""

from typing import Optional

import tensorflow as tf

from tff_priv import validation

_ALL = 2**31 - 1


def bernoulli_batches(
    rho: float, num_batches: Optional[int] = None, seed: Optional[int] = None
):
  """A transform: dataset of examples -> `num_batches` Bernoulli(rho) batches.

  `bernoulli_batches(rho, num_batches, seed)` returns a dataset transform for
  `tff.simulation.datasets.ClientData.preprocess` (or any tf.data pipeline): it
  turns a client's dataset of examples into `num_batches` Bernoulli(rho)
  mini-batches of the whole dataset. The local dataset is materialised once per
  client (`batch` of all examples): client datasets in federated learning are
  small; this is what makes every example eligible for every batch. With a
  `seed` the examples are first put in a canonical order (`_canonical_order`),
  so that the same seed gives the same batches whatever order the dataset comes
  in: TFF's baseline preprocessing shuffles a client's examples and maps its
  batches with `deterministic=False`, and runs that differ only in their noise
  then still see the same batches (common random numbers).

  Args:
    rho: inclusion probability in (0, 1].
    num_batches: batches per pass; default ceil(1 / rho) (one epoch in
      expectation).
    seed: an int for reproducible batches (the same seed gives the same
      batches of the same examples, in whatever order they come), or None
      for fresh randomness each time the dataset is iterated.

  Returns:
    A function `dataset -> dataset` of batches with the element structure of
    the input, each component with a leading batch dimension (possibly 0).
  """
  rho = validation.half_open_unit('rho', rho)
  if num_batches is None:
    num_batches = int(-(-1 // rho))  # ceil(1 / rho)
  num_batches = validation.int_at_least('num_batches', num_batches, 1)
  if seed is not None:
    seed = validation.int_at_least('seed', seed, 0)

  def transform(dataset: tf.data.Dataset) -> tf.data.Dataset:
    everything = dataset.batch(_ALL)  # One element: the whole local dataset.
    seeds = tf.data.Dataset.random(seed=seed).batch(2).take(num_batches)

    def sample(batch_seed, examples):
      if seed is not None:
        examples = _canonical_order(examples)
      n = tf.shape(tf.nest.flatten(examples)[0])[0]
      keep = tf.random.stateless_uniform([n], seed=batch_seed) < rho
      return tf.nest.map_structure(lambda t: tf.boolean_mask(t, keep), examples)

    return tf.data.Dataset.zip((seeds, everything.repeat())).map(sample)

  return transform


def _canonical_order(examples):
  """The examples (a structure of [n, ...] tensors) sorted by their content.

  The key is a fixed random projection of every component (float64), so two
  examples tie only if they are equal (then their order does not matter) or,
  with probability ~0, by coincidence.
  """
  parts = tf.nest.flatten(examples)
  n = tf.shape(parts[0])[0]
  key = tf.zeros([n], tf.float64)
  for i, part in enumerate(parts):
    flat = tf.reshape(tf.cast(part, tf.float64), [n, -1])
    direction = tf.random.stateless_normal(
        tf.shape(flat)[1:], seed=[i, 0], dtype=tf.float64
    )
    key += tf.linalg.matvec(flat, direction)
  order = tf.argsort(key, stable=True)
  return tf.nest.map_structure(lambda t: tf.gather(t, order), examples)
