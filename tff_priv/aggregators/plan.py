"""A calibrated factory's plan of rounds: `next` refuses a round past it.

A factory made by `.calibrated(epsilon, total_rounds=T, ...)` meets its
target only over T rounds: a T+1-th round would release more than was
calibrated. Its state holds `planned_rounds` (T) beside `rounds_done`, and
its `next` fails (a TensorFlow assertion, before the round's result exists)
once `rounds_done` reaches T (`PlanExceededError`; `planned_factory`).
"""

import re
from typing import Any, NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation

# Starts every refusal's message, for `one_line` to find it in TF's errors.
_PREFIX = 'tff_priv plan: '
_MESSAGE = re.compile(re.escape(_PREFIX) + r'([^\]\n]*)')


class PlanExceededError(RuntimeError):
  """A round past the planned rounds of a calibrated factory (one line).

  A calibrated factory's `next` fails once `rounds_done` reaches T (`check`);
  `tff_priv.runtime`'s contexts turn that failure into one line (this error),
  and `PrivacyLedger.record_round` refuses a state past its plan
  (`guarantees.past_plan`). To go on, extend the plan explicitly:
  `.calibrated(epsilon, total_rounds=<rounds to add>, spent=ledger, ...)`
  calibrates the rounds added so that they and the ledger's charges meet the
  target together; continue with a process (and a sampler) built from it.
  """


def planned(planned_rounds: Optional[int]) -> Optional[int]:
  """`planned_rounds` validated: None (no plan) or an int >= 1."""
  if planned_rounds is None:
    return None
  return validation.int_at_least('planned_rounds', planned_rounds, 1)


def refusal(name: str, planned_rounds: int) -> str:
  """The one line a round past the plan gets."""
  rounds = 'round' if planned_rounds == 1 else 'rounds'
  return (
      f'{name} was calibrated for {planned_rounds} {rounds} and refuses round '
      f'{planned_rounds + 1}: to go on, extend the plan with '
      f'{name}.calibrated(..., total_rounds=<rounds to add>, spent=ledger) '
      '(it calibrates them for the budget left) and build the process and '
      'the sampler anew from it'
  )


def check(rounds_done, planned_rounds: int, name: str):
  """TF: an op that fails unless `rounds_done` < `planned_rounds`."""
  return tf.debugging.Assert(
      tf.less(tf.cast(rounds_done, tf.int64), planned_rounds),
      [_PREFIX + refusal(name, planned_rounds)],
  )


def one_line(error: BaseException) -> Optional[str]:
  """The refusal inside a TF / TFF / gRPC error's text, or None."""
  found = _MESSAGE.search(str(error))
  return found.group(1).strip() if found else None


class Planned:
  """The `planned_rounds` property of a factory that may carry a plan."""

  _planned: Optional[int] = None

  @property
  def planned_rounds(self) -> Optional[int]:
    """T of a calibrated factory (round T+1 is refused); None: no plan."""
    return self._planned


class PlanState(NamedTuple):
  """`PlannedFactory`'s state: the inner one, rounds done, the plan."""

  inner: Any
  rounds_done: Any
  planned_rounds: Any


def planned_factory(inner_factory, planned_rounds: int, name: str):
  """`inner_factory` whose state carries a plan of rounds, refused past it.

  Weighted or unweighted as `inner_factory` (a TFF factory of either kind);
  its measurements are the inner ones. It puts the plan into any inner
  factory's state (TFF's `DifferentiallyPrivateFactory`'s record sum,
  Fed-SMP's sum, UDP's mean); the factories without an inner one (BLT,
  BandMF, the tree) keep `planned_rounds` in their own state beside their
  `rounds_done`.

  Args:
    inner_factory: the factory to run.
    planned_rounds: T >= 1: the T+1-th `next` fails.
    name: how the refusal names the calibrated factory.
  """
  if isinstance(inner_factory, tff.aggregators.WeightedAggregationFactory):
    return _PlannedWeighted(inner_factory, planned_rounds, name)
  return _PlannedUnweighted(inner_factory, planned_rounds, name)


class _PlannedInner:
  """The process of `planned_factory`."""

  def __init__(self, inner_factory, planned_rounds: int, name: str):
    self._inner = inner_factory
    self._planned = validation.int_at_least('planned_rounds', planned_rounds, 1)
    self._name = name
    self._weighted = isinstance(
        inner_factory, tff.aggregators.WeightedAggregationFactory
    )

  def create(self, value_type, weight_type=None):
    if self._weighted:
      inner = self._inner.create(value_type, weight_type)
    else:
      inner = self._inner.create(value_type)
    planned_rounds = self._planned
    name = self._name

    @tff.tensorflow.computation
    def counter():
      return (tf.constant(0, tf.int64), tf.constant(planned_rounds, tf.int64))

    @tff.federated_computation()
    def init_fn():
      rounds_done, plan = tff.federated_eval(counter, tff.SERVER)
      return tff.federated_zip(PlanState(inner.initialize(), rounds_done, plan))

    @tff.tensorflow.computation(np.int64)
    def count(rounds_done):
      with tf.control_dependencies([check(rounds_done, planned_rounds, name)]):
        return rounds_done + 1

    def output_of(state, output):
      return tff.templates.MeasuredProcessOutput(
          state=tff.federated_zip(
              PlanState(
                  output.state,
                  tff.federated_map(count, state.rounds_done),
                  state.planned_rounds,
              )
          ),
          result=output.result,
          measurements=output.measurements,
      )

    state_type = init_fn.type_signature.result
    value_type = inner.next.type_signature.parameter[1]
    if self._weighted:
      weight_type = inner.next.type_signature.parameter[2]

      @tff.federated_computation(state_type, value_type, weight_type)
      def next_fn(state, value, weight):
        return output_of(state, inner.next(state.inner, value, weight))

    else:

      @tff.federated_computation(state_type, value_type)
      def next_fn(state, value):
        return output_of(state, inner.next(state.inner, value))

    return tff.templates.AggregationProcess(init_fn, next_fn)


class _PlannedUnweighted(
    _PlannedInner, tff.aggregators.UnweightedAggregationFactory
):

  def create(self, value_type):
    return _PlannedInner.create(self, value_type)


class _PlannedWeighted(
    _PlannedInner, tff.aggregators.WeightedAggregationFactory
):

  def create(self, value_type, weight_type):
    return _PlannedInner.create(self, value_type, weight_type)
