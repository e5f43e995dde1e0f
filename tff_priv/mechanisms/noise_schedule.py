"""Per-round noise from a privacy budget: the CRD schedule (UDP Algorithm 2).

Pure TensorFlow state machine; no TFF types, no accountant. `BudgetSchedule`
gives each round the least noise that, if every round left used it too, would
spend exactly what is left of a budget B; the CRD trigger shrinks the plan of
rounds, and the spent budget never exceeds B.
"""

import collections
from typing import Optional

import numpy as np
import tensorflow as tf

from tff_priv import validation

ScheduleState = collections.namedtuple(
    'ScheduleState', ['planned_rounds', 'rounds_done', 'spent', 'total_budget']
)

# Relative slack when comparing a cost against the remaining budget share, so
# that a plan kept unchanged does not fail on float64 rounding. The overspend
# it allows is at most this fraction of the budget (`max_spent`).
_RELATIVE_SLACK = 1e-9


class BudgetSchedule:
  """The CRD schedule: per-round sigma from what is left of a budget.

  The state is plain tensors so checkpoints carry it:

    planned_rounds T (int32), rounds_done t (int32),
    spent (float64, budget used so far), total_budget B (float64).

  Round t (rounds_done = t) has m = T - t rounds left, this one included, and
  uses the least noise that, if every round left used it too, would spend
  exactly what is left:

    cost(sigma_t) = (B - spent) / m.

  Two cost models (both decreasing in sigma):

  * 'inverse_variance' (Wei et al. Theorem 4): cost(sigma) = 1 / sigma^2, so
    sigma_t = sqrt((T - t) / (B - sum_{tau < t} 1 / sigma_tau^2)) in closed
    form, with B = eps^2 / (2 q Delta^2 ln(1/delta)) (the paper) or
    B = T_0 / sigma_0^2 for a sigma_0 calibrated by an accountant (exact for
    q = 1, where the Gaussian's RDP is linear in 1 / sigma^2).
  * a table (sigma_k, cost_k) built outside the graph (tff_priv.learning.udp
    builds it from dp_accounting's RDP of the sampled Gaussian at one order
    alpha*): sigma_t is the smallest tabulated sigma whose cost is
    <= (B - spent) / m, and the round is charged that sigma's tabulated cost.
    Sound for any sampling rate: the RDP at alpha* of the whole run is at
    most B.

  After each round: spent += cost(sigma_t), t += 1. The CRD trigger (the
  validation loss improved by less than zeta) shrinks the plan:
  T <- floor(beta (T - t)) + t. T only shrinks, so the per-round cost only grows
  (sigma only shrinks) and spent never exceeds B. Training is done when t = T;
  asking for another round's noise then fails.
  """

  def __init__(
      self,
      total_budget: float,
      initial_rounds: int,
      sigma_table: Optional[np.ndarray] = None,
      cost_table: Optional[np.ndarray] = None,
      order: Optional[float] = None,
  ):
    """Creates the schedule.

    Args:
      total_budget: B > 0, in the units of the cost.
      initial_rounds: T_0 >= 1, the planned number of rounds.
      sigma_table: None for the 'inverse_variance' cost 1 / sigma^2; else the
        tabulated noise levels, strictly increasing.
      cost_table: with sigma_table: the cost of one round at each sigma,
        strictly decreasing, > 0.
      order: with the tables: the RDP order at which `cost_table` is the
        cost of a round (for reports; the schedule does not read it).
    """
    self.total_budget = validation.positive('total_budget', total_budget)
    self.initial_rounds = validation.int_at_least(
        'initial_rounds', initial_rounds, 1
    )
    if (sigma_table is None) != (cost_table is None):
      raise ValueError('give both sigma_table and cost_table, or neither')
    if sigma_table is not None:
      sigma_table = np.asarray(sigma_table, dtype=np.float64)
      cost_table = np.asarray(cost_table, dtype=np.float64)
      if sigma_table.ndim != 1 or sigma_table.shape != cost_table.shape:
        raise ValueError('sigma_table and cost_table must be 1-D, same length')
      if not (np.all(np.diff(sigma_table) > 0) and np.all(sigma_table > 0)):
        raise ValueError('sigma_table must be positive and strictly increasing')
      if not (np.all(np.diff(cost_table) < 0) and np.all(cost_table > 0)):
        raise ValueError('cost_table must be positive and strictly decreasing')
    if order is not None and sigma_table is None:
      raise ValueError('order applies only with sigma_table and cost_table')
    self.sigma_table = sigma_table
    self.cost_table = cost_table
    self.order = order

  @property
  def max_spent(self) -> float:
    """The most any path of the schedule spends (B and float64 slack)."""
    return self.total_budget * (1.0 + _RELATIVE_SLACK)

  @property
  def cost_model(self) -> str:
    return 'inverse_variance' if self.sigma_table is None else 'table'

  def initial_state(self) -> ScheduleState:
    return ScheduleState(
        planned_rounds=tf.constant(self.initial_rounds, tf.int32),
        rounds_done=tf.constant(0, tf.int32),
        spent=tf.constant(0.0, tf.float64),
        total_budget=tf.constant(self.total_budget, tf.float64),
    )

  def round_noise(self, state: ScheduleState) -> tuple[tf.Tensor, tf.Tensor]:
    """(sigma_t, cost of the round) for the round `state` is at (float64)."""
    rounds_left = state.planned_rounds - state.rounds_done
    check = tf.debugging.assert_positive(
        rounds_left,
        message='the CRD schedule is finished (rounds_done == planned_rounds)',
    )
    with tf.control_dependencies([check]):
      share = (state.total_budget - state.spent) / tf.cast(
          rounds_left, tf.float64
      )
    if self.sigma_table is None:
      positive = tf.debugging.assert_positive(
          share, message='the CRD budget is used up'
      )
      with tf.control_dependencies([positive]):
        cost = share
        return tf.sqrt(1.0 / share), cost
    costs = tf.constant(self.cost_table, tf.float64)
    feasible = costs <= share * (1.0 + _RELATIVE_SLACK)
    found = tf.debugging.assert_equal(
        tf.reduce_any(feasible),
        True,
        message=(
            'no tabulated sigma fits the remaining CRD budget (the table is '
            'too short for this plan)'
        ),
    )
    with tf.control_dependencies([found]):
      index = tf.argmax(tf.cast(feasible, tf.int32), output_type=tf.int32)
    sigmas = tf.constant(self.sigma_table, tf.float64)
    return tf.gather(sigmas, index), tf.gather(costs, index)

  def cost_of(self, sigma: float) -> float:
    """The cost the schedule charges a round at `sigma` (one of its own).

    Raises:
      ValueError: `sigma` is below every tabulated one (the schedule never
        releases it).
    """
    if self.sigma_table is None:
      return 1.0 / sigma**2
    # The largest tabulated sigma <= sigma (a relative slack for the round
    # trip through a ledger's noise multiplier): its cost is >= sigma's.
    index = (
        np.searchsorted(self.sigma_table, sigma * (1.0 + 1e-9), side='right')
        - 1
    )
    if index < 0:
      raise ValueError(f'sigma {sigma} is below the tabulated noise levels')
    return float(self.cost_table[index])

  @staticmethod
  def after_round(state: ScheduleState, cost: tf.Tensor) -> ScheduleState:
    """The state after a round that was charged `cost`."""
    return state._replace(
        rounds_done=state.rounds_done + 1,
        spent=state.spent + tf.cast(cost, tf.float64),
    )

  @staticmethod
  def discount(state: ScheduleState, beta) -> ScheduleState:
    """CRD's trigger action: T <- floor(beta (T - t)) + t (T never grows)."""
    left = tf.cast(state.planned_rounds - state.rounds_done, tf.float64)
    # A Python float goes to float64 directly: through float32, 0.9 * 70
    # would floor to 62 instead of 63.
    beta = tf.cast(
        tf.convert_to_tensor(beta, dtype_hint=tf.float64), tf.float64
    )
    new_left = tf.cast(tf.floor(beta * left), tf.int32)
    return state._replace(planned_rounds=state.rounds_done + new_left)

  @staticmethod
  def is_done(state: ScheduleState) -> tf.Tensor:
    return state.rounds_done >= state.planned_rounds
