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

The same "client noise, then inner mean" factory serves parameter distortion
(`tff_priv.aggregators.distortion`), whose sigma comes from a TV target: the
per-round sigma is a `NoiseSource`.

Measurements: `noise` (`noise_stddev`, the sigma used this round, and what the
source adds: for a schedule `round_cost`, `spent_budget`, `total_budget`,
`rounds_done`, `planned_rounds`) and the inner factory's under `mean`. The
ledger charges the sigma of `noise_stddev`, never a nominal one.
"""

import abc
import collections
from typing import Optional, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.mechanisms import gaussian
from tff_priv.mechanisms import noise_schedule

InnerFactory = Union[
    tff.aggregators.WeightedAggregationFactory,
    tff.aggregators.UnweightedAggregationFactory,
]


class NoiseSource(abc.ABC):
  """Where a round's client noise std comes from (pure TF pieces).

  `round_noise(state, value_variance)` runs on the server; `value_variance`
  is the mean over coordinates of the variance of the clients' values this
  round when `uses_value_variance` is True (computed by the factory, a
  non-private statistic of the round), else 0.
  """

  uses_value_variance = False

  @abc.abstractmethod
  def initial_state(self):
    """The source's state (tensors)."""

  @abc.abstractmethod
  def round_noise(self, state, value_variance):
    """(stddev float32, new state, OrderedDict of measurements)."""


class FixedNoise(NoiseSource):
  """The same std every round."""

  def __init__(self, noise_stddev: float):
    self.noise_stddev = validation.non_negative('noise_stddev', noise_stddev)

  def initial_state(self):
    return tf.constant(self.noise_stddev, tf.float32)

  def round_noise(self, state, value_variance):
    del value_variance
    return state, state, collections.OrderedDict(noise_stddev=state)


class ScheduledNoise(NoiseSource):
  """The CRD schedule's sigma_t (`noise_schedule.BudgetSchedule`)."""

  def __init__(self, schedule: noise_schedule.BudgetSchedule):
    if not isinstance(schedule, noise_schedule.BudgetSchedule):
      raise TypeError(f'schedule must be a BudgetSchedule, got {schedule!r}')
    self.schedule = schedule

  def initial_state(self):
    return self.schedule.initial_state()

  def round_noise(self, state, value_variance):
    del value_variance
    state = noise_schedule.ScheduleState(*state)
    sigma, cost = self.schedule.round_noise(state)
    new_state = self.schedule.after_round(state, cost)
    sigma = tf.cast(sigma, tf.float32)
    return sigma, new_state, collections.OrderedDict(
        noise_stddev=sigma,
        round_cost=cost,
        spent_budget=new_state.spent,
        total_budget=new_state.total_budget,
        rounds_done=new_state.rounds_done,
        planned_rounds=new_state.planned_rounds,
    )


def check_value_type(value_type):
  if not (
      isinstance(value_type, (tff.TensorType, tff.StructType))
      and tff.types.is_structure_of_floats(value_type)
  ):
    raise TypeError(
        'value_type must be a tff.TensorType or tff.StructType of float '
        f'tensors, got {value_type}'
    )


def _as_nest(value):
  if isinstance(value, tff.structure.Struct):  # A StructType without container.
    return tff.structure.to_odict_or_tuple(value)
  return value


class _ClientNoise:
  """Client-side noise from a `NoiseSource`, then the inner mean."""

  def __init__(self, source: NoiseSource, inner_agg_factory: InnerFactory):
    self._source = source
    self._inner = inner_agg_factory

  @property
  def noise_source(self) -> NoiseSource:
    return self._source

  def _create(self, value_type, weight_type=None):
    check_value_type(value_type)
    if weight_type is None:
      inner_process = self._inner.create(value_type)
    else:
      inner_process = self._inner.create(value_type, weight_type)
    source = self._source

    @tff.tensorflow.computation
    def init_noise_state():
      return source.initial_state()

    noise_state_type = init_noise_state.type_signature.result

    @tff.tensorflow.computation(noise_state_type, np.float32)
    def round_noise(noise_state, value_variance):
      return source.round_noise(noise_state, value_variance)

    @tff.tensorflow.computation(value_type, np.float32)
    def add_noise(value, stddev):
      return gaussian.add_gaussian_noise(_as_nest(value), stddev)

    @tff.tensorflow.computation(value_type)
    def moments(value):
      flat = tf.concat(
          [tf.reshape(tf.cast(t, tf.float32), [-1]) for t in
           tf.nest.flatten(_as_nest(value))],
          axis=0,
      )
      return flat, tf.square(flat)

    @tff.tensorflow.computation
    def zero():
      return tf.constant(0.0, tf.float32)

    @tff.federated_computation()
    def init_fn():
      return tff.federated_zip(
          collections.OrderedDict(
              noise=tff.federated_eval(init_noise_state, tff.SERVER),
              mean=inner_process.initialize(),
          )
      )

    def next_impl(state, value, weight=None):
      if source.uses_value_variance:
        first, second = tff.federated_map(moments, value)
        variance = tff.federated_map(
            _mean_variance,
            (tff.federated_mean(first), tff.federated_mean(second)),
        )
      else:
        variance = tff.federated_eval(zero, tff.SERVER)
      stddev, new_noise_state, noise_measurements = tff.federated_map(
          round_noise, (state.noise, variance)
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


@tff.tensorflow.computation
def _mean_variance(first, second):
  """Mean over coordinates of E[x^2] - E[x]^2 (clipped at 0 for rounding)."""
  return tf.reduce_mean(tf.maximum(second - tf.square(first), 0.0))


class _WeightedClientNoise(_ClientNoise, tff.aggregators.WeightedAggregationFactory):

  def create(self, value_type, weight_type):
    return self._create(value_type, weight_type)


class _UnweightedClientNoise(
    _ClientNoise, tff.aggregators.UnweightedAggregationFactory
):

  def create(self, value_type):
    return self._create(value_type)


def client_noise_factory(
    source: NoiseSource, inner_agg_factory: Optional[InnerFactory] = None
):
  """Client noise from `source`, then `inner_agg_factory` (default MeanFactory).

  Returns a weighted or an unweighted factory, following the inner one.
  """
  if not isinstance(source, NoiseSource):
    raise TypeError(f'source must be a NoiseSource, got {source!r}')
  if inner_agg_factory is None:
    inner_agg_factory = tff.aggregators.MeanFactory()
  if isinstance(inner_agg_factory, tff.aggregators.WeightedAggregationFactory):
    return _WeightedClientNoise(source, inner_agg_factory)
  if isinstance(
      inner_agg_factory, tff.aggregators.UnweightedAggregationFactory
  ):
    return _UnweightedClientNoise(source, inner_agg_factory)
  raise TypeError(
      'inner_agg_factory must be a tff.aggregators Weighted- or '
      f'UnweightedAggregationFactory, got {inner_agg_factory!r}'
  )


def GaussianUDPFactory(  # pylint: disable=invalid-name
    noise_stddev: Optional[float] = None,
    *,
    schedule: Optional[noise_schedule.BudgetSchedule] = None,
    inner_agg_factory: Optional[InnerFactory] = None,
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
  if (noise_stddev is None) == (schedule is None):
    raise ValueError('give exactly one of noise_stddev and schedule')
  source = (
      FixedNoise(noise_stddev)
      if schedule is None
      else ScheduledNoise(schedule)
  )
  return client_noise_factory(source, inner_agg_factory)
