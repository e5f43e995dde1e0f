"""Gaussian UDP: clients add Gaussian noise to their upload, then the mean.

Wei et al. (UDP, Algorithm 1): client i uploads w~_i = w_i + N(0, sigma^2 I)
and the server forms sum_i p_i w~_i with p_i = |D_i| / sum_{j in K} |D_j|,
normalised over the clients of the round. Since the server's model w^t is
public, noising the model delta is the same release. The noise is added on
each client, so each upload is (eps_i, delta_i)-DP for that client's records
by itself (record-level DP, adjacency = replace one example of D_i, sensitivity
Delta of the client's update); the mean is post-processing.

`GaussianUDPFactory(noise_stddev=s)` adds N(0, s^2) per coordinate with a fixed
s. `GaussianUDPFactory(schedule=BudgetSchedule(...))` takes each round's sigma
from a CRD schedule (tff_priv.mechanisms.noise_schedule) held in the
aggregator state; the learning process of tff_priv.learning.crd discounts the
schedule's planned rounds. The inner factory does the averaging:
`tff.aggregators.MeanFactory()` (default; weighted by the client weights that
tff.learning passes, |D_i| for UDP client work) or
`tff.aggregators.UnweightedMeanFactory()`; the returned factory is weighted or
unweighted like the inner one, as TFF's own wrapping factories
(`tff.aggregators.clipping_factory`).

Measurements: `noise_stddev` (the sigma used this round), and for a schedule
`round_cost`, `spent_budget`, `total_budget`, `rounds_done`,
`planned_rounds`, plus the inner factory's under `mean`. The ledger charges
the sigma of `noise_stddev`, never a nominal one.
"""

import collections
from typing import Optional, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.mechanisms import gaussian
from tff_priv.mechanisms import noise_schedule


def _check_value_type(value_type):
  if not (
      isinstance(value_type, (tff.TensorType, tff.StructType))
      and tff.types.is_structure_of_floats(value_type)
  ):
    raise TypeError(
        'value_type must be a tff.TensorType or tff.StructType of float '
        f'tensors, got {value_type}'
    )


class _GaussianUDP:
  """The implementation shared by the weighted and unweighted factories."""

  def __init__(
      self,
      noise_stddev: Optional[float],
      schedule: Optional[noise_schedule.BudgetSchedule],
      inner_agg_factory,
  ):
    if (noise_stddev is None) == (schedule is None):
      raise ValueError('give exactly one of noise_stddev and schedule')
    if noise_stddev is not None:
      noise_stddev = validation.non_negative('noise_stddev', noise_stddev)
    if schedule is not None and not isinstance(
        schedule, noise_schedule.BudgetSchedule
    ):
      raise TypeError(f'schedule must be a BudgetSchedule, got {schedule!r}')
    self._noise_stddev = noise_stddev
    self._schedule = schedule
    self._inner = inner_agg_factory

  @property
  def noise_stddev(self) -> Optional[float]:
    return self._noise_stddev

  @property
  def schedule(self) -> Optional[noise_schedule.BudgetSchedule]:
    return self._schedule

  def _create(self, value_type, weight_type=None):
    _check_value_type(value_type)
    if weight_type is None:
      inner_process = self._inner.create(value_type)
    else:
      inner_process = self._inner.create(value_type, weight_type)
    schedule = self._schedule
    fixed = self._noise_stddev

    @tff.tensorflow.computation
    def init_noise_state():
      if schedule is None:
        return tf.constant(fixed, tf.float32)
      return schedule.initial_state()

    noise_state_type = init_noise_state.type_signature.result

    @tff.tensorflow.computation(noise_state_type)
    def round_noise(noise_state):
      if schedule is None:
        return noise_state, noise_state, collections.OrderedDict(
            noise_stddev=noise_state
        )
      state = noise_schedule.ScheduleState(*noise_state)
      sigma, cost = schedule.round_noise(state)
      new_state = schedule.after_round(state, cost)
      measurements = collections.OrderedDict(
          noise_stddev=tf.cast(sigma, tf.float32),
          round_cost=cost,
          spent_budget=new_state.spent,
          total_budget=new_state.total_budget,
          rounds_done=new_state.rounds_done,
          planned_rounds=new_state.planned_rounds,
      )
      return tf.cast(sigma, tf.float32), new_state, measurements

    @tff.tensorflow.computation(value_type, np.float32)
    def add_noise(value, stddev):
      if isinstance(value, tff.structure.Struct):  # A StructType without container.
        value = tff.structure.to_odict_or_tuple(value)
      return gaussian.add_gaussian_noise(value, stddev)

    @tff.federated_computation()
    def init_fn():
      return tff.federated_zip(
          collections.OrderedDict(
              noise=tff.federated_eval(init_noise_state, tff.SERVER),
              mean=inner_process.initialize(),
          )
      )

    def next_impl(state, value, weight=None):
      stddev, new_noise_state, noise_measurements = tff.federated_map(
          round_noise, state.noise
      )
      noisy = tff.federated_map(
          add_noise, (value, tff.federated_broadcast(stddev))
      )
      if weight is None:
        inner = inner_process.next(state.mean, noisy)
      else:
        inner = inner_process.next(state.mean, noisy, weight)
      new_state = tff.federated_zip(
          collections.OrderedDict(noise=new_noise_state, mean=inner.state)
      )
      measurements = tff.federated_zip(
          collections.OrderedDict(
              noise=noise_measurements, mean=inner.measurements
          )
      )
      return tff.templates.MeasuredProcessOutput(
          state=new_state, result=inner.result, measurements=measurements
      )

    state_type = init_fn.type_signature.result
    clients_value = tff.FederatedType(value_type, tff.CLIENTS)
    if weight_type is None:

      @tff.federated_computation(state_type, clients_value)
      def next_fn(state, value):
        return next_impl(state, value)

    else:

      @tff.federated_computation(
          state_type, clients_value, tff.FederatedType(weight_type, tff.CLIENTS)
      )
      def next_fn(state, value, weight):
        return next_impl(state, value, weight)

    return tff.templates.AggregationProcess(init_fn, next_fn)


class _WeightedGaussianUDPFactory(
    _GaussianUDP, tff.aggregators.WeightedAggregationFactory
):

  def create(self, value_type, weight_type):
    return self._create(value_type, weight_type)


class _UnweightedGaussianUDPFactory(
    _GaussianUDP, tff.aggregators.UnweightedAggregationFactory
):

  def create(self, value_type):
    return self._create(value_type)


def GaussianUDPFactory(  # pylint: disable=invalid-name
    noise_stddev: Optional[float] = None,
    *,
    schedule: Optional[noise_schedule.BudgetSchedule] = None,
    inner_agg_factory: Optional[
        Union[
            tff.aggregators.WeightedAggregationFactory,
            tff.aggregators.UnweightedAggregationFactory,
        ]
    ] = None,
):
  """Client-side Gaussian noise on each upload, then `inner_agg_factory`.

  Args:
    noise_stddev: a fixed per-coordinate noise std s >= 0 (absolute, in the
      units of the uploaded values). Exclusive with `schedule`.
    schedule: a `noise_schedule.BudgetSchedule` (CRD) giving each round's
      sigma from the aggregator state.
    inner_agg_factory: the mean; default `tff.aggregators.MeanFactory()`
      (weighted, as the paper). Pass `tff.aggregators.UnweightedMeanFactory()`
      for the unweighted form.

  Returns:
    A `tff.aggregators.WeightedAggregationFactory` or
    `UnweightedAggregationFactory`, following `inner_agg_factory`.
  """
  if inner_agg_factory is None:
    inner_agg_factory = tff.aggregators.MeanFactory()
  if isinstance(inner_agg_factory, tff.aggregators.WeightedAggregationFactory):
    return _WeightedGaussianUDPFactory(
        noise_stddev, schedule, inner_agg_factory
    )
  if isinstance(
      inner_agg_factory, tff.aggregators.UnweightedAggregationFactory
  ):
    return _UnweightedGaussianUDPFactory(
        noise_stddev, schedule, inner_agg_factory
    )
  raise TypeError(
      'inner_agg_factory must be a tff.aggregators Weighted- or '
      f'UnweightedAggregationFactory, got {inner_agg_factory!r}'
  )
