"""LDP-FL learning processes (Sun, Qian, Chen 2021) and their privacy report.

`build_ldp_fl_process` builds a `tff.learning.templates.LearningProcess` in
which every scalar a client uploads goes through `LDPEncodeFactory` (each
scalar eps-LDP, Theorem 1) and the server averages the reports, of model
deltas (default) or of full local weights (the paper's Algorithm 1).
`ldp_report` and `ldp_privacy_report` say what that means over a client's d
scalars and T rounds, and for the range side channel; `privacy_report` is the
training program's report of mechanism 'ldp'.
"""

import collections
import math
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.accounting import closed_forms
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.aggregators import ldp as ldp_aggregators

MODES = ('deltas', 'weights')

# The paper's MNIST range for weights (Section 5: (c, r) = (0, 0.075)).
DEFAULT_WEIGHTS_CENTER = 0.0
DEFAULT_WEIGHTS_RADIUS = 0.075
# Deltas of one local epoch at lr 0.03 on the McMahan CNN (mnist5k, 40
# examples, batch 10) have |delta| <= ~0.01 for all but a few coordinates
# (measured once on the clients' deltas; the factory no longer reports its
# clipped fraction, an exact client statistic). 0.01 keeps the
# clipped fraction small while r q stays ~7.5x smaller than in weights mode.
DEFAULT_DELTAS_CENTER = 0.0
DEFAULT_DELTAS_RADIUS = 0.01


def _check_mode(mode):
  if not isinstance(mode, str) or mode not in MODES:
    raise ValueError(f'mode must be one of {MODES}, got {mode!r}')
  return mode


def default_range(mode: str) -> tuple[float, float]:
  """(c, r): the default range center and radius of a process of `mode`."""
  if mode == 'weights':
    return DEFAULT_WEIGHTS_CENTER, DEFAULT_WEIGHTS_RADIUS
  return DEFAULT_DELTAS_CENTER, DEFAULT_DELTAS_RADIUS


def ldp_factory(
    epsilon: Optional[float],
    *,
    mode: str = 'deltas',
    range_mode: str = 'fixed',
    center=None,
    radius=None,
    expected_clients_per_round: Optional[float] = None,
) -> Optional[ldp_aggregators.LDPEncodeFactory]:
  """The `LDPEncodeFactory` a process of `mode` uses (None if noise-free).

  Args:
    epsilon: eps of every uploaded scalar, or None for the noise-free baseline.
    mode: 'deltas' or 'weights'; selects the default range.
    range_mode: 'fixed', 'minmax' or 'quantile' (see `LDPEncodeFactory`).
    center: c (one float, or one per tensor); None = the mode's default.
    radius: r (one float, or one per tensor); None = the mode's default.
    expected_clients_per_round: required for range_mode='quantile'.

  Returns:
    The factory, or None when `epsilon` is None.
  """
  mode = _check_mode(mode)
  if epsilon is None:
    return None
  default_center, default_radius = default_range(mode)
  if center is None:
    center = default_center
  if radius is None:
    radius = default_radius
  return ldp_aggregators.LDPEncodeFactory(
      epsilon,
      range_mode,
      center,
      radius,
      expected_clients_per_round=expected_clients_per_round,
  )


def build_weights_client_work(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    metrics_aggregator: Optional[Callable[..., tff.Computation]] = None,
) -> tff.learning.templates.ClientWorkProcess:
  """Client work whose update is the client's trained trainable weights.

  Wraps FedAvg's client work (`tff.learning.templates.
  build_model_delta_client_work`, uniform weighting) rather than rewriting
  the local training loop: that work returns delta = w - w_u (TFF's sign), so
  the local weights are w_u = w - delta. A client whose training produced
  non-finite weights has delta zeroed by TFF and so uploads w unchanged.

  Args:
    model_fn: no-arg function returning a fresh `VariableModel`.
    client_optimizer_fn: the clients' `tff.learning.optimizers.Optimizer`.
    metrics_aggregator: as in `build_model_delta_client_work` (None: TFF's
      `sum_then_finalize`, released without noise).

  Returns:
    A `ClientWorkProcess` with update = local trainable weights, weight 1.
  """
  inner = tff.learning.templates.build_model_delta_client_work(
      model_fn,
      client_optimizer_fn,
      client_weighting=tff.learning.ClientWeighting.UNIFORM,
      metrics_aggregator=metrics_aggregator,
  )
  weights_type = inner.next.type_signature.parameter[1].member
  result_type = inner.next.type_signature.result.result.member

  @tff.tensorflow.computation(weights_type, result_type)
  def to_local_weights(weights, result):
    local = tf.nest.map_structure(tf.subtract, weights.trainable, result.update)
    return tff.learning.templates.ClientResult(
        update=local, update_weight=result.update_weight
    )

  @tff.federated_computation(
      inner.initialize.type_signature.result,
      inner.next.type_signature.parameter[1],
      inner.next.type_signature.parameter[2],
  )
  def next_fn(state, weights, data):
    output = inner.next(state, weights, data)
    result = tff.federated_map(to_local_weights, (weights, output.result))
    return tff.templates.MeasuredProcessOutput(
        state=output.state, result=result, measurements=output.measurements
    )

  return tff.learning.templates.ClientWorkProcess(
      inner.initialize,
      next_fn,
      get_hparams_fn=inner.get_hparams,
      set_hparams_fn=inner.set_hparams,
  )


def build_replace_weights_finalizer(
    weights_type,
) -> tff.learning.templates.FinalizerProcess:
  """Finalizer: the new global trainable weights are the aggregate itself.

  `tff.learning.templates.build_apply_optimizer_finalizer` applies an
  optimizer to a pseudo-gradient; weights mode has no gradient, the
  aggregate *is* the model (w^{t+1} = mean_u M(w_u^{t+1})), hence this small
  finalizer. Non-trainable weights are kept.

  Args:
    weights_type: the model's `ModelWeights` type.

  Returns:
    A `FinalizerProcess` with state () and no measurements.
  """
  update_type = weights_type.trainable

  @tff.tensorflow.computation(weights_type, update_type)
  def replace(weights, aggregate):
    return tff.learning.models.ModelWeights(
        trainable=aggregate, non_trainable=weights.non_trainable
    )

  @tff.federated_computation()
  def init_fn():
    return tff.federated_value((), tff.SERVER)

  @tff.federated_computation(
      init_fn.type_signature.result,
      tff.FederatedType(weights_type, tff.SERVER),
      tff.FederatedType(update_type, tff.SERVER),
  )
  def next_fn(state, weights, aggregate):
    return tff.templates.MeasuredProcessOutput(
        state=state,
        result=tff.federated_map(replace, (weights, aggregate)),
        measurements=tff.federated_value(collections.OrderedDict(), tff.SERVER),
    )

  return tff.learning.templates.FinalizerProcess(init_fn, next_fn)


def build_ldp_fl_process(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    epsilon: Optional[float],
    mode: str = 'deltas',
    range_mode: str = 'fixed',
    center=None,
    radius=None,
    expected_clients_per_round: Optional[float] = None,
    metrics_aggregator: Optional[Callable[..., tff.Computation]] = None,
) -> tff.learning.templates.LearningProcess:
  """LDP-FL in weights mode (the paper) or deltas mode (default).

  Every scalar a client uploads goes through `LDPEncodeFactory` (each scalar
  eps-LDP, Theorem 1) and the server averages the reports:

  * mode='deltas' (default): unweighted FedAvg
    (`tff.learning.algorithms.build_unweighted_fed_avg`) with the LDP factory
    as its model aggregator and a server SGD step of learning rate 1, so

        w^{t+1} = w^t - mean_u M(w^t - w_u^{t+1}).

    A delta's range is far narrower than a weight's, so r (and the variance
    r^2 q^2 of Lemma 3) is far smaller; the default fixed radius is
    `DEFAULT_DELTAS_RADIUS`.
  * mode='weights' (the paper's Algorithm 1): clients train locally and upload
    their full local weights w_u^{t+1}; the server's new model is the mean of
    the encoded weights,

        w^{t+1} = mean_u M(w_u^{t+1}),

    an unbiased estimate of FedAvg's mean of the clipped weights (Lemma 2).
    The default range is the paper's MNIST (c, r) = (0, 0.075) for every
    layer.

  `epsilon=None` gives the noise-free baseline of the same mode: the plain mean
  (`tff.aggregators.UnweightedMeanFactory`) instead of the LDP factory. Local
  training runs over each client's dataset as given (local epochs and batch
  size are the dataset's: `ClientSpec(num_epochs, batch_size)`).

  What is private: each uploaded scalar is eps-LDP with respect to the
  client's value; what that means over a client's d scalars and T rounds is
  `ldp_report`'s and `ldp_privacy_report`'s business (they call
  `tff_priv.accounting`; no formula is repeated here). The range side channel:
  'fixed' releases nothing, 'minmax' releases each tensor's min/max in clear
  (no finite guarantee), 'quantile' releases one Gaussian-noised count per
  tensor per round (its DpEvent is charged).

  Args:
    model_fn: no-arg function returning a fresh `VariableModel`.
    client_optimizer_fn: the clients' `tff.learning.optimizers.Optimizer`
      (the paper: SGD, lr 0.03 on MNIST).
    epsilon: eps of every uploaded scalar; None = noise-free baseline (plain
      mean, same mode).
    mode: 'deltas' (FedAvg on encoded deltas) or 'weights' (the server's model
      is the mean of the encoded local weights).
    range_mode: 'fixed', 'minmax' or 'quantile' (see `LDPEncodeFactory`).
    center: c, one float or one per trainable tensor; None = the mode's
      default (`DEFAULT_WEIGHTS_CENTER` / `DEFAULT_DELTAS_CENTER`).
    radius: r, likewise (`DEFAULT_WEIGHTS_RADIUS` / `DEFAULT_DELTAS_RADIUS`).
    expected_clients_per_round: required for range_mode='quantile'.
    metrics_aggregator: how the clients' training metrics are aggregated
      (None: TFF's `sum_then_finalize`, released without noise;
      `tff_priv.learning.client_metrics.no_client_metrics` releases none).

  Returns:
    A `tff.learning.templates.LearningProcess`; its metrics hold the
    aggregator's measurements (the range used: center, radius) under
    'aggregator'; the round's DpEvent is in `state.aggregator` for an LDP
    factory (`tff_priv.accounting.guarantees.extract_dp_event`).

  Raises:
    ValueError, TypeError: a bad argument (checked here or by the factory).
  """
  _check_model_and_optimizer(model_fn, client_optimizer_fn)
  mode = _check_mode(mode)
  factory = ldp_factory(
      epsilon,
      mode=mode,
      range_mode=range_mode,
      center=center,
      radius=radius,
      expected_clients_per_round=expected_clients_per_round,
  )
  if mode == 'deltas':
    return tff.learning.algorithms.build_unweighted_fed_avg(
        model_fn,
        client_optimizer_fn=client_optimizer_fn,
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
        model_aggregator=factory,  # None: TFF's UnweightedMeanFactory.
        metrics_aggregator=metrics_aggregator,
    )

  return _weights_mode_process(
      model_fn, client_optimizer_fn, factory, metrics_aggregator
  )


def _check_model_and_optimizer(model_fn, client_optimizer_fn) -> None:
  if not callable(model_fn):
    raise TypeError(f'model_fn must be callable, got {model_fn!r}')
  if not isinstance(client_optimizer_fn, tff.learning.optimizers.Optimizer):
    raise TypeError(
        'client_optimizer_fn must be a tff.learning.optimizers.Optimizer, got '
        f'{client_optimizer_fn!r}'
    )


def _weights_mode_process(
    model_fn, client_optimizer_fn, factory, metrics_aggregator
):
  """`build_ldp_fl_process` in mode='weights' (`factory` None: noise-free)."""
  with tf.Graph().as_default():
    weights_type = tff.learning.models.weights_type_from_model(model_fn())
  inner = factory or tff.aggregators.UnweightedMeanFactory()
  # compose_learning_process takes a weighted aggregator; the client weights
  # are all 1 and ignored (as build_unweighted_fed_avg does).
  aggregator = tff.aggregators.as_weighted_aggregator(inner).create(
      weights_type.trainable, tff.TensorType(np.float32)
  )

  @tff.tensorflow.computation
  def initial_weights():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  return tff.learning.templates.compose_learning_process(
      initial_weights,
      tff.learning.templates.build_broadcast_process(weights_type),
      build_weights_client_work(
          model_fn, client_optimizer_fn, metrics_aggregator
      ),
      aggregator,
      build_replace_weights_finalizer(weights_type),
  )


def ldp_report(
    epsilon: float,
    *,
    num_values: int,
    rounds: int,
    delta: float,
    num_clients: Optional[int] = None,
) -> dict:
  """A client's privacy after `rounds` rounds of d eps0-LDP values each.

  The paper's claim (eps per value) beside plain composition d T eps0, the
  RDP/PLD accountants over the d T pure-eps releases, and with `num_clients`
  the shuffle-model bound with its validity condition (all from
  `tff_priv.accounting`); a 'guarantee' sentence says which is a guarantee.
  Client sampling is not credited (every report is local DP).

  Args:
    epsilon: eps0 of every uploaded scalar.
    num_values: d, scalars per client per round.
    rounds: T >= 1.
    delta: the delta of the (eps, delta) numbers.
    num_clients: n, clients whose reports are shuffled together per round
      (None: no shuffle bound).

  Returns:
    A JSON-ready dict.
  """
  eps0 = validation.positive(
      'ldp_epsilon', validation.required('ldp_epsilon', epsilon)
  )
  num_values = validation.int_at_least(
      'num_values', validation.required('num_values', num_values), 1
  )
  delta = validation.open_unit('delta', delta)
  rounds = validation.int_at_least('rounds', rounds, 1)
  ledger = ledger_lib.PrivacyLedger()
  ledger.record_pure_epsilon(eps0, count=num_values * rounds)
  out = {
      'delta': delta,
      'rounds': rounds,
      'num_values': num_values,
      'paper_epsilon_per_value': closed_forms.ldp_per_value_epsilon(eps0),
      'plain_composition_epsilon': closed_forms.ldp_plain_composition_epsilon(
          eps0, num_values, rounds
      ),
  }
  accounted = ledger.report(delta)
  out['rdp_epsilon'] = accounted['rdp_epsilon']
  out['pld_epsilon'] = accounted['pld_epsilon']
  if accounted['unsupported']:
    out['unsupported'] = accounted['unsupported']
  if num_clients is not None:
    bound = closed_forms.ldp_shuffle_composed(
        eps0, num_clients, num_values, rounds, delta
    )
    out['shuffle_epsilon'] = bound.epsilon
    out['shuffle_applicable'] = bound.applicable
    out['shuffle_reason'] = bound.reason
  out['guarantee'] = (
      'per client: plain_composition_epsilon (pure DP), rdp_epsilon and '
      'pld_epsilon (at delta) are guarantees of local DP for all d values over '
      'T rounds; shuffle_epsilon is a guarantee only when shuffle_applicable '
      '(and only against a server that sees the shuffled messages); '
      "paper_epsilon_per_value is the paper's per-value claim, not a bound on "
      'what a client releases'
  )
  return out


def privacy_report(
    params: dict[str, Any], rounds: int, sampling: sampling_lib.Sampling
) -> dict:
  """A client's local DP: the paper's claim, its composition, the shuffle bound.

  `ldp_report` for `rounds` rounds of d eps0-LDP values; client sampling is
  not credited (every report is local DP). The report carries the training
  program's name 'ldp'.

  Args:
    params: by name, `ldp_epsilon`, `delta`, `num_values` and `num_clients`
      (absent: not given; `delta` given; `ldp_epsilon` and `num_values`
      required).
    rounds: T >= 1.
    sampling: ignored.
  """
  del sampling
  return {
      'mechanism': 'ldp',
      **ldp_report(
          params.get('ldp_epsilon'),
          num_values=params.get('num_values'),
          rounds=rounds,
          delta=params['delta'],
          num_clients=params.get('num_clients'),
      ),
  }


def resolved_values(
    factory: ldp_aggregators.LDPEncodeFactory,
    process: tff.learning.templates.LearningProcess,
) -> dict:
  """What a run of `factory` in `process` uses (JSON-ready).

  d, the values a client reports per round (the process's trainable
  weights), and whether the range release is private.
  """
  update_type = process.initialize.type_signature.result.member
  update_type = update_type.global_model_weights.trainable
  return {
      'values_per_client_per_round': factory.num_scalars(update_type),
      'range_release_is_private': factory.range_release_is_private,
  }


def run_caveats(factory: ldp_aggregators.LDPEncodeFactory) -> list[str]:
  """What the eps a run of `factory` reports does not cover, in words."""
  caveats = [
      'local DP: each client is charged d values of eps0 for every round '
      'it takes part in (plain composition through the accountant); the '
      'shuffle-model bound is in the closed-form report'
  ]
  if not factory.range_release_is_private:
    caveats.append(
        "ldp_range_mode='minmax' sends the clients' min/max in the clear: "
        'a non-private release (eps = inf)'
    )
  return caveats


def ldp_privacy_report(
    epsilon: float,
    *,
    num_values: int,
    rounds: int,
    num_clients: int,
    delta: float,
    range_mode: str = 'fixed',
    range_event=None,
) -> dict:
  """Per-round and cumulative privacy of a client after `rounds` rounds.

  Both parts are `ldp_report` (eps per value = the paper's claim; plain
  composition d T eps; the RDP/PLD accountants over the d T pure-eps
  releases; the shuffle-model bound with its validity condition; a
  'guarantee' sentence), for rounds=1 and for `rounds`. Client sampling is
  not credited (every report is local DP).

  The range release ('range_release'):
  * 'fixed': nothing released.
  * 'minmax': each tensor's min/max sent in clear: no finite guarantee for
    this side channel; the LDP numbers cover the encoded values only.
  * 'quantile': `range_event` (the range part of the factory's round
    event, `guarantees.extract_dp_event(state.aggregator).events[1]`: one
    Gaussian count per tensor, replace-one adjacency), one per round,
    counted by a `PrivacyLedger` (RDP) alone and together with the d T
    pure-eps releases. Its noise is added to the sum at the server,
    so it is central DP: it protects against whoever sees the released range,
    not against the aggregator.

  Args:
    epsilon: eps0 of every uploaded scalar.
    num_values: d, scalars per client per round.
    rounds: T >= 1, rounds so far.
    num_clients: n, clients whose reports are shuffled together per round.
    delta: the delta of the (eps, delta) numbers.
    range_mode: 'fixed', 'minmax' or 'quantile'.
    range_event: the per-round range DpEvent (required for 'quantile').

  Returns:
    A JSON-ready dict with 'per_round', 'cumulative' and 'range_release'.
  """
  rounds = validation.int_at_least('rounds', rounds, 1)
  range_mode = validation.one_of(
      'range_mode', range_mode, ldp_aggregators.RANGE_MODES
  )
  if range_mode == 'quantile' and range_event is None:
    raise ValueError('range_event is required for range_mode="quantile"')

  def part(t):
    return ldp_report(
        epsilon,
        num_values=num_values,
        rounds=t,
        delta=delta,
        num_clients=num_clients,
    )

  out = {
      'per_round': part(1),
      'cumulative': part(rounds),
      'range_release': {'mode': range_mode},
  }
  release = out['range_release']
  if range_mode == 'fixed':
    release.update(private=True, note='fixed range: nothing released')
  elif range_mode == 'minmax':
    release.update(
        private=False,
        epsilon=math.inf,
        note=(
            "each tensor's min/max is sent in clear every round (the "
            "paper's adaptive range): no finite guarantee for this side "
            'channel; the LDP numbers cover the encoded values only'
        ),
    )
  else:
    alone = ledger_lib.PrivacyLedger()
    alone.record(range_event, count=rounds)
    both = ledger_lib.PrivacyLedger()
    both.record(range_event, count=rounds)
    both.record_pure_epsilon(epsilon, count=num_values * rounds)
    release.update(
        private=True,
        rdp_epsilon=alone.epsilon(delta, 'rdp'),
        with_values_rdp_epsilon=both.epsilon(delta, 'rdp'),
        note=(
            'DP quantile estimate of the range (Gaussian count per tensor per '
            'round, noise added at the server: central DP, not local)'
        ),
    )
  return out
