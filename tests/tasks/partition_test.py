"""Tests for tasks.partition: exact properties of every split."""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_priv_tasks import partition

# 10 classes of unequal sizes (50..95 examples), shuffled.
_SIZES = np.arange(50, 100, 5)
_LABELS = np.random.default_rng(7).permutation(np.repeat(np.arange(10), _SIZES))


class PartitionTestCase(tf.test.TestCase, parameterized.TestCase):

  def assertDisjoint(self, parts):  # noqa: N802 (unittest's style)
    flat = np.concatenate(parts)
    self.assertLen(np.unique(flat), flat.size, 'an example is in two clients')

  def assertEveryExampleOnce(self, parts, n):  # noqa: N802 (unittest's style)
    self.assertAllEqual(np.sort(np.concatenate(parts)), np.arange(n))

  def assertSameParts(self, a, b):  # noqa: N802 (unittest's style)
    self.assertLen(a, len(b))
    for x, y in zip(a, b):
      self.assertAllEqual(x, y)


class IidTest(PartitionTestCase):

  def test_every_example_once_sizes_differ_by_at_most_one(self):
    parts = partition.iid(103, 10, seed=0)
    self.assertLen(parts, 10)
    self.assertEveryExampleOnce(parts, 103)
    sizes = [p.size for p in parts]
    self.assertLessEqual(max(sizes) - min(sizes), 1)
    self.assertEqual(parts[0].dtype, np.int64)

  def test_samples_per_client(self):
    parts = partition.iid(103, 10, seed=0, samples_per_client=7)
    self.assertEqual([p.size for p in parts], [7] * 10)
    self.assertDisjoint(parts)
    self.assertTrue(np.all(np.concatenate(parts) < 103))

  def test_deterministic_for_a_seed_and_random_across_seeds(self):
    self.assertSameParts(partition.iid(500, 5, 3), partition.iid(500, 5, 3))
    self.assertNotAllEqual(
        partition.iid(500, 5, 3)[0], partition.iid(500, 5, 4)[0]
    )

  @parameterized.named_parameters(
      ('zero_clients', dict(num_examples=10, num_clients=0), ValueError),
      ('float_clients', dict(num_examples=10, num_clients=2.0), TypeError),
      ('bool_clients', dict(num_examples=10, num_clients=True), TypeError),
      (
          'more_clients_than_examples',
          dict(num_examples=3, num_clients=4),
          ValueError,
      ),
      ('zero_examples', dict(num_examples=0, num_clients=1), ValueError),
      (
          'zero_samples',
          dict(num_examples=10, num_clients=2, samples_per_client=0),
          ValueError,
      ),
      (
          'too_many_samples',
          dict(num_examples=10, num_clients=2, samples_per_client=6),
          ValueError,
      ),
  )
  def test_bad_arguments(self, kwargs, error):
    with self.assertRaises(error):
      partition.iid(seed=0, **kwargs)


class LabelShardsTest(PartitionTestCase):

  @parameterized.parameters((20, 4), (37, 3), (10, 10), (12, 1))
  def test_every_example_once_and_k_distinct_classes(self, n_clients, k):
    parts = partition.label_shards(_LABELS, n_clients, k, seed=1)
    self.assertLen(parts, n_clients)
    self.assertEveryExampleOnce(parts, _LABELS.size)
    for p in parts:
      self.assertLen(np.unique(_LABELS[p]), k)

  @parameterized.parameters((20, 4), (37, 3), (50, 4))
  def test_each_class_held_by_floor_or_ceil_of_slots_over_classes(
      self, n_clients, k
  ):
    parts = partition.label_shards(_LABELS, n_clients, k, seed=2)
    holders = np.zeros(10, np.int64)
    for p in parts:
      holders[np.unique(_LABELS[p])] += 1
    self.assertEqual(holders.sum(), n_clients * k)
    slots = n_clients * k
    self.assertTrue(
        np.all((holders == slots // 10) | (holders == -(-slots // 10))),
        holders,
    )

  def test_samples_per_client_gives_equal_amounts_of_each_class(self):
    # UDP's non-IID setting: 4 kinds of digits with the same amount.
    parts = partition.label_shards(
        _LABELS, 20, 4, seed=3, samples_per_client=20
    )
    self.assertDisjoint(parts)
    for p in parts:
      counts = np.bincount(_LABELS[p], minlength=10)
      self.assertEqual(sorted(counts[counts > 0].tolist()), [5] * 4)

  def test_clients_differ_in_their_classes(self):
    # 50 clients x 4 of 10 classes: uniform draws from the C(10, 4) = 210 sets
    # give about 50 - C(50, 2) / 210 ~ 44 distinct sets; a round-robin deal of
    # class-sorted shards gives at most 10. 35 separates the two clearly.
    labels = np.repeat(np.arange(10), 100)
    parts = partition.label_shards(labels, 50, 4, seed=0)
    sets = {tuple(np.unique(labels[p])) for p in parts}
    self.assertGreaterEqual(len(sets), 35)

  def test_assign_classes_feasible_for_many_shapes(self):
    rng = np.random.default_rng(0)
    for _ in range(200):
      c = int(rng.integers(1, 12))
      k = int(rng.integers(1, c + 1))
      n = int(rng.integers(1, 60))
      assignment = partition.assign_classes(c, n, k, rng)
      self.assertLen(assignment, n)
      counts = np.zeros(c, np.int64)
      for chosen in assignment:
        self.assertLen(np.unique(chosen), k)
        counts[chosen] += 1
      self.assertLessEqual(counts.max() - counts.min(), 1)

  def test_fewer_slots_than_classes_leaves_classes_unused(self):
    parts = partition.label_shards(_LABELS, 5, 1, seed=0)
    self.assertDisjoint(parts)
    self.assertLen(np.unique(_LABELS[np.concatenate(parts)]), 5)

  def test_deterministic_for_a_seed(self):
    self.assertSameParts(
        partition.label_shards(_LABELS, 12, 2, seed=5),
        partition.label_shards(_LABELS, 12, 2, seed=5),
    )

  @parameterized.named_parameters(
      ('more_classes_than_exist', dict(classes_per_client=11), ValueError),
      ('zero_classes', dict(classes_per_client=0), ValueError),
      (
          'not_multiple_of_k',
          dict(classes_per_client=3, samples_per_client=10),
          ValueError,
      ),
      (
          'too_many_samples',
          dict(classes_per_client=2, samples_per_client=200),
          ValueError,
      ),
      ('zero_clients', dict(num_clients=0), ValueError),
  )
  def test_bad_arguments(self, kwargs, error):
    args = dict(labels=_LABELS, num_clients=10, classes_per_client=2, seed=0)
    args.update(kwargs)
    with self.assertRaises(error):
      partition.label_shards(**args)

  def test_bad_labels(self):
    with self.assertRaises(TypeError):
      partition.label_shards(np.array([0.5, 1.0]), 1, 1, seed=0)
    with self.assertRaises(ValueError):
      partition.label_shards(np.zeros((2, 2), np.int64), 1, 1, seed=0)


class DirichletTest(PartitionTestCase):

  def test_per_class_split_assigns_every_example_once(self):
    parts = partition.dirichlet(_LABELS, 15, alpha=0.5, seed=0)
    self.assertLen(parts, 15)
    self.assertEveryExampleOnce(parts, _LABELS.size)
    self.assertGreaterEqual(min(p.size for p in parts), 1)

  def test_min_samples_per_client_is_respected(self):
    parts = partition.dirichlet(
        _LABELS, 10, alpha=0.3, seed=0, min_samples_per_client=20
    )
    self.assertGreaterEqual(min(p.size for p in parts), 20)

  def test_per_client_mix_has_exact_sizes(self):
    parts = partition.dirichlet(
        _LABELS, 12, alpha=1.0, seed=0, samples_per_client=25
    )
    self.assertEqual([p.size for p in parts], [25] * 12)
    self.assertDisjoint(parts)

  # m = 5: 10 clients x 5 fit even if all ask for the smallest class (50).
  @parameterized.parameters(None, 5)
  def test_small_alpha_is_more_skewed_than_large_alpha(self, m):
    # Mean share of a client's largest class: alpha -> 0 gives one class per
    # client (share 1), alpha -> inf the global mix (largest share 95/725 =
    # 0.13). The two alphas are 4 orders of magnitude apart.
    def top_share(alpha):
      parts = partition.dirichlet(
          _LABELS, 10, alpha=alpha, seed=0, samples_per_client=m
      )
      return np.mean([np.bincount(_LABELS[p]).max() / p.size for p in parts])

    self.assertGreater(top_share(0.05), 0.6)
    self.assertLess(top_share(500.0), 0.25)

  def test_deterministic_for_a_seed(self):
    self.assertSameParts(
        partition.dirichlet(_LABELS, 8, 0.5, seed=9),
        partition.dirichlet(_LABELS, 8, 0.5, seed=9),
    )

  @parameterized.named_parameters(
      ('zero_alpha', dict(alpha=0.0), ValueError),
      ('negative_alpha', dict(alpha=-1.0), ValueError),
      ('inf_alpha', dict(alpha=float('inf')), ValueError),
      ('string_alpha', dict(alpha='1'), TypeError),
      ('zero_clients', dict(num_clients=0), ValueError),
      (
          'demand_exceeds_supply',
          dict(samples_per_client=100, alpha=0.01),
          ValueError,
      ),
      ('min_size_unreachable', dict(min_samples_per_client=100), ValueError),
  )
  def test_bad_arguments(self, kwargs, error):
    args = dict(labels=_LABELS, num_clients=10, alpha=1.0, seed=0)
    args.update(kwargs)
    with self.assertRaises(error):
      partition.dirichlet(**args)


class HoldoutAndDispatchTest(PartitionTestCase):

  def test_stratified_holdout(self):
    train, test = partition.stratified_holdout(_LABELS, 0.2, seed=0)
    self.assertEveryExampleOnce([train, test], _LABELS.size)
    self.assertAllEqual(
        np.bincount(_LABELS[test], minlength=10), np.round(0.2 * _SIZES)
    )

  @parameterized.parameters(0.0, 1.0, -0.1)
  def test_holdout_bad_fraction(self, fraction):
    with self.assertRaises(ValueError):
      partition.stratified_holdout(_LABELS, fraction, seed=0)

  def test_dispatch_matches_the_functions(self):
    self.assertSameParts(
        partition.partition(_LABELS, 7, 1, 'iid'),
        partition.iid(_LABELS.size, 7, 1),
    )
    self.assertSameParts(
        partition.partition(_LABELS, 7, 1, 'shards', classes_per_client=3),
        partition.label_shards(_LABELS, 7, 3, 1),
    )
    self.assertSameParts(
        partition.partition(_LABELS, 7, 1, 'dirichlet', alpha=0.7),
        partition.dirichlet(_LABELS, 7, 0.7, 1),
    )

  def test_unknown_method(self):
    with self.assertRaisesRegex(ValueError, 'partition must be one of'):
      partition.partition(_LABELS, 7, 1, 'pathological')


if __name__ == '__main__':
  tf.test.main()
