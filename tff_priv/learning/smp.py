"""Fed-SMP as a TFF learning process: rand_k / top_k masks, DP-FedAvg at p = 1.

`build_fedsmp_process` composes one round of Fed-SMP (Hu, Guo, Gong) around a
`tff_priv.aggregators.smp.SparsifiedSecureSumFactory`: the round's mask (top_k:
from the server's training on public data; rand_k: from the aggregator's public
seed), local training from the broadcast model, the factory's sparsified,
clipped and noised secure sum, and a server step. Guarantee: the factory's, per
round, for the model update (the mask reads public inputs only); NOT covered:
the clients' training metrics (by default a plain, un-noised sum).
"""

import collections
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

# TFF's model-delta client update, the TF function that
# `tff.learning.templates.build_model_delta_client_work` runs on each client.
# The server's public training calls it too, so that it is by construction the
# clients' training (optimizer, hyperparameters, loop, non-finite handling);
# TFF 0.87 has no public name for it.
from tensorflow_federated.python.learning.templates import (
    model_delta_client_work as tff_model_delta,
)

from tff_priv import validation
from tff_priv.aggregators import smp as smp_aggregators
from tff_priv.mechanisms import smp as smp_mechanisms

# The loop TFF's build_model_delta_client_work uses by default; the public
# training uses the same one.
_LOOP = tff.learning.LoopImplementation.DATASET_REDUCE
# The factory's aggregator is unweighted (the sum is divided by the fixed K);
# the client work's update weights are not used.
_WEIGHTING = tff.learning.ClientWeighting.UNIFORM
# A round's four TFF components, in the order of LearningAlgorithmState.
_Components = collections.namedtuple(
    '_Components', ['distributor', 'client_work', 'aggregator', 'finalizer']
)
# `build_fedsmp_process`'s `client_work_wrapper`.
_ClientWorkWrapper = Callable[
    [tff.learning.templates.ClientWorkProcess],
    tff.learning.templates.ClientWorkProcess,
]


def build_fedsmp_process(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    aggregator_factory: smp_aggregators.SparsifiedSecureSumFactory,
    server_optimizer_fn: Optional[tff.learning.optimizers.Optimizer] = None,
    public_data: Optional[tf.data.Dataset] = None,
    local_epochs: int = 1,
    metrics_aggregator: Optional[Callable[..., tff.Computation]] = None,
    client_work_wrapper: Optional[_ClientWorkWrapper] = None,
) -> tff.learning.templates.LearningProcess:
  """Fed-SMP: (public top_k or rand_k) mask, local training, sparsified DP sum.

  A round: the server's mask (top_k: from its training on `public_data`;
  rand_k: the aggregator's), `local_epochs` of the clients' training from the
  broadcast model, the factory's sparsified, clipped, noised secure sum, a
  server step; step by step, with the sign convention, in `_round_computations`
  (the public training: `_top_k_mask_computations`).

  Guarantee: that of the factory, per round, for the model update: a Gaussian
  mechanism of sensitivity C and noise multiplier sigma, whose DpEvent is in
  `state.aggregator` (`PrivacyLedger.record_round(state.aggregator, ...)`
  charges it with the sampling rate; this module does no accounting). The mask
  adds nothing (public inputs only). NOT covered: the clients' training
  metrics, which TFF aggregates with `metrics_aggregator` (default
  `tff.learning.metrics.sum_then_finalize`: a plain, un-noised sum of the
  clients' loss sums and example counts). A run that must release nothing else
  passes `tff_priv.learning.client_metrics.no_client_metrics`.

  Args:
    model_fn: no-arg function returning a fresh
      `tff.learning.models.VariableModel` (not a captured one).
    client_optimizer_fn: a `tff.learning.optimizers.Optimizer` for the
      clients' local training (the paper: momentum SGD,
      `tff.learning.optimizers.build_sgdm(lr, momentum)`); with top_k, also the
      server's public training.
    aggregator_factory: a `SparsifiedSecureSumFactory` (its mask, compression,
      noise, clip and K define the round's privacy mechanism; compression=1
      with rand_k is DP-FedAvg).
    server_optimizer_fn: a `tff.learning.optimizers.Optimizer` applied to the
      aggregate at the server; default SGD with learning rate 1 (the paper's
      theta^{t+1} = theta^t + aggregate).
    public_data: mask='top_k' only, and required then: a finite, non-empty
      `tf.data.Dataset` of public examples, batched as the clients' data is.
    local_epochs: the local period E >= 1: clients make E passes over their
      data (`dataset.repeat(E)`), and so does the public training.
    metrics_aggregator: how the clients' training metrics are aggregated, as in
      `tff.learning.templates.build_model_delta_client_work`; None is TFF's
      `sum_then_finalize` (released without noise);
      `client_metrics.no_client_metrics` releases none.
    client_work_wrapper: applied to the model-delta client work (e.g.
      `tff_priv.learning.canary_clients.wrap_client_work`); the process's
      client data is then the wrapped client work's. Only with
      `local_epochs=1`.

  Returns:
    A `tff.learning.templates.LearningProcess` whose state is a
    `tff.learning.templates.LearningAlgorithmState` (the aggregator's state is
    the factory's `RandKState` or `TopKState`). Measurements of each round
    (server): `distributor`, `client_work`, `aggregator` (the factory's public
    `uploaded_bits_per_client`), `finalizer`, and `mask`: `mask_size` (int32,
    k) and, for top_k, `public_train` (the finalized metrics of the public
    training, same names as the clients' `train` metrics: with
    `tff.learning.models.from_keras_model`, `loss` is the example-weighted mean
    loss over the public training batches). The round's mask can be read from
    the state: for top_k, `state.aggregator.mask_indices` after a round is the
    mask that round used; for rand_k, `smp_mechanisms.rand_k_indices(
    smp_mechanisms.round_seed(state.aggregator.mask_seed,
    state.aggregator.round_num), d, k)` before it.

  Raises:
    TypeError: an argument has the wrong type, or `public_data` does not match
      the model's input spec (the message names the argument).
    ValueError: an argument is out of range: `local_epochs` < 1,
      `public_data` missing or empty or infinite with top_k, or given with
      rand_k, or `client_work_wrapper` with `local_epochs` > 1.
  """
  server_optimizer_fn, local_epochs = _checked_arguments(
      model_fn,
      client_optimizer_fn,
      server_optimizer_fn,
      aggregator_factory,
      local_epochs,
      metrics_aggregator,
  )
  return _checked_process(
      model_fn,
      client_optimizer_fn,
      aggregator_factory,
      server_optimizer_fn,
      public_data,
      local_epochs,
      metrics_aggregator,
      client_work_wrapper,
  )


def _checked_process(
    model_fn,
    client_optimizer_fn,
    aggregator_factory,
    server_optimizer_fn,
    public_data,
    local_epochs,
    metrics_aggregator,
    client_work_wrapper,
):
  """`build_fedsmp_process`'s process, the arguments `_checked_arguments`'."""
  top_k = aggregator_factory.mask == 'top_k'

  weights_type, element_type, metric_finalizers = _model_types(model_fn)
  if top_k:
    public_runs = _materialize_public_data(public_data, element_type)
  elif public_data is not None:
    raise ValueError(
        "public_data applies only with aggregator_factory.mask='top_k' (rand_k "
        'draws its mask from a public seed)'
    )

  client_work = _client_work(
      model_fn,
      client_optimizer_fn,
      metrics_aggregator,
      client_work_wrapper,
      local_epochs,
  )
  update_type = client_work.next.type_signature.result.result.member.update
  aggregator = aggregator_factory.create(update_type)
  distributor = tff.learning.templates.build_broadcast_process(weights_type)
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      server_optimizer_fn, weights_type
  )
  dimension = sum(
      int(np.prod(t.shape)) for t in tff.structure.flatten(update_type)
  )
  k = smp_mechanisms.num_kept(dimension, aggregator_factory.compression)
  data_type = tff.SequenceType(element_type)
  top_k_mask = (
      _top_k_mask_computations(
          model_fn,
          client_optimizer_fn,
          public_runs,
          local_epochs,
          k,
          metric_finalizers,
          weights_type,
          client_work.initialize.type_signature.result.member,
          aggregator.initialize.type_signature.result.member,
      )
      if top_k
      else None
  )

  if client_work_wrapper is None:
    client_data_type = tff.FederatedType(data_type, tff.CLIENTS)
  else:
    client_data_type = client_work.next.type_signature.parameter[2]
  init_fn, next_fn = _round_computations(
      model_fn,
      _Components(distributor, client_work, aggregator, finalizer),
      data_type,
      client_data_type,
      local_epochs,
      top_k_mask,
      k,
  )
  get_model_weights, set_model_weights, get_hparams, set_hparams = (
      _state_accessors(
          init_fn.type_signature.result.member, client_work, finalizer
      )
  )
  return tff.learning.templates.LearningProcess(
      init_fn,
      next_fn,
      get_model_weights,
      set_model_weights,
      get_hparams_fn=get_hparams,
      set_hparams_fn=set_hparams,
  )


def _round_computations(
    model_fn,
    components,
    data_type,
    client_data_type,
    local_epochs,
    top_k_mask,
    k,
):
  """(init_fn, next_fn) of the process: one Fed-SMP round.

  The round, around the `SparsifiedSecureSumFactory`'s aggregator:

  1. Server, mask='top_k' only: from the global model theta^t, the server trains
     a copy on its public data D_pub with the clients' optimizer, optimizer
     hyperparameters and local period, getting theta_pub, and puts the k largest
     |theta_pub - theta^t| coordinates (global over the flattened trainable
     weights, `tff_priv.mechanisms.smp.top_k_mask_from_public_update`;
     k = `tff_priv.mechanisms.smp.num_kept(d, compression)` as the factory
     computes it) into the aggregator state as the round's mask. The mask is a
     function of theta^t (already public) and D_pub only: it releases nothing
     about the clients.
     mask='rand_k': the aggregator draws the round's mask from its public seed;
     nothing happens here.
  2. Broadcast theta^t; each client trains from theta^t for `local_epochs`
     passes over its data
     (`tff.learning.templates.build_model_delta_client_work` with the client
     optimizer: the optimizer state, e.g. the momentum of the paper's momentum
     SGD, is initialised afresh every round).
  3. Aggregate with the factory: sparsify, clip to C, add N(0, sigma^2 C^2 / n)
     on the k kept values (n = the round's clients, counted securely), secure
     sum, divide by the fixed K.
  4. Server update with `server_optimizer_fn` (default SGD, learning rate 1).

  Sign convention. Fed-SMP's client update is Delta_i = theta_i - theta^t and
  its server step theta^{t+1} = theta^t + (1/K) sum_i (clip(m . Delta_i) +
  noise_i). TFF's client work returns u_i = theta^t - theta_i = -Delta_i, and
  the finalizer applies theta^{t+1} = theta^t - eta_s * aggregate. Masking, the
  d/k scaling and L2 clipping commute with negation and the Gaussian noise is
  symmetric, so with SGD at eta_s = 1 the new model has exactly the paper's
  distribution: theta^t + (1/K) sum_i (clip(m . Delta_i) + noise_i).

  `top_k_mask`: `_top_k_mask_computations`' pair, or None for rand_k (the
  aggregator draws its mask itself).
  """
  distributor, client_work, aggregator, finalizer = components

  @tff.tensorflow.computation
  def initial_weights():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  @tff.tensorflow.computation(data_type)
  def repeat_local_period(dataset):
    return dataset.repeat(local_epochs)

  @tff.federated_computation
  def init_fn():
    return tff.federated_zip(
        tff.learning.templates.LearningAlgorithmState(
            global_model_weights=tff.federated_eval(
                initial_weights, tff.SERVER
            ),
            distributor=distributor.initialize(),
            client_work=client_work.initialize(),
            aggregator=aggregator.initialize(),
            finalizer=finalizer.initialize(),
        )
    )

  next_fn = _next_computation(
      components,
      init_fn.type_signature.result,
      client_data_type,
      repeat_local_period,
      local_epochs,
      top_k_mask,
      k,
  )
  return init_fn, next_fn


def _next_computation(
    components,
    state_type,
    client_data_type,
    repeat_local_period,
    local_epochs,
    top_k_mask,
    k,
):
  """The process's `next_fn` (`_round_computations`' round) on `state_type`."""
  distributor, client_work, aggregator, finalizer = components

  @tff.federated_computation(state_type, client_data_type)
  def next_fn(state, client_data):
    if top_k_mask is not None:
      public_mask, set_round_mask = top_k_mask
      indices, mask_measurements = tff.federated_map(
          public_mask, (state.global_model_weights, state.client_work)
      )
      aggregator_state = tff.federated_map(
          set_round_mask, (state.aggregator, indices)
      )
    else:
      mask_measurements = tff.federated_value(
          collections.OrderedDict(mask_size=np.int32(k)), tff.SERVER
      )
      aggregator_state = state.aggregator
    if local_epochs > 1:
      client_data = tff.federated_map(repeat_local_period, client_data)
    distributor_output = distributor.next(
        state.distributor, state.global_model_weights
    )
    client_work_output = client_work.next(
        state.client_work, distributor_output.result, client_data
    )
    aggregator_output = aggregator.next(
        aggregator_state, client_work_output.result.update
    )
    finalizer_output = finalizer.next(
        state.finalizer, state.global_model_weights, aggregator_output.result
    )
    new_state = tff.federated_zip(
        tff.learning.templates.LearningAlgorithmState(
            global_model_weights=finalizer_output.result,
            distributor=distributor_output.state,
            client_work=client_work_output.state,
            aggregator=aggregator_output.state,
            finalizer=finalizer_output.state,
        )
    )
    metrics = tff.federated_zip(
        collections.OrderedDict(
            distributor=distributor_output.measurements,
            client_work=client_work_output.measurements,
            aggregator=aggregator_output.measurements,
            finalizer=finalizer_output.measurements,
            mask=mask_measurements,
        )
    )
    return tff.learning.templates.LearningProcessOutput(new_state, metrics)

  return next_fn


def _model_types(model_fn):
  """(weights type, element type, metric finalizers) of a model of `model_fn`.

  Built in a graph, as TFF does: no variables leak into the caller's context.
  """
  with tf.Graph().as_default():
    model = model_fn()
    return (
        tff.learning.models.weights_type_from_model(model),
        tff.types.tensorflow_to_type(model.input_spec),
        model.metric_finalizers(),
    )


def _checked_arguments(
    model_fn,
    client_optimizer_fn,
    server_optimizer_fn,
    aggregator_factory,
    local_epochs,
    metrics_aggregator,
):
  """(server optimizer, local epochs), after `build_fedsmp_process`'s checks."""
  if not callable(model_fn):
    raise TypeError(f'model_fn must be callable, got {type(model_fn).__name__}')
  _check_optimizer('client_optimizer_fn', client_optimizer_fn)
  if server_optimizer_fn is None:
    server_optimizer_fn = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  _check_optimizer('server_optimizer_fn', server_optimizer_fn)
  if not isinstance(
      aggregator_factory, smp_aggregators.SparsifiedSecureSumFactory
  ):
    raise TypeError(
        'aggregator_factory must be a SparsifiedSecureSumFactory, got '
        f'{type(aggregator_factory).__name__}'
    )
  local_epochs = validation.int_at_least('local_epochs', local_epochs, 1)
  if metrics_aggregator is not None and not callable(metrics_aggregator):
    raise TypeError(
        'metrics_aggregator must be callable, got '
        f'{type(metrics_aggregator).__name__}'
    )
  return server_optimizer_fn, local_epochs


def _client_work(
    model_fn,
    client_optimizer_fn,
    metrics_aggregator,
    client_work_wrapper,
    local_epochs,
) -> tff.learning.templates.ClientWorkProcess:
  """TFF's model-delta client work, wrapped by `client_work_wrapper` if any."""
  client_work = tff.learning.templates.build_model_delta_client_work(
      model_fn,
      client_optimizer_fn,
      client_weighting=_WEIGHTING,
      metrics_aggregator=metrics_aggregator,
      loop_implementation=_LOOP,
  )
  if client_work_wrapper is None:
    return client_work
  if local_epochs > 1:
    raise ValueError(
        'client_work_wrapper applies only with local_epochs=1 (repeat the '
        "clients' datasets instead)"
    )
  return client_work_wrapper(client_work)


def _top_k_mask_computations(
    model_fn,
    client_optimizer_fn,
    public_runs,
    local_epochs,
    k,
    metric_finalizers,
    weights_type,
    hparams_type,
    aggregator_state_type,
):
  """(public_mask, set_round_mask): the server's top_k mask of a round.

  `public_mask(global weights, client-work hyperparameters)` trains on the
  public data as the clients train and returns the k largest coordinates of
  the public update and the `mask` measurements; `set_round_mask` puts them
  into the aggregator state.

  Public training. The public update is computed by the same TF function TFF's
  model-delta client work runs on every client (same optimizer, same
  hyperparameters from the client-work state, same loop), on the public batches
  repeated `local_epochs` times; theta_pub = theta^t - u_pub. `public_data` is a
  `tf.data.Dataset` batched like the clients' data (elements matching the
  model's `input_spec`); it is read once when the process is built and embedded
  in the server computation as constants (Fed-SMP's public set is small and
  public), so every round trains on the same batches in the same order.
  """

  @tff.tensorflow.computation(weights_type, hparams_type)
  def public_mask(global_weights, hparams):
    build_update = tff_model_delta.build_model_delta_update_with_tff_optimizer
    client_update = build_update(
        model_fn, weighting=_WEIGHTING, loop_implementation=_LOOP
    )
    dataset = _embedded_dataset(public_runs).repeat(local_epochs)
    result, unfinalized = client_update(
        client_optimizer_fn, global_weights, dataset, hparams
    )
    theta = list(global_weights.trainable)
    # u_pub = theta - theta_pub, as TFF's client update returns it.
    theta_pub = [t - u for t, u in zip(theta, result.update)]
    indices = smp_mechanisms.top_k_mask_from_public_update(theta_pub, theta, k)
    public_train = collections.OrderedDict(
        (name, finalizer_fn(unfinalized[name]))
        for name, finalizer_fn in metric_finalizers.items()
    )
    return indices, collections.OrderedDict(
        mask_size=tf.size(indices, out_type=tf.int32),
        public_train=public_train,
    )

  @tff.tensorflow.computation(
      aggregator_state_type, tff.TensorType(np.int32, [k])
  )
  def set_round_mask(state, indices):
    # What `tff_priv.aggregators.smp._with_top_k_mask` does outside TFF; the
    # aggregator's `next` checks that the indices are sorted, distinct and in
    # [0, d).
    return state._replace(mask_indices=indices, mask_is_fresh=tf.constant(True))

  return public_mask, set_round_mask


def _state_accessors(state_type, client_work, finalizer):
  """The process's get/set model weights and get/set hparams computations."""

  @tff.tensorflow.computation(state_type)
  def get_model_weights(state):
    return state.global_model_weights

  @tff.tensorflow.computation(state_type, state_type.global_model_weights)
  def set_model_weights(state, weights):
    return tff.learning.templates.LearningAlgorithmState(
        global_model_weights=weights,
        distributor=state.distributor,
        client_work=state.client_work,
        aggregator=state.aggregator,
        finalizer=state.finalizer,
    )

  @tff.tensorflow.computation(state_type)
  def get_hparams(state):
    return collections.OrderedDict(
        client_work=client_work.get_hparams(state.client_work),
        finalizer=finalizer.get_hparams(state.finalizer),
    )

  @tff.tensorflow.computation(state_type, get_hparams.type_signature.result)
  def set_hparams(state, hparams):
    # The public training reads the client-work hyperparameters from the
    # state, so it follows any change made here.
    return tff.learning.templates.LearningAlgorithmState(
        global_model_weights=state.global_model_weights,
        distributor=state.distributor,
        client_work=client_work.set_hparams(
            state.client_work, hparams['client_work']
        ),
        aggregator=state.aggregator,
        finalizer=finalizer.set_hparams(state.finalizer, hparams['finalizer']),
    )

  return get_model_weights, set_model_weights, get_hparams, set_hparams


def _check_optimizer(name: str, optimizer: Any) -> None:
  if not isinstance(optimizer, tff.learning.optimizers.Optimizer):
    raise TypeError(
        f'{name} must be a tff.learning.optimizers.Optimizer, got '
        f'{type(optimizer).__name__}'
    )


def _materialize_public_data(
    public_data: Any, element_type: tff.Type
) -> list[Any]:
  """The public batches as runs of equal-shaped batches, stacked in numpy.

  Args:
    public_data: the `public_data` argument of `build_fedsmp_process`.
    element_type: the TFF type of the model's input spec.

  Returns:
    A non-empty list of structures of numpy arrays; run r holds n_r
    consecutive batches of identical shapes, stacked along a new axis 0, so
    that `_embedded_dataset` rebuilds the batches in their order.

  Raises:
    TypeError, ValueError: as documented by `build_fedsmp_process`.
  """
  if public_data is None:
    raise ValueError(
        "public_data is required with aggregator_factory.mask='top_k' (the "
        'server trains on it to choose the mask)'
    )
  if not isinstance(public_data, tf.data.Dataset):
    raise TypeError(
        'public_data must be a tf.data.Dataset, got '
        f'{type(public_data).__name__}'
    )
  public_type = tff.types.tensorflow_to_type(public_data.element_spec)
  if not element_type.is_assignable_from(public_type):
    raise TypeError(
        f'public_data elements must match the model input spec {element_type} '
        f"(batched as the clients' data), got {public_type}"
    )
  if public_data.cardinality() == tf.data.INFINITE_CARDINALITY:
    raise ValueError('public_data must be finite, got an infinite dataset')
  runs, shapes = [], None
  for batch in public_data.as_numpy_iterator():
    batch_shapes = [np.shape(t) for t in tf.nest.flatten(batch)]
    if batch_shapes != shapes:
      runs.append([])
      shapes = batch_shapes
    runs[-1].append(batch)
  if not runs or all(np.shape(tf.nest.flatten(r[0])[0])[0] == 0 for r in runs):
    raise ValueError('public_data must contain at least one example')
  return [tf.nest.map_structure(lambda *b: np.stack(b), *run) for run in runs]


def _embedded_dataset(runs: list[Any]) -> tf.data.Dataset:
  """The public batches as a dataset of constants, in their original order."""
  dataset = None
  for run in runs:
    part = tf.data.Dataset.from_tensor_slices(run)
    dataset = part if dataset is None else dataset.concatenate(part)
  return dataset
