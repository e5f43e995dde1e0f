"""Tests for tff_priv.mechanisms.bernoulli_sampling (data generation)."""

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.mechanisms import bernoulli_sampling


def _inclusion_matrix(transform, n):
  dataset = tf.data.Dataset.from_tensor_slices(
      {'x': np.arange(n), 'y': np.arange(n) * 10}
  )
  rows = []
  for batch in transform(dataset):
    self_check = batch['y'].numpy() == batch['x'].numpy() * 10
    assert self_check.all(), 'components of an example must stay together'
    row = np.zeros(n, bool)
    row[batch['x'].numpy()] = True
    rows.append(row)
  return np.array(rows)


class BernoulliSamplingTest(tf.test.TestCase):

  def test_mean_batch_size_and_independence(self):
    n, rho, batches = 50, 0.2, 2000
    included = _inclusion_matrix(
        bernoulli_sampling.bernoulli_batches(rho, batches, seed=7), n
    )
    self.assertEqual(included.shape, (batches, n))
    sizes = included.sum(1)
    # Mean batch size rho n = 10; SE = sqrt(n rho (1 - rho) / batches) = 0.063.
    self.assertAllClose(
        sizes.mean(), rho * n, atol=5 * np.sqrt(n * rho * (1 - rho) / batches)
    )
    # Variance of a Binomial(n, rho): n rho (1 - rho) = 8 (it would differ if
    # inclusions were dependent); the sample variance's SE ~ 8 sqrt(2 / B)
    # = 0.25; tolerance 5 SE.
    self.assertAllClose(
        sizes.var(), n * rho * (1 - rho), atol=5 * 8 * np.sqrt(2 / batches)
    )
    # Pairwise: P(i and j) = rho^2 for i != j. Average over all pairs of the
    # correlation of inclusion indicators ~ 0 (SE of one pair's correlation
    # 1/sqrt(B) = 0.022; the mean over 1225 pairs is far tighter; 0.01 bound).
    corr = np.corrcoef(included.T.astype(float))
    off_diagonal = corr[~np.eye(n, dtype=bool)]
    self.assertLess(abs(off_diagonal.mean()), 0.01)
    self.assertLess(np.abs(off_diagonal).max(), 6 / np.sqrt(batches))
    # Every example is eligible for every batch: each is included ~ rho B times.
    per_example = included.mean(0)
    self.assertLess(
        np.abs(per_example - rho).max(), 5 * np.sqrt(rho * (1 - rho) / batches)
    )

  def test_seed_reproducible_and_fresh_without_seed(self):
    transform = bernoulli_sampling.bernoulli_batches(0.3, 20, seed=3)
    a = _inclusion_matrix(transform, 40)
    self.assertAllEqual(a, _inclusion_matrix(transform, 40))
    fresh = bernoulli_sampling.bernoulli_batches(0.3, 20)
    self.assertNotAllEqual(
        _inclusion_matrix(fresh, 40), _inclusion_matrix(fresh, 40)
    )

  def test_seed_gives_the_same_batches_in_any_input_order(self):
    # TFF's preprocessing shuffles: the batches must not depend on the order.
    transform = bernoulli_sampling.bernoulli_batches(0.3, 20, seed=3)
    n = 40
    order = np.random.default_rng(0).permutation(n)
    shuffled = tf.data.Dataset.from_tensor_slices({'x': order, 'y': order * 10})
    batches = [sorted(b['x'].numpy()) for b in transform(shuffled)]
    expected = _inclusion_matrix(transform, n)
    self.assertEqual(batches, [sorted(np.flatnonzero(row)) for row in expected])
    # Without the canonical order the masks would pick other examples.
    self.assertNotEqual(
        batches[0],
        sorted(order[np.flatnonzero(expected[0])]),
    )

  def test_default_batches_and_client_data(self):
    client_data = tff.simulation.datasets.TestClientData(
        {
            'a': {'x': np.arange(10, dtype=np.float32)},
            'b': {'x': np.arange(4, dtype=np.float32)},
        }
    )
    transform = bernoulli_sampling.bernoulli_batches(0.25, seed=1)
    preprocessed = client_data.preprocess(transform)
    batches = list(preprocessed.create_tf_dataset_for_client('a'))
    self.assertLen(batches, 4)  # ceil(1 / 0.25).
    for batch in batches:
      self.assertEqual(batch['x'].shape.rank, 1)

  def test_bad_arguments(self):
    for kwargs, name in (
        (dict(rho=0.0), 'rho'),
        (dict(rho=1.5), 'rho'),
        (dict(rho=0.5, num_batches=0), 'num_batches'),
        (dict(rho=0.5, seed=-1), 'seed'),
    ):
      with self.assertRaisesRegex(ValueError, name):
        bernoulli_sampling.bernoulli_batches(**kwargs)


if __name__ == '__main__':
  tf.test.main()
