"""Factory for UDP (Wei et al.): client-side Gaussian noise, then the mean.

`GaussianUDPFactory` adds N(0, sigma^2 I) to every client's upload inside the
client computation, with sigma fixed or taken each round from a CRD
`noise_schedule.BudgetSchedule`, then averages the noisy uploads with an inner
factory (`tff.aggregators.MeanFactory` by default). Its state keeps the
`dp_accounting.DpEvent` of the round (`tff_priv.accounting.guarantees`):
a Gaussian mechanism of noise multiplier sigma_t / Delta for one example of one
client, Delta the sensitivity given to the factory. The same "client noise,
then inner mean" machinery serves parameter distortion
(`tff_priv.aggregators.distortion`). `privacy_report` counts that Gaussian
over a run by every accountant, with UDP's Theorem 1 beside.
"""

import abc
import collections
from typing import Any, Callable, NamedTuple, Optional, Union

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.accounting import calibration
from tff_priv.accounting import closed_forms
from tff_priv.accounting import guarantees
from tff_priv.accounting import reports
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.accounting import target_noise
from tff_priv.aggregators import plan as plan_lib
from tff_priv.mechanisms import clipping
from tff_priv.mechanisms import gaussian
from tff_priv.mechanisms import noise_schedule

InnerFactory = Union[
    tff.aggregators.WeightedAggregationFactory,
    tff.aggregators.UnweightedAggregationFactory,
]

# float64 noise std -> the round's DpEvent (built inside a TF computation).
DpEventFn = Callable[[tf.Tensor], dp_accounting.DpEvent]

UDP_GUARANTEE = guarantees.Guarantee(
    unit='example',
    noise='local',
    neighboring_relation='replace_one',
    description=(
        'UDP: each client adds N(0, sigma_t^2 I) to its update before the '
        'upload; a round is a Gaussian mechanism of noise multiplier '
        "sigma_t / Delta for one example of the client's data (replace one "
        'example), against the server that sees the upload and anyone after; '
        "only for uploads whose sensitivity to one example is Delta (UDP's "
        'client work, tff_priv.learning.udp.build_udp_process: one clipped '
        'full-batch step, Delta = 2 eta C / |D_i|), not under local SGD'
    ),
)


class ClientNoiseState(NamedTuple):
  """The state of a client-noise aggregation process.

  Attributes:
    noise: the noise source's state (the CRD `ScheduleState` for a schedule,
      `()` for a fixed sigma).
    mean: the inner factory's state.
    dp_event: `to_named_tuple()` of the `dp_accounting.DpEvent` of the release
      the last `next` made (a placeholder in `initialize()`'s state).
    is_init_state: True in the state `initialize()` returns.
  """

  noise: Any
  mean: Any
  dp_event: Any
  is_init_state: Any

  # Replace-one: each client's upload carries its own Gaussian noise.
  accounting = guarantees.StateAccounting(
      factory='ClientNoiseFactory', relation='replace_one', noise='local'
  )


class NoiseSource(abc.ABC):
  """Where a round's client noise std comes from (pure TF pieces).

  A source sees only its own state and the configuration: no client data
  reaches it, so sigma and its measurements are public values.
  """

  @abc.abstractmethod
  def initial_state(self):
    """The source's state (tensors; `()` for none)."""

  @abc.abstractmethod
  def round_noise(self, state):
    """(stddev float64, new state, OrderedDict of public measurements)."""


class FixedNoise(NoiseSource):
  """The same std every round."""

  def __init__(self, noise_stddev: float):
    self.noise_stddev = validation.non_negative('noise_stddev', noise_stddev)

  def initial_state(self):
    return ()

  def round_noise(self, state):
    sigma = tf.constant(self.noise_stddev, tf.float64)
    return (
        sigma,
        state,
        collections.OrderedDict(noise_stddev=tf.cast(sigma, tf.float32)),
    )


class ScheduledNoise(NoiseSource):
  """The CRD schedule's sigma_t (`noise_schedule.BudgetSchedule`).

  The measurements (sigma_t, the round's cost, the budget spent and total,
  rounds done and planned) are functions of the configuration and of the
  schedule's discounts, which CRD takes from the server's own validation loss:
  public values.
  """

  def __init__(self, schedule: noise_schedule.BudgetSchedule):
    if not isinstance(schedule, noise_schedule.BudgetSchedule):
      raise TypeError(f'schedule must be a BudgetSchedule, got {schedule!r}')
    self.schedule = schedule

  def initial_state(self):
    return self.schedule.initial_state()

  def round_noise(self, state):
    state = noise_schedule.ScheduleState(*state)
    sigma, cost = self.schedule.round_noise(state)
    new_state = self.schedule.after_round(state, cost)
    sigma = tf.cast(sigma, tf.float64)
    return (
        sigma,
        new_state,
        collections.OrderedDict(
            noise_stddev=tf.cast(sigma, tf.float32),
            round_cost=cost,
            spent_budget=new_state.spent,
            total_budget=new_state.total_budget,
            rounds_done=new_state.rounds_done,
            planned_rounds=new_state.planned_rounds,
        ),
    )


def check_value_type(value_type):
  """Raises TypeError unless `value_type` is a structure of float tensors."""
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
  """Optional clip, client noise from a `NoiseSource`, then the inner mean."""

  def __init__(
      self,
      source: NoiseSource,
      inner_agg_factory: InnerFactory,
      dp_event_fn: DpEventFn,
      guarantee: guarantees.Guarantee,
      clip: Optional[float],
  ):
    self._source = source
    self._inner = inner_agg_factory
    self._dp_event_fn = dp_event_fn
    self._guarantee = guarantee
    self._clip = clip

  @property
  def guarantee(self) -> guarantees.Guarantee:
    """Whom the round's `dp_event` protects (`guarantees.Guarantee`)."""
    return self._guarantee

  def audit_spec(self) -> guarantees.AuditSpec:
    """One client's upload noised per coordinate; no clip for the canary.

    Coordinatewise only for a fixed or scheduled sigma (not a function of
    the dimension) and no clip (nothing couples the coordinates). No clip is
    given for the default canary: the event's sensitivity (an example's, for
    `GaussianUDPFactory`) is not the clip, so an audit passes `canary=`.
    """
    coordinatewise = None
    if self._clip is None and isinstance(
        self._source, (FixedNoise, ScheduledNoise)
    ):
      coordinatewise = 'single_client'
    return guarantees.AuditSpec(coordinatewise=coordinatewise)

  def _create(self, value_type, weight_type=None):
    check_value_type(value_type)
    if weight_type is None:
      inner_process = self._inner.create(value_type)
    else:
      inner_process = self._inner.create(value_type, weight_type)
    source = self._source
    dp_event_fn = self._dp_event_fn
    clip = self._clip

    @tff.tensorflow.computation
    def init_noise_state():
      return source.initial_state()

    @tff.tensorflow.computation
    def placeholder_dp_event():
      # The event the first round will release (is_init_state marks it), so
      # a caller can plan that round before it runs.
      sigma, _, _ = source.round_noise(source.initial_state())
      return dp_event_fn(sigma).to_named_tuple()

    noise_state_type = init_noise_state.type_signature.result

    @tff.tensorflow.computation(noise_state_type)
    def round_noise(noise_state):
      sigma, new_state, measurements = source.round_noise(noise_state)
      event = dp_event_fn(sigma).to_named_tuple()
      return sigma, new_state, measurements, event

    @tff.tensorflow.computation(value_type, np.float64)
    def add_noise(value, stddev):
      # Clipped (when a clip is given); a non-finite upload is zeros.
      value = clipping.clip_l2(_as_nest(value), clip)
      return gaussian.add_gaussian_noise(value, stddev)

    @tff.federated_computation()
    def init_fn():
      return tff.federated_zip(
          ClientNoiseState(
              noise=tff.federated_eval(init_noise_state, tff.SERVER),
              mean=inner_process.initialize(),
              dp_event=tff.federated_eval(placeholder_dp_event, tff.SERVER),
              is_init_state=tff.federated_value(True, tff.SERVER),
          )
      )

    def next_impl(state, value, weight=None):
      stddev, new_noise_state, noise_measurements, event = tff.federated_map(
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
          ClientNoiseState(
              noise=new_noise_state,
              mean=inner.state,
              dp_event=event,
              is_init_state=tff.federated_value(False, tff.SERVER),
          )
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


class ClientNoiseFactory(
    _ClientNoise,
    tff.aggregators.WeightedAggregationFactory,
    tff.aggregators.UnweightedAggregationFactory,
):
  """Client noise, weighted or unweighted as its inner mean.

  It is both of TFF's factory kinds, so that a builder of the other kind
  than its inner mean reaches `create` and gets one line naming the fix
  (TFF's own type check would name this class and not the fix); `weighted`
  says which it is.
  """

  @property
  def weighted(self) -> bool:
    """Whether `create` takes weights (the inner mean is weighted)."""
    return isinstance(self._inner, tff.aggregators.WeightedAggregationFactory)

  def create(self, value_type, weight_type=None):
    if self.weighted and weight_type is None:
      raise TypeError(
          'this noise factory averages with weights (its inner_agg_factory, '
          'by default tff.aggregators.MeanFactory(), is weighted): use a '
          'weighted builder (build_weighted_fed_avg, '
          'tff_priv.learning.build_udp_process) '
          'or pass inner_agg_factory=tff.aggregators.UnweightedMeanFactory()'
      )
    if not self.weighted and weight_type is not None:
      raise TypeError(
          'this noise factory averages without weights (its '
          'inner_agg_factory is unweighted): use an unweighted builder '
          '(build_unweighted_fed_avg) or a weighted inner_agg_factory such '
          'as tff.aggregators.MeanFactory()'
      )
    return self._create(value_type, weight_type)


def client_noise_factory(
    source: NoiseSource,
    inner_agg_factory: Optional[InnerFactory] = None,
    *,
    dp_event_fn: DpEventFn,
    guarantee: guarantees.Guarantee,
    clip: Optional[float] = None,
):
  """Optional clip to L2 norm `clip`, client noise from `source`, inner mean.

  Args:
    source: the round's noise std (`NoiseSource`).
    inner_agg_factory: the mean of the noisy uploads; default
      `tff.aggregators.MeanFactory()`.
    dp_event_fn: float64 noise std -> the round's `dp_accounting.DpEvent`
      (called inside a TF computation; it must give one structure whatever
      the std).
    guarantee: whom that event protects.
    clip: optional L2 norm each upload is clipped to on the client, before
      the noise.

  Returns:
    A `ClientNoiseFactory`, weighted or unweighted as the inner one, with a
    `guarantee` property.
  """
  if not isinstance(source, NoiseSource):
    raise TypeError(f'source must be a NoiseSource, got {source!r}')
  if not isinstance(guarantee, guarantees.Guarantee):
    raise TypeError(f'guarantee must be a Guarantee, got {guarantee!r}')
  if clip is not None:
    clip = validation.positive('clip', clip)
  if inner_agg_factory is None:
    inner_agg_factory = tff.aggregators.MeanFactory()
  if isinstance(
      inner_agg_factory,
      (
          tff.aggregators.WeightedAggregationFactory,
          tff.aggregators.UnweightedAggregationFactory,
      ),
  ):
    return ClientNoiseFactory(
        source, inner_agg_factory, dp_event_fn, guarantee, clip
    )
  raise TypeError(
      'inner_agg_factory must be a tff.aggregators Weighted- or '
      f'UnweightedAggregationFactory, got {inner_agg_factory!r}'
  )


def GaussianUDPFactory(  # pylint: disable=invalid-name  # noqa: N802 a factory named as a class
    noise_stddev: Optional[float] = None,
    *,
    sensitivity: float,
    schedule: Optional[noise_schedule.BudgetSchedule] = None,
    inner_agg_factory: Optional[InnerFactory] = None,
    planned_rounds: Optional[int] = None,
):
  """UDP's client-side Gaussian noise on each upload, then `inner_agg_factory`.

  Wei et al. (UDP, Algorithm 1): client i uploads w~_i = w_i + N(0, sigma^2 I)
  and the server forms sum_i p_i w~_i with p_i = |D_i| / sum_{j in K} |D_j|,
  normalised over the clients of the round. The server's model w^t is public,
  so noising the model delta is the same release. The noise is drawn inside
  the client computation, so the server only ever sees noisy uploads: each
  upload is by itself a Gaussian mechanism on the client's data, and the mean
  (and anything the inner factory computes from the noisy uploads) is
  post-processing.

  Noise: `noise_stddev=s` adds N(0, s^2) per coordinate every round;
  `schedule=BudgetSchedule(...)` takes each round's sigma_t from a CRD
  schedule held in the state (`state.noise`, a `ScheduleState`; the learning
  process of `tff_priv.learning.udp` discounts its planned rounds).

  Precondition: the event holds only for uploads whose L2 sensitivity to
  one example is at most `sensitivity` = Delta, which the client work, not
  this factory, decides. Use it through `tff_priv.learning.udp`
  (`build_udp_process`, `build_crd_process`), which pairs it with UDP's
  client work (one clipped full-batch step, Delta = 2 eta C / |D_i|,
  `tff_priv.learning.udp_client_work.udp_sensitivity`, of the smallest
  client). Under another client work, such as tff.learning's FedAvg (local
  SGD over mini-batches), no Delta is known and the reported event is not a
  guarantee; the factory cannot check it (it sees uploads, not examples).

  Guarantee (`guarantee` property; `dp_event` in the state): the unit is one
  example of one client's data, under replace-one adjacency, with the noise
  added locally, given the precondition. After `next`, the state's `dp_event` is
  `GaussianDpEvent(sigma_t / Delta)` with sigma_t the std used that round; it
  covers one round of one client's upload, without client sampling.

  Weighted or unweighted: the factory follows `inner_agg_factory`. The
  default `tff.aggregators.MeanFactory()` is weighted, and tff.learning passes
  the UDP client work's weight |D_i| (the paper's p_i). Under replace-one-
  example adjacency |D_i| does not change, so the weight reveals nothing the
  relation protects. `tff.aggregators.UnweightedMeanFactory()` gives the
  unweighted mean.

  Measurements: `noise` holds only public values, functions of the
  configuration and of the round: `noise_stddev` (sigma_t) and, for a
  schedule, `round_cost`, `spent_budget`, `total_budget`, `rounds_done`,
  `planned_rounds`; `mean` holds the inner factory's measurements, computed
  from the noisy uploads (and weights) only (TFF's mean factories report
  nothing).

  Args:
    noise_stddev: a fixed per-coordinate noise std s >= 0 (absolute, in the
      units of the uploaded values). Exclusive with `schedule`.
    sensitivity: Delta > 0, the L2 sensitivity of one client's upload under
      replace-one-example adjacency.
    schedule: a `noise_schedule.BudgetSchedule` (CRD) giving each round's
      sigma from the aggregator state.
    inner_agg_factory: the mean; default `tff.aggregators.MeanFactory()`
      (weighted, as the paper). Pass `tff.aggregators.UnweightedMeanFactory()`
      for the unweighted form.
    planned_rounds: None, or T: the inner mean's state carries the plan and
      the T+1-th round is refused (`tff_priv.aggregators.plan`;
      `GaussianUDPFactory.calibrated` sets it).

  Returns:
    A `ClientNoiseFactory`, weighted or unweighted as `inner_agg_factory`
    (a builder of the other kind gets one line naming the fix), with a
    `guarantee` property. Its processes' state is a `ClientNoiseState`.
  """
  if (noise_stddev is None) == (schedule is None):
    raise ValueError('give exactly one of noise_stddev and schedule')
  sensitivity = validation.positive('sensitivity', sensitivity)
  source = (
      FixedNoise(noise_stddev) if schedule is None else ScheduledNoise(schedule)
  )

  def dp_event_fn(sigma):
    return dp_accounting.GaussianDpEvent(
        tf.cast(sigma, tf.float64) / tf.constant(sensitivity, tf.float64)
    )

  return client_noise_factory(
      source,
      planned_inner(inner_agg_factory, planned_rounds, 'GaussianUDPFactory'),
      dp_event_fn=dp_event_fn,
      guarantee=UDP_GUARANTEE,
  )


def planned_inner(
    inner_agg_factory: Optional[InnerFactory],
    planned_rounds: Optional[int],
    name: str,
):
  """The inner mean (default `MeanFactory()`), carrying a plan if given."""
  if planned_rounds is None:
    return inner_agg_factory
  if inner_agg_factory is None:
    inner_agg_factory = tff.aggregators.MeanFactory()
  return plan_lib.planned_factory(inner_agg_factory, planned_rounds, name)


def _calibrated(
    epsilon: float,
    *,
    total_rounds: int,
    population: int,
    clients_per_round: int,
    sensitivity: float,
    delta: float = 1e-5,
    spent=None,
    inner_agg_factory: Optional[InnerFactory] = None,
):
  """A `GaussianUDPFactory` whose `total_rounds` rounds meet (eps, delta).

  For a loop that draws K of the N clients uniformly each round and charges
  each round with `PrivacyLedger.record_round(state, population=N,
  sample_size=K)`: sigma is calibrated (`target_noise.noise_for_target`) so
  that the smaller of the sampled and the unsampled composition of T rounds
  of `GaussianDpEvent(sigma / sensitivity)` meets the target (both bound the
  release of noise added on each client). Round T+1 is refused (`plan`).
  `spent`: a `PrivacyLedger` of earlier rounds, met together with the
  `total_rounds` rounds added (a plan extended).
  """
  sigma = target_noise.noise_for_target(
      epsilon,
      delta,
      validation.int_at_least('total_rounds', total_rounds, 1),
      sampling_lib.Sampling.fixed(population, clients_per_round),
      sensitivity=validation.positive('sensitivity', sensitivity),
      min_with_unsampled=True,
      spent=calibration.Spent.of(spent),
  )
  return GaussianUDPFactory(
      sigma,
      sensitivity=sensitivity,
      inner_agg_factory=inner_agg_factory,
      planned_rounds=total_rounds,
  )


GaussianUDPFactory.calibrated = _calibrated


def _theorem1_for_target(epsilon, delta, q, rounds) -> dict:
  z = closed_forms.udp_theorem1_sigma(epsilon, delta, q, rounds, 1.0)
  check = closed_forms.udp_theorem1_truth(epsilon, delta, q, rounds)
  return {
      'formula': 'UDP Theorem 1, eq. (10)',
      'paper_noise_multiplier': z,
      'paper_claimed_epsilon': epsilon,
      'true_rdp_epsilon': check.true_epsilon,
      'true_delta_at_claimed_epsilon': check.true_delta,
      'holds': check.holds,
  }


def _theorem1_for_noise(
    noise_multiplier, rdp_epsilon, delta, q, rounds
) -> dict:
  del rdp_epsilon  # The claim is the paper's own, beside the accountant's.
  # The eps eq. (10) claims for this noise: sigma is proportional to 1/eps,
  # so eps = sigma(eps=1) / z with Delta = 1.
  return {
      'formula': 'UDP Theorem 1, eq. (10) solved for eps',
      'paper_claimed_epsilon': (
          closed_forms.udp_theorem1_sigma(1.0, delta, q, rounds, 1.0)
          / noise_multiplier
      ),
  }


def privacy_report(
    params: dict[str, Any], rounds: int, sampling: sampling_lib.Sampling
) -> dict:
  """Each client's Gaussian by every accountant, UDP Theorem 1 (eq. 10) beside.

  z = sigma / Delta. For a target eps: the noise the accountants need (and
  sigma, given the sensitivity), and eq. (10)'s with what it really gives
  (`closed_forms.udp_theorem1_truth`); for a noise level: the eps eq. (10)
  claims for it. The report carries the training program's name 'udp'.

  Args:
    params: by name, `delta` and any of `epsilon`, `noise_multiplier`,
      `noise_stddev` and `sensitivity` (Delta; absent: not given).
    rounds: T >= 1.
    sampling: the rounds' client `Sampling`.

  Raises:
    ValueError: noise_stddev without the sensitivity, or a bad value.
  """
  params = dict(params)
  sensitivity = params.pop('sensitivity', None)
  if sensitivity is not None:
    sensitivity = validation.positive('sensitivity', sensitivity)
  elif params.get('noise_stddev') is not None:
    raise ValueError(
        'noise_stddev needs sensitivity (of a client update) to give a noise '
        'multiplier'
    )
  return reports.gaussian_mechanism_report(
      'udp',
      rounds=rounds,
      scale=sensitivity,
      claim_for_target=_theorem1_for_target,
      claim_for_noise=_theorem1_for_noise,
      sampling=sampling,
      **params,
  )
