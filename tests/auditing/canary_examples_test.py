"""Tests for tff_priv.auditing.canary_examples: slots, guesses, the bound."""

import numpy as np
import pytest
import tensorflow as tf

from tff_priv.auditing import canary_examples
from tff_priv.auditing import one_run


def _canaries(seed=3, m=40, clients=7):
  return canary_examples.CanaryExamples(seed, m, clients, (4, 4, 1), 10)


class CanaryExamplesTest(tf.test.TestCase):

  def test_draws_follow_the_seed_and_include_about_half(self):
    a, b, c = _canaries(), _canaries(), _canaries(seed=4)
    self.assertAllEqual(a.included, b.included)
    self.assertAllEqual(a.x, b.x)
    self.assertNotAllEqual(a.x, c.x)
    many = canary_examples.CanaryExamples(0, 4000, 5, (2,), 3)
    # Binomial(4000, 1/2): std 0.0079; 5 std.
    self.assertNear(many.included.mean(), 0.5, 0.04)
    self.assertAllEqual(np.unique(a.x), [-1.0, 1.0])
    self.assertTrue(np.all((a.y >= 0) & (a.y < 10)))

  def test_slots_hold_the_canary_if_in_and_a_blank_if_out(self):
    canaries = _canaries()
    seen = 0
    for client in range(7):
      x, y = canaries.slots(client)
      own = np.arange(client, 40, 7)
      self.assertLen(y, len(own))  # The same |D_i| whichever are in.
      # What the program adds to |D_i| for the sensitivity.
      self.assertEqual(canary_examples.num_slots(40, 7, client), len(own))
      seen += len(own)
      for row, j in enumerate(own):
        if canaries.included[j]:
          self.assertAllEqual(x[row], canaries.x[j])
          self.assertEqual(y[row], canaries.y[j])
        else:
          self.assertAllEqual(x[row], np.zeros((4, 4, 1)))
          self.assertEqual(y[row], 0)
    self.assertEqual(seen, 40)

  def test_add_to_appends_the_slots_and_rebatches(self):
    canaries = _canaries()
    real_x = np.full((5, 4, 4, 1), 0.5, np.float32)
    data = tf.data.Dataset.from_tensor_slices(
        (real_x, np.arange(5, dtype=np.int32))
    ).batch(2)
    out = list(canaries.add_to(data, 2, batch_size=3).unbatch())
    x, y = canaries.slots(2)
    self.assertLen(out, 5 + len(y))
    self.assertAllEqual(np.stack([e[0] for e in out[5:]]), x)
    self.assertAllEqual([int(e[1]) for e in out[5:]], y)
    self.assertAllEqual([int(e[1]) for e in out[:5]], range(5))

  def test_guesses_take_the_top_and_bottom_k(self):
    guess, k = canary_examples.guesses(
        np.array([5.0, 1.0, 3.0, 0.0, 4.0, 2.0]), 0.5
    )
    self.assertEqual(k, 2)
    self.assertAllEqual(guess, [1, -1, 0, -1, 1, 0])
    guess, k = canary_examples.guesses(np.arange(6.0), 1.0)
    self.assertEqual(k, 3)
    self.assertAllEqual(guess, [-1, -1, -1, 1, 1, 1])

  @pytest.mark.slow
  def test_audit_is_the_one_run_bound_of_the_best_grid_row(self):
    rng = np.random.default_rng(0)
    m, delta = 400, 1e-5
    included = rng.random(m) < 0.5
    # In-canaries score higher on average: some guesses right, some wrong.
    scores = included * 1.0 + rng.normal(size=m)
    entry = canary_examples.audit(
        scores, included, delta, accounted_epsilon=3.0
    )
    grid = canary_examples.GUESS_FRACTIONS
    bounds, mus = [], []
    for f in grid:
      guess, _ = canary_examples.guesses(scores, f)
      right = int(
          np.sum((guess == 1) & included) + np.sum((guess == -1) & ~included)
      )
      bounds.append(
          one_run.epsilon_lower_bound(
              m, int(np.sum(guess != 0)), right, delta, 0.05 / len(grid)
          )
      )
      mus.append(
          one_run.fdp_mu_lower_bound(
              m, int(np.sum(guess != 0)), right, 0.05 / len(grid)
          )
      )
    self.assertEqual(entry['epsilon_lower_bound'], max(bounds))
    # The f-DP bound of the same guesses, its best grid row, beside.
    self.assertEqual(entry['fdp_mu_lower_bound'], max(mus))
    self.assertGreater(
        entry['fdp_epsilon_lower_bound'], entry['epsilon_lower_bound']
    )
    self.assertIn('Gaussian', entry['fdp_meaning'])
    self.assertGreater(entry['epsilon_lower_bound'], 0.0)
    self.assertEqual([r['epsilon_lower_bound'] for r in entry['grid']], bounds)
    self.assertEqual(entry['accounted_epsilon'], 3.0)
    self.assertEqual(entry['unit'], 'example')
    # Scores independent of inclusion: no bound (at this seed).
    blind = canary_examples.audit(rng.normal(size=m), included, delta)
    self.assertEqual(blind['epsilon_lower_bound'], 0.0)

  def test_scores_are_loss_drops(self):
    canaries = _canaries(m=6, clients=2)

    def loss_fn(x, y, weights):
      return np.full(len(y), weights)

    self.assertAllEqual(canaries.scores(loss_fn, 3.0, 1.0), np.full(6, 2.0))


if __name__ == '__main__':
  tf.test.main()
