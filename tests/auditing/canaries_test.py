"""Tests of the one-shot estimate's canaries (tff_priv.auditing.canaries)."""

from absl.testing import absltest
import numpy as np

from tff_priv.auditing import canaries
from tff_priv.auditing import one_shot


class CanariesTest(absltest.TestCase):

  def test_directions_are_unit_distinct_and_a_function_of_the_seed(self):
    c = canaries.Canaries(seed=7, num_inserted=3, dimension=500, rate=0.5)
    rows = np.stack([c.direction(j) for j in range(6)])
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, rtol=1e-12)
    gram = rows @ rows.T - np.eye(6)
    self.assertLess(np.abs(gram).max(), 0.25)  # ~ 1/sqrt(500) each.
    again = canaries.Canaries(seed=7, num_inserted=3, dimension=500, rate=0.1)
    np.testing.assert_array_equal(again.direction(4), rows[4])
    other = canaries.Canaries(seed=8, num_inserted=3, dimension=500, rate=0.5)
    self.assertLess(abs(other.direction(4) @ rows[4]), 0.25)
    with self.assertRaisesRegex(ValueError, 'canary 6'):
      c.direction(6)

  def test_participation_at_the_rate_and_only_inserted_canaries(self):
    c = canaries.Canaries(seed=1, num_inserted=50, dimension=3, rate=0.2)
    joined = [c.participants(t) for t in range(1, 401)]
    self.assertTrue(all(np.all(j < 50) for j in joined))
    rate = sum(len(j) for j in joined) / (400 * 50)
    self.assertAlmostEqual(rate, 0.2, delta=0.01)  # sd 0.0028.
    np.testing.assert_array_equal(c.participants(3), joined[2])
    full = canaries.Canaries(seed=1, num_inserted=5, dimension=3, rate=1.0)
    np.testing.assert_array_equal(full.participants(9), np.arange(5))

  def test_epoch_canaries_join_exactly_once_per_epoch(self):
    # DP-FTRL's trees and BLT's streams hold for clients at most once per
    # epoch: each inserted canary joins one round of each epoch of 4 rounds,
    # which round following the seed.
    c = canaries.Canaries(
        seed=3, num_inserted=40, dimension=3, rate=0.25, rounds_per_epoch=4
    )
    for epoch in range(5):
      joined = np.concatenate(
          [c.participants(4 * epoch + t) for t in range(1, 5)]
      )
      np.testing.assert_array_equal(np.sort(joined), np.arange(40))
    firsts = [tuple(c.participants(4 * e + 1)) for e in range(5)]
    self.assertGreater(len(set(firsts)), 1)  # A fresh draw per epoch.
    with self.assertRaisesRegex(ValueError, 'rounds_per_epoch'):
      canaries.Canaries(
          seed=3, num_inserted=4, dimension=3, rate=0.5, rounds_per_epoch=0
      )

  def test_seed_from_is_a_separate_stream(self):
    self.assertEqual(canaries.seed_from(5), canaries.seed_from(5))
    self.assertNotEqual(canaries.seed_from(5), canaries.seed_from(6))
    self.assertNotEqual(canaries.seed_from(5), 5)

  def test_cosines_with_every_canary(self):
    c = canaries.Canaries(seed=2, num_inserted=2, dimension=1000, rate=0.5)
    delta = 3.0 * c.direction(1) + 0.5 * c.direction(3)
    cos = c.cosines(delta)
    expected = [one_shot.cosines(delta, c.direction(j))[0] for j in range(4)]
    np.testing.assert_allclose(cos, expected)
    self.assertGreater(cos[1], 0.9)
    self.assertLess(abs(cos[0]), 0.2)

  def test_estimate_reads_inserted_then_held_out(self):
    rng = np.random.default_rng(0)
    held_out = rng.normal(0.0, 0.01, 200)
    inserted = rng.normal(0.05, 0.01, 200)  # 5 sigma apart: visible.
    report = canaries.estimate(
        np.concatenate([inserted, held_out]),
        np.concatenate([inserted, held_out]),
        200,
        1e-5,
        8.0,
    )
    expected = one_shot.one_shot_epsilon(inserted, held_out, 1e-5)
    self.assertEqual(report['final_model_epsilon'], expected)
    self.assertEqual(report['all_iterates_epsilon'], expected)
    self.assertGreater(expected, 10.0)
    self.assertEqual(report['num_inserted'], 200)
    self.assertEqual(report['accounted_epsilon'], 8.0)
    self.assertIn('not a bound', report['meaning'])
    with self.assertRaisesRegex(ValueError, '2N = 400'):
      canaries.estimate(inserted, held_out, 200, 1e-5, 8.0)
    # 5 sigma apart with 200 canaries: the whole interval is above 8.
    self.assertEqual(report['final_model_verdict'], canaries.EXCEEDS)
    self.assertFalse(report['inconclusive'])
    self.assertIn('exceeds the accounted eps', report['headline'])

  def _leak_free(self, n, accounted, seed=0):
    # Inserted and held-out cosines from one distribution: nothing leaks.
    cosines = np.random.default_rng(seed).normal(0.0, 0.01, 2 * n)
    return canaries.estimate(cosines, cosines, n, 1e-5, accounted)

  def test_few_canaries_are_inconclusive_where_nothing_leaks(self):
    # Issue: 20 leak-free canaries gave point estimates of 4 (median) to
    # 27 against an accounted eps of 2, reported as if they meant something.
    report = self._leak_free(20, accounted=2.0)
    low, high = report['final_model_interval_95']
    self.assertLessEqual(low, report['final_model_epsilon'])
    self.assertGreaterEqual(high, report['final_model_epsilon'])
    self.assertGreater(high, 2.0)
    self.assertTrue(report['inconclusive'])
    self.assertEqual(report['all_iterates_verdict'], canaries.INCONCLUSIVE)
    self.assertGreater(report['null_quantile_95'], 10.0)
    self.assertIn('inconclusive with 20 canaries', report['headline'])
    self.assertEqual(report['kind'], 'estimate')

  def test_many_canaries_confirm_a_leak_free_run(self):
    report = self._leak_free(1000, accounted=2.0)
    self.assertLess(report['final_model_interval_95'][1], 2.0)
    self.assertEqual(report['final_model_verdict'], canaries.BELOW)
    self.assertEqual(report['all_iterates_verdict'], canaries.BELOW)
    self.assertFalse(report['inconclusive'])
    self.assertLess(report['null_quantile_95'], 2.0)

  def test_verdict(self):
    self.assertEqual(canaries.verdict(0.1, 0.9, 1.0), canaries.BELOW)
    self.assertEqual(canaries.verdict(0.1, 1.0, 1.0), canaries.INCONCLUSIVE)
    self.assertEqual(canaries.verdict(1.5, 3.0, 1.0), canaries.EXCEEDS)
    self.assertIsNone(canaries.verdict(0.1, 0.9, None))
    # 20 leak-free canaries show eps above 15 in 5% of runs: nothing can be
    # said of an accounted eps of 2.
    self.assertEqual(
        canaries.verdict(3.0, 9.0, 2.0, null_quantile=15.2),
        canaries.INCONCLUSIVE,
    )

  def test_small_count_warning(self):
    warning = canaries.small_count_warning(20, 1e-5, 2.0)
    self.assertIn('audit_canaries=20', warning)
    self.assertIn('use more canaries', warning)
    self.assertIsNone(canaries.small_count_warning(1000, 1e-5, 2.0))
    self.assertIsNone(canaries.small_count_warning(20, 1e-5, None))


if __name__ == '__main__':
  absltest.main()
