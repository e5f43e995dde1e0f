"""UDP learning processes (Wei et al.): fixed-T UDP and CRD (Algorithm 2).

`build_udp_process` is UDP from tff.learning parts (one clipped full-batch
client step, client Gaussian noise, the mean); `build_crd_process` wraps such a
process whose aggregator holds a CRD `BudgetSchedule` (built by `crd_schedule`
for a client's (eps, delta) target) and shrinks the planned rounds when the
validation loss of the global model on server-side data stalls. Each round's
DpEvent is the aggregator's (`state.aggregator.dp_event`, read with
`tff_priv.accounting.guarantees.extract_dp_event`). For the training program:
`caveats` and `crd_adopt` (a resumed CRD state charged for the rounds run
again).
"""

import collections
from typing import Callable, NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.accounting import calibration as calibration_lib
from tff_priv.accounting import events
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.accounting import udp as udp_accounting
from tff_priv.aggregators import udp as udp_aggregators
from tff_priv.learning import udp_client_work
from tff_priv.mechanisms import noise_schedule


class CRDState(NamedTuple):
  """The state of a `build_crd_process` process.

  All plain tensors, so checkpoints carry the whole schedule
  (`learning.aggregator.noise` is the `ScheduleState`, and
  `learning.aggregator.dp_event` the last round's
  GaussianDpEvent(sigma_t / sensitivity)).

  Attributes:
    learning: the composed UDP process's state.
    validation_loss: V of the current global model.
    discounts: how many rounds the trigger has discounted the schedule.
  """

  learning: object
  validation_loss: object
  discounts: object


def build_udp_process(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    learning_rate: float,
    clip_norm: float,
    per_example_loss: udp_client_work.PerExampleLoss,
    sensitivity: float,
    noise_stddev: Optional[float] = None,
    schedule: Optional[noise_schedule.BudgetSchedule] = None,
    weighted: bool = True,
    local_steps: int = 1,
    sensitivity_is_own_bound: bool = False,
    report_train_metrics: bool = False,
    clipping: str = 'auto',
) -> tff.learning.templates.LearningProcess:
  """UDP: clipped full-batch client step, client Gaussian noise, weighted mean.

  Composed from tff.learning parts: the model broadcast, UDP client work
  (`udp_client_work`: one clipped full-batch step),
  `tff_priv.aggregators.GaussianUDPFactory` (client noise, then the
  |D_i|-weighted mean) and a server SGD step of learning rate 1. The new model
  is the noisy (weighted) mean of the clients' models, as the paper. The
  aggregator state (`state.aggregator`, a
  `tff_priv.aggregators.udp.ClientNoiseState`) holds the noise schedule
  (`noise`) and the DpEvent of the last round, GaussianDpEvent(sigma_t /
  sensitivity) for one example of one participating client, without client
  sampling.

  Args:
    model_fn: no-arg function returning a fresh `VariableModel`.
    learning_rate: client step size eta.
    clip_norm: per-example gradient clip C.
    per_example_loss: (y_true, y_pred) -> per-example losses.
    sensitivity: Delta > 0, the L2 sensitivity of a client's update under
      replace-one-example adjacency: for one step
      `udp_client_work.udp_sensitivity(learning_rate, clip_norm, n)` with n
      the smallest |D_i| of any client that may take part; with
      `local_steps > 1` a bound of the caller's own.
    noise_stddev: fixed client noise std (fixed-T UDP). Exclusive with
      `schedule`.
    schedule: a CRD `BudgetSchedule` (see `tff_priv.learning.udp.crd_schedule`).
    weighted: weight clients by |D_i| (the paper) or not.
    local_steps: see `udp_client_work.build_udp_client_work`.
    sensitivity_is_own_bound: must be True with `local_steps > 1`: the caller
      states that `sensitivity` bounds its several steps (2 eta C / |D_i|
      bounds one full-batch step only).
    report_train_metrics: see `udp_client_work.build_udp_client_work` (not
      private).
    clipping: how the clipped per-example sum is computed, 'auto', 'ghost' or
      'per_example' (see `udp_client_work.build_udp_client_work`).

  Returns:
    A `tff.learning.templates.LearningProcess`.

  Raises:
    ValueError: `local_steps > 1` without `sensitivity_is_own_bound`.
  """
  if local_steps > 1 and not sensitivity_is_own_bound:
    raise ValueError(
        'local_steps > 1 needs sensitivity_is_own_bound=True: '
        '2 eta C / |D_i| bounds the sensitivity of ONE full-batch step only, '
        'so with several steps the sensitivity must be a bound of your own'
    )
  client_work = udp_client_work.build_udp_client_work(
      model_fn,
      learning_rate=learning_rate,
      clip_norm=clip_norm,
      per_example_loss=per_example_loss,
      local_steps=local_steps,
      report_train_metrics=report_train_metrics,
      clipping=clipping,
  )
  with tf.Graph().as_default():
    weights_type = tff.learning.models.weights_type_from_model(model_fn())
  aggregator = _udp_aggregator(
      weights_type.trainable, noise_stddev, sensitivity, schedule, weighted
  )

  @tff.tensorflow.computation
  def initial_weights():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  return tff.learning.templates.compose_learning_process(
      initial_weights,
      tff.learning.templates.build_broadcast_process(weights_type),
      client_work,
      aggregator,
      tff.learning.templates.build_apply_optimizer_finalizer(
          tff.learning.optimizers.build_sgdm(learning_rate=1.0), weights_type
      ),
  )


def _udp_aggregator(update_type, noise_stddev, sensitivity, schedule, weighted):
  """The `GaussianUDPFactory` aggregation process of `build_udp_process`."""
  inner = (
      tff.aggregators.MeanFactory()
      if weighted
      else tff.aggregators.UnweightedMeanFactory()
  )
  factory = udp_aggregators.GaussianUDPFactory(
      noise_stddev,
      sensitivity=sensitivity,
      schedule=schedule,
      inner_agg_factory=inner,
  )
  if weighted:
    return factory.create(update_type, tff.TensorType(np.float32))
  return factory.create(update_type)


def _validation_loss(model_fn, weights_type, val_x, val_y, per_example_loss):
  """V: the mean loss of a model's weights on the server's validation set."""

  @tff.tensorflow.computation(weights_type)
  def validation_loss(weights):
    model = model_fn()

    @tf.function  # Automatic control dependencies: assign, then predict.
    def loss(weights):
      tf.nest.map_structure(
          lambda v, t: v.assign(t),
          tff.learning.models.ModelWeights.from_model(model),
          weights,
      )
      pred = model.predict_on_batch(tf.constant(val_x), training=False)
      return tf.reduce_mean(per_example_loss(tf.constant(val_y), pred))

    return loss(weights)

  return validation_loss


def _apply_trigger(learning_state_type, beta, zeta):
  """CRD's trigger: the schedule discounted when V improved by less than zeta.

  (state, previous V, new V, discounts) -> (state, discounts, metrics).
  """

  @tff.tensorflow.computation(
      learning_state_type, np.float32, np.float32, np.int32
  )
  def apply_trigger(state, previous_loss, new_loss, discounts):
    noise_state = noise_schedule.ScheduleState(*state.aggregator.noise)
    stalled = previous_loss - new_loss < zeta
    discounted = noise_schedule.BudgetSchedule.discount(noise_state, beta)
    new_noise = tf.nest.map_structure(
        lambda a, b: tf.where(stalled, a, b), discounted, noise_state
    )
    aggregator = state.aggregator._replace(noise=new_noise)
    new_state = tff.learning.templates.LearningAlgorithmState(
        global_model_weights=state.global_model_weights,
        distributor=state.distributor,
        client_work=state.client_work,
        aggregator=aggregator,
        finalizer=state.finalizer,
    )
    return (
        new_state,
        discounts + tf.cast(stalled, tf.int32),
        collections.OrderedDict(
            validation_loss=new_loss,
            stalled=stalled,
            planned_rounds=new_noise.planned_rounds,
            rounds_done=new_noise.rounds_done,
            done=noise_schedule.BudgetSchedule.is_done(new_noise),
        ),
    )

  return apply_trigger


def build_crd_process(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    learning_rate: float,
    clip_norm: float,
    per_example_loss: udp_client_work.PerExampleLoss,
    schedule: noise_schedule.BudgetSchedule,
    sensitivity: float,
    validation_data: tuple[np.ndarray, np.ndarray],
    beta: float = 0.9,
    zeta: float = 0.001,
    weighted: bool = True,
) -> tff.learning.templates.LearningProcess:
  """CRD (Algorithm 2): UDP whose planned rounds shrink when V stalls.

  After every round the process evaluates the validation loss V of the new
  global model on a server-side validation set:

    if V(w^t) - V(w^{t+1}) < zeta:  T <- floor(beta (T - t)) + t

  with t the rounds done after this one, so the plan only shrinks and the
  next rounds' sigma only shrinks (the remaining budget spread over fewer
  rounds). `is_done(state)` is True once t reaches T; the next round then
  fails instead of spending budget that is not there.

  The validation set is server-side data (public or held out by the server):
  the trigger then releases nothing about the clients, and the schedule's
  values (planned rounds, sigma_t) stay public. (A trigger computed from the
  clients' own held-out data would release their losses without noise;
  tff_priv does not build that variant.)

  Args:
    model_fn: no-arg function returning a fresh `VariableModel`.
    learning_rate: client step size eta.
    clip_norm: per-example gradient clip C.
    per_example_loss: (y_true, y_pred) -> per-example losses; also the
      validation loss.
    schedule: the CRD `BudgetSchedule` (`tff_priv.learning.udp.crd_schedule`).
    sensitivity: Delta > 0 of a client's update, the one the schedule was
      built for (see `build_udp_process`).
    validation_data: server-side (x, y) arrays for V.
    beta: discount factor in (0, 1) (paper: 0.9; 0.8 best in their sweep).
    zeta: improvement threshold >= 0 (paper: 0.001).
    weighted: weight clients by |D_i|.

  Returns:
    A `tff.learning.templates.LearningProcess` whose state is a `CRDState`
    (`learning` the composed process's state).
  """
  beta = validation.open_unit('beta', beta)
  zeta = validation.non_negative('zeta', zeta)
  if not isinstance(schedule, noise_schedule.BudgetSchedule):
    raise TypeError(f'schedule must be a BudgetSchedule, got {schedule!r}')
  val_x, val_y = _checked_validation_data(validation_data)
  inner = build_udp_process(
      model_fn,
      learning_rate=learning_rate,
      clip_norm=clip_norm,
      per_example_loss=per_example_loss,
      sensitivity=sensitivity,
      schedule=schedule,
      weighted=weighted,
  )
  learning_state_type = inner.initialize.type_signature.result.member
  weights_type = learning_state_type.global_model_weights

  validation_loss = _validation_loss(
      model_fn, weights_type, val_x, val_y, per_example_loss
  )
  apply_trigger = _apply_trigger(learning_state_type, beta, zeta)

  init_fn, next_fn = _crd_computations(inner, validation_loss, apply_trigger)
  get_model_weights, set_model_weights = _model_weight_accessors(
      init_fn.type_signature.result.member, weights_type
  )
  return tff.learning.templates.LearningProcess(
      init_fn, next_fn, get_model_weights, set_model_weights
  )


def _crd_computations(inner, validation_loss, apply_trigger):
  """(init_fn, next_fn) of CRD: `inner`'s round, then V and the trigger."""

  @tff.federated_computation()
  def init_fn():
    learning = inner.initialize()
    loss = tff.federated_map(
        validation_loss,
        tff.federated_map(inner.get_model_weights, learning),
    )
    return tff.federated_zip(
        CRDState(
            learning=learning,
            validation_loss=loss,
            discounts=tff.federated_value(np.int32(0), tff.SERVER),
        )
    )

  data_type = inner.next.type_signature.parameter[1]

  @tff.federated_computation(init_fn.type_signature.result, data_type)
  def next_fn(state, client_data):
    output = inner.next(state.learning, client_data)
    new_loss = tff.federated_map(
        validation_loss,
        tff.federated_map(inner.get_model_weights, output.state),
    )
    learning, discounts, crd_metrics = tff.federated_map(
        apply_trigger,
        (output.state, state.validation_loss, new_loss, state.discounts),
    )
    metrics = tff.federated_zip(
        collections.OrderedDict(round=output.metrics, crd=crd_metrics)
    )
    new_state = tff.federated_zip(
        CRDState(
            learning=learning, validation_loss=new_loss, discounts=discounts
        )
    )
    return tff.learning.templates.LearningProcessOutput(new_state, metrics)

  return init_fn, next_fn


def _checked_validation_data(validation_data):
  """(x, y) as arrays, refused unless non-empty and of equal length."""
  val_x, val_y = validation_data
  val_x, val_y = np.asarray(val_x), np.asarray(val_y)
  if len(val_x) != len(val_y) or len(val_x) == 0:
    raise ValueError('validation_data must be non-empty (x, y) of equal length')
  return val_x, val_y


def _model_weight_accessors(state_type, weights_type):
  """(get_model_weights, set_model_weights) of a `CRDState`."""

  @tff.tensorflow.computation(state_type)
  def get_model_weights(state):
    return state.learning.global_model_weights

  @tff.tensorflow.computation(state_type, weights_type)
  def set_model_weights(state, weights):
    learning = state.learning
    return CRDState(
        learning=tff.learning.templates.LearningAlgorithmState(
            global_model_weights=weights,
            distributor=learning.distributor,
            client_work=learning.client_work,
            aggregator=learning.aggregator,
            finalizer=learning.finalizer,
        ),
        validation_loss=state.validation_loss,
        discounts=state.discounts,
    )

  return get_model_weights, set_model_weights


def schedule_state(state) -> noise_schedule.ScheduleState:
  """The CRD schedule state inside a process state (CRDState or composed)."""
  learning = state.learning if isinstance(state, CRDState) else state
  aggregator = learning.aggregator
  if isinstance(aggregator, collections.abc.Mapping):
    noise = aggregator['noise']
  else:
    noise = aggregator.noise
  return noise_schedule.ScheduleState(*noise)


def is_done(state) -> bool:
  """Whether a CRD (or scheduled UDP) run has reached its planned rounds."""
  s = schedule_state(state)
  return bool(s.rounds_done >= s.planned_rounds)


def crd_schedule(
    epsilon: float,
    delta: float,
    sensitivity: float,
    initial_rounds: int,
    *,
    sampling: Optional[sampling_lib.Sampling] = None,
    sampling_probability: Optional[float] = None,
    population: Optional[int] = None,
    sample_size: Optional[int] = None,
    calibration: str = 'tight',
    table_size: int = 256,
) -> noise_schedule.BudgetSchedule:
  """The CRD schedule (Algorithm 2) for a client's (eps, delta) target.

  Its budget (B, and for 'tight' with q < 1 the tabulated costs at the order
  alpha*) is `tff_priv.accounting.udp.crd_budget`'s; the guarantees every
  path keeps are `tff_priv.accounting.udp.crd_bounds`'s.

  Args:
    epsilon: target eps_i > 0.
    delta: target delta_i in (0, 1).
    sensitivity: Delta > 0 of a client's update (absolute units of the noise).
    initial_rounds: T_0 >= 1, the initial plan.
    sampling: the rounds' client `Sampling` (instead of the three below).
    sampling_probability: Poisson client sampling rate q.
    population: U, for fixed-size sampling of `sample_size` clients.
    sample_size: K, for fixed-size sampling.
    calibration: 'tight' (accountant, default) or 'paper' (Theorem 4's B).
    table_size: grid size of the tabulated cost for 'tight' with q < 1.

  Returns:
    A `noise_schedule.BudgetSchedule` in absolute sigma units.
  """
  budget = udp_accounting.crd_budget(
      epsilon,
      delta,
      sensitivity,
      initial_rounds,
      sampling_lib.Sampling.of(
          sampling,
          sampling_probability=sampling_probability,
          population=population,
          sample_size=sample_size,
      ),
      calibration=calibration,
      table_size=table_size,
  )
  return noise_schedule.BudgetSchedule(
      budget.total_budget,
      budget.initial_rounds,
      sigma_table=budget.sigma_table,
      cost_table=budget.cost_table,
      order=budget.order,
  )


def caveats(calibration: Optional[str], crd: bool) -> list[str]:
  """What the reported eps of a UDP run (`crd`: a CRD run) does not cover.

  `calibration`: the target's ('paper': eq. (10), whose eps is a claim;
  not said of CRD).
  """
  out = [
      "record-level DP of each client's data (replace one example); "
      'sensitivity 2 eta C / min_i |D_i| of one clipped full-batch step'
  ]
  if crd:
    out.append(
        'CRD: sigma changes when the validation loss stalls, so the rounds '
        'are chosen adaptively: the reported eps are what the schedule '
        'guarantees on every path (a Renyi filter), not the composition of '
        'the sigma this run used (analyst_ledger, an ex-post diagnostic); '
        'the schedule is calibrated for the analyst, so the eps against '
        'the server is larger'
    )
  elif calibration == 'paper':
    out.append(
        "noise from the paper's Theorem 1: the target epsilon is a claim; "
        "the ledger's eps is what it spends"
    )
  return out


def crd_adopt(
    schedule: noise_schedule.BudgetSchedule,
    sensitivity: float,
    spent: Optional[calibration_lib.Spent],
):
  """A resumed CRD run's state, its budget charged for the rounds run again.

  The checkpoint's schedule state counts the cost of the rounds up to it;
  the ledger holds every round released, the ones after the checkpoint
  included, which run again. The schedule's `spent` becomes the ledger's
  whole cost, so the filter (every released round within the budget) still
  holds; the rounds left share what is left.

  Args:
    schedule: the run's CRD schedule (`crd_schedule`).
    sensitivity: Delta, the one the schedule was built for.
    spent: what the run's ledger charged (None: nothing).

  Returns:
    `(loaded CRDState, fresh state) -> state` (`Loop.adopt_state` of
    the training program), raising ValueError when the rounds left would
    need more than `calibration.MAX_NOISE_INCREASE` times the planned sigma
    (or the schedule cannot share the budget left).
  """

  def adopt(loaded, fresh):
    del fresh  # The schedule is the same: only its spent budget moves.
    if spent is None or not spent.releases:
      return loaded
    charged = sum(
        count * schedule.cost_of(z * sensitivity)
        for z, count in events.gaussian_releases(spent.event)
    )
    aggregator = loaded.learning.aggregator
    noise = noise_schedule.ScheduleState(*aggregator.noise)
    if charged <= float(noise.spent):
      return loaded
    noise = noise._replace(spent=np.float64(charged))
    try:
      sigma, _ = schedule.round_noise(tf.nest.map_structure(tf.constant, noise))
    except tf.errors.InvalidArgumentError as e:
      raise ValueError(e.message.splitlines()[0]) from None
    planned = schedule.round_noise(schedule.initial_state())[0]
    if float(sigma) > calibration_lib.MAX_NOISE_INCREASE * float(planned):
      raise ValueError(
          f'sigma {float(sigma):.4g} needed, {float(sigma / planned):.1f}x '
          f'the planned {float(planned):.4g}'
      )
    learning = loaded.learning._replace(
        aggregator=aggregator._replace(noise=noise)
    )
    return loaded._replace(learning=learning)

  return adopt
