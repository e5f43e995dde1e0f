"""Tests for tff_priv.mechanisms.noise_schedule (the CRD state machine)."""

import math

import numpy as np
import tensorflow as tf

from tff_priv.accounting import closed_forms
from tff_priv.mechanisms import noise_schedule


def _run(schedule, discount_after=(), beta=0.9):
  """Runs a schedule to its end; returns (sigmas, costs, final state)."""
  state = schedule.initial_state()
  sigmas, costs = [], []
  while not bool(schedule.is_done(state)):
    sigma, cost = schedule.round_noise(state)
    sigmas.append(float(sigma))
    costs.append(float(cost))
    state = schedule.after_round(state, cost)
    if int(state.rounds_done) in discount_after:
      state = schedule.discount(state, beta)
  return sigmas, costs, state


class InverseVarianceTest(tf.test.TestCase):

  def test_sigma_is_eq10_while_plan_unchanged(self):
    # Hand-computed eq. (10): Delta 0.1, q 0.6, T 100, delta 1e-3, eps 8
    # gives sigma = 0.359889 (see tests/accounting/closed_forms_test.py).
    budget = closed_forms.crd_total_budget(8.0, 1e-3, 0.6, 0.1)
    sigmas, _, state = _run(noise_schedule.BudgetSchedule(budget, 100))
    self.assertLen(sigmas, 100)
    self.assertAllClose(sigmas, [0.359889] * 100, atol=1e-6)
    self.assertAllClose(float(state.spent), budget, rtol=1e-9)

  def test_discount_lowers_sigma_within_budget(self):
    budget = closed_forms.crd_total_budget(4.0, 1e-3, 1.0, 0.2)
    schedule = noise_schedule.BudgetSchedule(budget, 50)
    sigmas, _, state = _run(schedule, discount_after=(5, 10, 20), beta=0.8)
    self.assertLess(int(state.planned_rounds), 50)
    self.assertLen(sigmas, int(state.planned_rounds))
    self.assertTrue(np.all(np.diff(sigmas) <= 1e-12))  # Never more noise.
    self.assertLess(sigmas[-1], sigmas[0])
    spent = sum(1 / s**2 for s in sigmas)
    self.assertLessEqual(spent, budget * (1 + 1e-9))
    self.assertAllClose(float(state.spent), spent, rtol=1e-9)

  def test_discount_formula(self):
    schedule = noise_schedule.BudgetSchedule(10.0, 100)
    state = schedule.initial_state()._replace(
        rounds_done=tf.constant(30, tf.int32)
    )
    new = schedule.discount(state, 0.9)
    self.assertEqual(int(new.planned_rounds), math.floor(0.9 * 70) + 30)
    self.assertEqual(int(new.rounds_done), 30)

  def test_finished_schedule_refuses_another_round(self):
    schedule = noise_schedule.BudgetSchedule(1.0, 2)
    _, _, state = _run(schedule)
    with self.assertRaisesRegex(tf.errors.InvalidArgumentError, 'finished'):
      schedule.round_noise(state)


class TableTest(tf.test.TestCase):

  def test_picks_least_noise_that_fits(self):
    sigmas = np.array([0.5, 1.0, 2.0, 4.0])
    costs = 1 / sigmas**3  # Any strictly decreasing cost.
    schedule = noise_schedule.BudgetSchedule(
        10 * costs[2], 10, sigma_table=sigmas, cost_table=costs
    )
    state = schedule.initial_state()
    sigma, cost = schedule.round_noise(state)
    self.assertEqual(float(sigma), 2.0)  # Share = cost(2.0) exactly.
    self.assertEqual(float(cost), costs[2])
    # With 5 rounds left and the budget of 10 rounds: share = 2 cost(2.0),
    # still below cost(1.0) = 8 cost(2.0).
    state = schedule.discount(state, 0.5)
    self.assertEqual(float(schedule.round_noise(state)[0]), 2.0)
    state = state._replace(planned_rounds=tf.constant(1, tf.int32))
    # One round left with the whole budget (10 cost(2.0) >= cost(1.0)).
    self.assertEqual(float(schedule.round_noise(state)[0]), 1.0)

  def test_spent_never_exceeds_budget(self):
    sigmas = np.geomspace(0.1, 2.0, 64)
    costs = 1 / sigmas**2 + 0.3 / sigmas**4
    budget = 40 * costs[-1]
    schedule = noise_schedule.BudgetSchedule(
        budget, 40, sigma_table=sigmas, cost_table=costs
    )
    chosen, charged, _ = _run(schedule, discount_after=(3, 8, 15, 20), beta=0.7)
    self.assertLessEqual(sum(charged), budget * (1 + 1e-9))
    for s, c in zip(chosen, charged):  # Charged what the table says.
      self.assertEqual(c, costs[np.searchsorted(sigmas, s)])


class BadArgumentsTest(tf.test.TestCase):

  def test_named_errors(self):
    with self.assertRaisesRegex(ValueError, 'total_budget'):
      noise_schedule.BudgetSchedule(0.0, 10)
    with self.assertRaisesRegex(ValueError, 'initial_rounds'):
      noise_schedule.BudgetSchedule(1.0, 0)
    with self.assertRaisesRegex(ValueError, 'sigma_table'):
      noise_schedule.BudgetSchedule(1.0, 3, sigma_table=[1.0, 2.0])
    with self.assertRaisesRegex(ValueError, 'strictly increasing'):
      noise_schedule.BudgetSchedule(
          1.0, 3, sigma_table=[2.0, 1.0], cost_table=[1.0, 0.5]
      )
    with self.assertRaisesRegex(ValueError, 'strictly decreasing'):
      noise_schedule.BudgetSchedule(
          1.0, 3, sigma_table=[1.0, 2.0], cost_table=[0.5, 1.0]
      )


if __name__ == '__main__':
  tf.test.main()
