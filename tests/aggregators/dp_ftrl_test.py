"""Tests for tff_priv.aggregators.dp_ftrl: restarts, events, fresh noise."""

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import runtime
from tff_priv.accounting import guarantees
from tff_priv.aggregators import dp_ftrl
from tff_priv.benchmarks import blt_error

_TYPE = tff.TensorType(np.float32, [3])


def _tree(count, z=1.0, rounds=3):
  return dp_accounting.SelfComposedDpEvent(dp_ftrl.tree_event(z, rounds), count)


class TreeRestartFactoryTest(tf.test.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    runtime.set_context('simulation')

  def test_a_tree_is_charged_whole_at_its_first_round(self):
    process = dp_ftrl.TreeRestartFactory(1.0, 2, 1.0, 3).create(_TYPE)
    state = process.initialize()
    self.assertEqual(
        guarantees.extract_dp_event(state, allow_initial_state=True), _tree(1)
    )
    values = [np.ones(3, np.float32), np.zeros(3, np.float32)]
    counts = []
    for _ in range(7):
      state = process.next(state, values).state
      counts.append(guarantees.extract_dp_event(state).count)
    self.assertEqual(counts, [1, 0, 0, 1, 0, 0, 1])
    # A forced restart (the program's resume) charges a tree mid-epoch.
    state = process.next(dp_ftrl.with_restart_forced(state), values).state
    self.assertEqual(guarantees.extract_dp_event(state), _tree(1))
    state = process.next(state, values).state
    self.assertEqual(guarantees.extract_dp_event(state), _tree(0))

  def test_a_forced_restart_in_the_same_process_draws_fresh_noise(self):
    # A user's loop restores a saved state and restarts its tree: the
    # restarted tree's first release must not repeat the one it replaces
    # (zero updates: a release is its noise alone).
    d = 20_000
    process = dp_ftrl.TreeRestartFactory(1.0, 1, 1.0, 10).create(
        tff.TensorType(np.float32, [d])
    )
    zeros = [np.zeros(d, np.float32)]
    state = process.next(process.initialize(), zeros).state
    saved = dp_ftrl.with_restart_forced(state)
    first = np.asarray(process.next(saved, zeros).result)
    second = np.asarray(process.next(saved, zeros).result)
    # Independent draws: corr ~ N(0, 1 / d), |corr| < 0.05 is 7 sigma.
    self.assertLess(abs(np.corrcoef(first, second)[0, 1]), 0.05)

  def test_each_tree_draws_fresh_noise(self):
    # All-zero updates: a round's result is the tree's noise residual; the
    # first round of every tree is one fresh node of std z C / K.
    process = dp_ftrl.TreeRestartFactory(1.0, 1, 1.0, 2).create(_TYPE)
    state = process.initialize()
    firsts = []
    for r in range(6):
      output = process.next(state, [np.zeros(3, np.float32)])
      state = output.state
      if r % 2 == 0:
        firsts.append(np.asarray(output.result))
    self.assertFalse(np.allclose(firsts[0], firsts[1]))
    self.assertFalse(np.allclose(firsts[1], firsts[2]))

  def test_released_noise_has_the_restarted_trees_variance(self):
    # Zero updates, 3 trees of 5 rounds and a forced restart mid-tree: the
    # model's noise after round t (the sum of the releases) has per
    # coordinate the variance of tensorflow_privacy's efficient tree prefix
    # sum of its tree plus the finished trees' final ones
    # (`blt_error.restarted`). 20,000 coordinates: each estimate's relative
    # std is sqrt(2 / 20000) = 1%, the 6% tolerance 6 stds (fixed seed; false
    # alarm < 1e-7 over the 14 rounds). A restart that broadcast the fresh
    # tree over the old tree's levels gave 5.57 for 2.57 at round 6.
    d = 20000
    value_type = tff.TensorType(np.float32, [d])
    process = dp_ftrl.TreeRestartFactory(1.0, 1, 1.0, 5, noise_seed=3).create(
        value_type
    )
    state = process.initialize()
    total, measured = np.zeros(d), []
    for r in range(14):
      if r == 12:
        state = dp_ftrl.with_restart_forced(state)  # Tree 4 after 2 rounds.
      output = process.next(state, [np.zeros(d, np.float32)])
      state = output.state
      total += np.asarray(output.result, np.float64)
      measured.append(np.mean(total**2))
    tree = blt_error.tree_prefix_variances(5)
    expected = np.concatenate(
        [
            blt_error.restarted(tree, 2),
            2 * tree[-1] + tree[:2],
            2 * tree[-1] + tree[1] + tree[:2],
        ]
    )
    self.assertAllClose(measured, expected, rtol=0.06)

  @pytest.mark.slow
  def test_the_first_release_is_drawn_from_the_key_not_the_clock(self):
    # Zero inputs: round 1 releases the tree's first node over K. TFF's own
    # factory draws it from a seed read from tf.timestamp(). Here it is a
    # function of the key (and the nonce, 0 with a given key) alone: two
    # builds with key 123, made at different times, release the same values;
    # key 124 releases others.
    zeros = [np.zeros(3, np.float32)]

    def first_release(key):
      process = dp_ftrl.TreeRestartFactory(
          1.5, 2, 1.0, 3, noise_seed=key
      ).create(_TYPE)
      return np.asarray(process.next(process.initialize(), zeros).result)

    first = first_release(123)
    self.assertGreater(np.linalg.norm(first), 0)
    self.assertAllEqual(first_release(123), first)
    self.assertFalse(np.allclose(first_release(124), first))

  def test_every_build_and_every_initialize_draws_secret_seeds(self):
    # A resumed run builds its process anew: a new key from the operating
    # system. Two runs of one process: a new nonce each initialize().
    zeros = [np.zeros(3, np.float32)]

    def first_release(process):
      return np.asarray(process.next(process.initialize(), zeros).result)

    factory = dp_ftrl.TreeRestartFactory(1.0, 1, 1.0, 2)
    one, other = factory.create(_TYPE), factory.create(_TYPE)
    releases = [first_release(one), first_release(one), first_release(other)]
    for i in range(3):
      for j in range(i):
        self.assertFalse(np.allclose(releases[i], releases[j]), (i, j))
    # A forced restart (the program's resume) in a new build: fresh noise for
    # the rounds run again.
    state = one.next(one.initialize(), zeros).state
    again = [
        np.asarray(p.next(dp_ftrl.with_restart_forced(state), zeros).result)
        for p in (one, other)
    ]
    self.assertFalse(np.allclose(again[0], again[1]))

  def test_near_zero_noise_gives_the_clipped_mean(self):
    process = dp_ftrl.TreeRestartFactory(1e-9, 2, 1.0, 2).create(_TYPE)
    state = process.initialize()
    values = [
        np.array([3.0, 4.0, 0.0], np.float32),  # Norm 5: clipped to 1.
        np.array([0.1, 0.0, 0.2], np.float32),
    ]
    expected = (values[0] / 5.0 + values[1]) / 2.0
    for _ in range(3):
      output = process.next(state, values)
      state = output.state
      self.assertAllClose(output.result, expected, rtol=1e-5, atol=1e-7)

  def test_guarantee_and_bad_arguments(self):
    factory = dp_ftrl.TreeRestartFactory(1.0, 2, 1.0, 3)
    self.assertEqual(factory.guarantee.neighboring_relation, 'replace_special')
    self.assertEqual(factory.guarantee.noise, 'central')
    self.assertEqual(guarantees.guarantee_of(factory), dp_ftrl.GUARANTEE)
    for kwargs in (
        dict(noise_multiplier=0.0),
        dict(clip=-1.0),
        dict(rounds_per_tree=0),
    ):
      args = dict(
          noise_multiplier=1.0, clients_per_round=2, clip=1.0, rounds_per_tree=3
      )
      args.update(kwargs)
      with self.assertRaises(ValueError):
        dp_ftrl.TreeRestartFactory(**args)


if __name__ == '__main__':
  tf.test.main()
