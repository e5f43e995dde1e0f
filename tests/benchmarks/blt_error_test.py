"""Tests for benchmarks.blt_error: its exact errors against the libraries'."""

import json

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_privacy.privacy.dp_query import tree_aggregation

from tff_priv.benchmarks import blt_error
from tff_priv.mechanisms import blt as blt_lib


def _monte_carlo_tree_variances(aggregator_cls, steps, coords=20000):
  """Per-step variance of tensorflow_privacy's tree cumsum noise."""
  generator = tree_aggregation.GaussianNoiseGenerator(
      1.0, tf.TensorSpec([coords], tf.float32), seed=7
  )
  aggregator = aggregator_cls(generator)
  state = aggregator.init_state()
  variances = []
  for _ in range(steps):
    noise, state = aggregator.get_cumsum_and_update(state)
    variances.append(float(np.mean(np.square(noise.numpy()))))
  return np.array(variances)


class TreeTest(tf.test.TestCase):

  def test_exact_variances_match_tensorflow_privacy(self):
    # 20000 coordinates: each estimate's relative std is sqrt(2 / 20000) =
    # 1%; the 6% tolerance is 6 standard deviations (fixed seed).
    steps = 13
    for cls, efficient in (
        (tree_aggregation.TreeAggregator, False),
        (tree_aggregation.EfficientTreeAggregator, True),
    ):
      with self.subTest(cls.__name__):
        self.assertAllClose(
            blt_error.tree_prefix_variances(steps, efficient),
            _monte_carlo_tree_variances(cls, steps),
            rtol=0.06,
        )

  def test_plain_tree_counts_dyadic_nodes(self):
    self.assertAllEqual(
        blt_error.tree_prefix_variances(8, efficient=False),
        [1, 1, 2, 1, 2, 2, 3, 1],
    )


class StrategiesTest(tf.test.TestCase):

  def test_sqrt_toeplitz_squares_to_prefix_sums(self):
    c = blt_lib.lower_triangular_toeplitz(blt_error.sqrt_toeplitz_coefs(40))
    self.assertAllClose(c @ c, np.tril(np.ones((40, 40))))

  def test_restarted_carries_finished_streams(self):
    self.assertAllEqual(
        blt_error.restarted(np.array([1.0, 3.0]), 3), [1, 3, 4, 6, 7, 9]
    )

  @pytest.mark.slow
  def test_rows_single_participation(self):
    rows = {r.strategy: r for r in blt_error.rows_for(100, 1)}
    self.assertAllClose(rows['identity'].rmse, np.sqrt(50.5))
    self.assertAllClose(rows['identity'].max_error, 10.0)
    self.assertEqual(rows['tree_efficient'].ratio, 1.0)
    # The BLT the program runs has the loss the optimiser reports.
    blt = blt_lib.optimize(100, error='max')
    self.assertAllClose(rows['blt_max'].max_error ** 2, blt.loss(100, 'max'))
    # Issue 27's target: BLT <= 0.8x the tree dp_ftrl runs.
    self.assertLess(rows['blt_max'].ratio, 0.8)
    self.assertLess(rows['blt_mean'].ratio, 0.8)
    self.assertLessEqual(rows['blt_mean'].rmse, rows['blt_max'].rmse)

  @pytest.mark.slow
  def test_rows_four_participations(self):
    rows = {r.strategy: r for r in blt_error.rows_for(100, 4)}
    self.assertEqual(rows['identity'].sensitivity_squared, 4)
    # Four trees of 25 leaves, ceil(log2 26) = 5 levels each.
    self.assertEqual(rows['tree_efficient'].sensitivity_squared, 20)
    self.assertLess(rows['blt_max'].ratio, 0.8)
    self.assertLess(rows['blt_stream'].ratio, 0.8)
    self.assertLess(rows['blt_cyclic'].ratio, 0.8)
    # The cyclic stream beats a stream per epoch at the same k.
    self.assertLess(rows['blt_cyclic'].max_error, rows['blt_max'].max_error)

  @pytest.mark.slow
  def test_run_writes_table_and_json(self):
    lines = []
    rows = blt_error.run(
        blt_error.Options(rounds='20', participations='1,2'), out=lines.append
    )
    self.assertLen(lines, 1)
    self.assertIn('| 20 | 2 | blt_stream |', lines[0])
    lines = []
    blt_error.run(
        blt_error.Options(rounds='20', participations='1', format='json'),
        out=lines.append,
    )
    self.assertLen(
        json.loads(lines[0]), len([r for r in rows if r.participations == 1])
    )

  def test_bad_options(self):
    with self.assertRaisesRegex(ValueError, 'divisible'):
      blt_error.compute(blt_error.Options(rounds='10', participations='3'))
    with self.assertRaisesRegex(ValueError, 'integers'):
      blt_error.compute(blt_error.Options(rounds='a'))
    with self.assertRaisesRegex(ValueError, 'format'):
      blt_error.compute(blt_error.Options(format='csv'))


if __name__ == '__main__':
  tf.test.main()
