"""UDP's local step (Wei et al.) as a TFF `ClientWorkProcess`.

`build_udp_client_work` builds the client work of UDP (Algorithm 1): each
client clips the gradient of every one of its examples at the broadcast model
w^t to an L2 norm C and takes ONE full-batch step with their mean; the update
(w^t - w_i, weight |D_i|) then goes to an aggregator that adds the noise on the
client, `tff_priv.aggregators.GaussianUDPFactory`. The step's L2 sensitivity
under replace-one-example adjacency is `udp_sensitivity` = 2 eta C / |D_i|,
the value that factory takes.
"""

import collections
from typing import Callable, Optional

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.learning import ghost_clipping

PerExampleLoss = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
CLIPPING = ('auto', 'ghost', 'per_example')


def sparse_categorical_crossentropy(
    from_logits: bool = False,
) -> PerExampleLoss:
  """Per-example sparse categorical cross-entropy, for classifier models."""

  def loss(y_true, y_pred):
    return tf.keras.losses.sparse_categorical_crossentropy(
        y_true, y_pred, from_logits=from_logits
    )

  return loss


def udp_sensitivity(learning_rate: float, clip_norm: float, num_examples: int):
  """Delta = 2 eta C / |D_i| (eq. 13): one clipped full-batch step.

  Under replace-one-example adjacency.
  """
  learning_rate = validation.positive('learning_rate', learning_rate)
  clip_norm = validation.positive('clip_norm', clip_norm)
  num_examples = validation.int_at_least('num_examples', num_examples, 1)
  return 2.0 * learning_rate * clip_norm / num_examples


def _unpack(batch):
  if isinstance(batch, collections.abc.Mapping):
    return batch['x'], batch['y']
  return batch[0], batch[1]


def _keras_model_of(model) -> Optional[tf.keras.Model]:
  """The Keras model a `tff.learning.models.from_keras_model` model wraps.

  TFF keeps it private (`_keras_model`); it is used only if its variables are
  exactly the VariableModel's, so the Keras model computes what the
  VariableModel does. None otherwise.
  """
  keras_model = getattr(model, '_keras_model', None)
  if not isinstance(keras_model, tf.keras.Model):
    return None
  refs = lambda variables: [v.ref() for v in variables]
  same = refs(keras_model.trainable_variables) == refs(
      model.trainable_variables
  ) and refs(keras_model.non_trainable_variables) == refs(
      model.non_trainable_variables
  )
  return keras_model if same else None


def _ghost_blockers(model) -> list[str]:
  """What keeps `model` off the ghost-norm path (empty: nothing)."""
  keras_model = _keras_model_of(model)
  if keras_model is None:
    return [
        f'{type(model).__name__} (not a tff.learning.models.'
        'from_keras_model model)'
    ]
  return ghost_clipping.unsupported_layers(keras_model)


def clipped_per_example_grads(model, x, y, per_example_loss, clip_norm):
  """Per-example gradients at the model's weights, each clipped to L2 norm C.

  Vectorised over the batch with `tf.vectorized_map`. An example whose
  gradient is not finite (NaN or inf anywhere, e.g. a NaN feature) contributes
  a zero gradient and a zero loss: a zero lies in the clip ball, so replacing
  one example still moves the sum of clipped gradients by at most 2C. The
  reference that `ghost_clipping.clipped_grad_sum` is tested against.

  Returns:
    (list of [batch, *variable.shape] clipped gradients, [batch] losses, each
    finite).
  """
  variables = model.trainable_variables

  def one(example):
    ex_x, ex_y = example
    with tf.GradientTape() as tape:
      pred = model.predict_on_batch(
          tf.nest.map_structure(lambda t: t[tf.newaxis], ex_x), training=True
      )
      loss = tf.reduce_sum(per_example_loss(ex_y[tf.newaxis], pred))
    grads = tape.gradient(loss, variables)
    grads = [
        tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
        for g, v in zip(grads, variables)
    ]
    norm = tf.linalg.global_norm(grads)
    finite = tf.math.is_finite(norm)  # False if any coordinate is NaN or inf.
    scale = ghost_clipping.clip_scale(norm, clip_norm)
    # tf.where, not a product: 0 * NaN is NaN.
    grads = [tf.where(finite, g * scale, tf.zeros_like(g)) for g in grads]
    loss = tf.where(finite & tf.math.is_finite(loss), loss, tf.zeros_like(loss))
    return grads, loss

  return tf.vectorized_map(one, (x, y))


def _clipping_and_types(model_fn, clipping):
  """(whether ghost clipping applies, the data type, the weights type).

  Raises ValueError for clipping='ghost' on a model it does not cover; logs
  the layers that force 'auto' to per-example gradients.
  """
  with tf.Graph().as_default():
    whimsy_model = model_fn()
    blockers = (
        [] if clipping == 'per_example' else _ghost_blockers(whimsy_model)
    )
  if clipping == 'ghost' and blockers:
    raise ValueError(
        "clipping='ghost' needs a from_keras_model model whose trainable "
        f'layers are all registered; not: {", ".join(blockers)}'
    )
  if clipping == 'auto' and blockers:
    logging.warning(
        'UDP client work: per-example gradients (tf.vectorized_map) instead '
        'of ghost norms, forced by: %s',
        ', '.join(blockers),
    )
  element_type = tff.types.tensorflow_to_type(whimsy_model.input_spec)
  return (
      clipping != 'per_example' and not blockers,
      tff.SequenceType(element_type),
      tff.learning.models.weights_type_from_model(whimsy_model),
  )


def _client_update_fn(
    use_ghost, per_example_loss, learning_rate, clip_norm, local_steps
):
  """A client's round: (ClientResult, its loss sum, its example count).

  `local_steps` full-batch steps of clipped per-example gradients from the
  weights the server sent (`build_udp_client_work`); a non-finite update is
  sent as zeros. The full-batch gradient is accumulated over the client's
  batches at the fixed weights w^t, so batching does not change the step.
  """
  registry = ghost_clipping.layer_registry() if use_ghost else None

  def client_update(model, initial_weights, dataset):
    weights = tff.learning.models.ModelWeights.from_model(model)
    tf.nest.map_structure(lambda v, t: v.assign(t), weights, initial_weights)
    variables = model.trainable_variables
    lr = tf.constant(learning_rate, tf.float32)

    def full_batch_step():
      def reduce_batch(acc, batch):
        grad_sum, count, loss_sum = acc
        x, y = _unpack(batch)
        if use_ghost:
          grads, losses = ghost_clipping.clipped_grad_sum(
              _keras_model_of(model),
              x,
              y,
              per_example_loss,
              clip_norm,
              registry,
          )
        else:
          grads, losses = clipped_per_example_grads(
              model, x, y, per_example_loss, clip_norm
          )
          grads = [tf.reduce_sum(g, axis=0) for g in grads]
        grad_sum = tuple(s + g for s, g in zip(grad_sum, grads))
        count += tf.shape(losses, out_type=tf.int64)[0]
        return grad_sum, count, loss_sum + tf.reduce_sum(losses)

      zeros = tuple(tf.zeros_like(v) for v in variables)
      grad_sum, count, loss_sum = dataset.reduce(
          (zeros, tf.constant(0, tf.int64), tf.constant(0.0, tf.float32)),
          reduce_batch,
      )
      n = tf.cast(count, tf.float32)
      for v, g in zip(variables, grad_sum):
        v.assign_sub(tf.math.divide_no_nan(lr, n) * g)
      return count, loss_sum

    count, loss_sum = full_batch_step()  # Loss is measured at w^t.
    for _ in range(local_steps - 1):
      full_batch_step()

    update = tf.nest.map_structure(
        tf.subtract, initial_weights.trainable, weights.trainable
    )
    finite = tf.reduce_all(
        [tf.reduce_all(tf.math.is_finite(u)) for u in tf.nest.flatten(update)]
    )
    # A branch, not a select of every coordinate (clipping.clip_l2 too).
    update = tf.cond(
        finite,
        lambda: update,
        lambda: tf.nest.map_structure(tf.zeros_like, update),
    )
    loss_sum = tf.where(tf.math.is_finite(loss_sum), loss_sum, 0.0)
    n = tf.cast(count, tf.float32)
    return (
        tff.learning.templates.ClientResult(update=update, update_weight=n),
        loss_sum,
        n,
    )

  return client_update


def build_udp_client_work(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    learning_rate: float,
    clip_norm: float,
    per_example_loss: PerExampleLoss,
    local_steps: int = 1,
    report_train_metrics: bool = False,
    clipping: str = 'auto',
) -> tff.learning.templates.ClientWorkProcess:
  """UDP client work: clipped per-example gradients, full-batch step(s).

  Client i at round t with its dataset D_i (Wei et al., Algorithm 1):

    g_m = grad loss(w^t; example m),                     per example m in D_i
    g~_m = g_m / max(1, ||g_m||_2 / C),                  clipped to L2 norm C
    w_i = w^t - (eta / |D_i|) sum_m g~_m,                ONE full-batch step.

  Replacing one example of D_i changes sum_m g~_m by at most 2C, so the update
  has L2 sensitivity Delta = 2 eta C / |D_i| (eq. (13), `udp_sensitivity`).
  That bound holds for one full-batch step only: with `local_steps > 1` the
  trajectories of the two datasets diverge and 2 eta C / |D_i| bounds
  nothing; the sensitivity given to the aggregator is then the caller's own.

  The clipped sum is computed one of two ways (`clipping`), equal to float
  tolerance:

  * 'per_example', the reference: per-example gradients vectorised with
    `tf.vectorized_map` (as tensorflow_privacy's vectorized optimizers), each
    clipped, then summed; memory and time grow with batch x d.
  * 'ghost': one forward and one backward pass; per-example gradient
    norms from layer inputs and output gradients (tensorflow_privacy's fast
    gradient clipping, with `ghost_clipping.layer_registry`: Dense,
    Embedding, Conv2D), and the clipped sum from the same inputs and the
    output gradients scaled by min(1, C / norm)
    (`ghost_clipping.clipped_grad_sum`). Needs a model from
    `tff.learning.models.from_keras_model` whose trainable layers are all
    registered; otherwise a ValueError names the layers that are not.
  * 'auto' (default): 'ghost' where it applies, else 'per_example' with one
    logged warning naming the layers that forced it (e.g. LSTM, which has no
    registry function, Dropout, whose training-mode output is random, or a
    layer the forward pass calls twice).

  Non-finite inputs: an example whose gradient is not finite contributes a
  zero gradient (and a zero loss) but still counts in |D_i|, which keeps the
  sensitivity bound; as a backstop, a client whose update is still not finite
  sends a zero update (with its weight |D_i|). Neither is reported: a count
  would be an exact statistic of the clients' data.

  The update follows tff.learning's convention (FedAvg's client work):
  update = w^t - w_i (a server SGD step of learning rate 1 then applies the
  mean), update_weight = |D_i|. A client with no examples sends a zero update
  with weight 0. Noise is not added here:
  `tff_priv.aggregators.GaussianUDPFactory` adds it on the client, so any
  tff.learning aggregator composes with this.

  Args:
    model_fn: no-arg function returning a `tff.learning.models.VariableModel`
      built from scratch (e.g. from `tff.learning.models.from_keras_model`);
      `predict_on_batch` gives the predictions fed to `per_example_loss`.
    learning_rate: eta > 0.
    clip_norm: C > 0, the per-example gradient L2 clip.
    per_example_loss: (y_true, y_pred) -> per-example losses, shape [batch]
      (e.g. `sparse_categorical_crossentropy()`).
    local_steps: full-batch steps per round; 1 is the paper's, the only one
      `udp_sensitivity` bounds.
    report_train_metrics: also release the clients' exact training loss and
      example count (not private; off by default).
    clipping: 'auto', 'ghost' or 'per_example' (see above).

  Returns:
    A `tff.learning.templates.ClientWorkProcess`. Its measurements: `train`,
    empty by default: nothing about the clients leaves them but their update
    (and its weight |D_i|, which replace-one-example adjacency does not
    change). With `report_train_metrics=True`, `train/loss` (the clients' mean
    loss at w^t) and `train/num_examples`: exact statistics of the round's
    clients, released WITHOUT noise, which no DP event covers (the example
    count also tells who was sampled).

  Raises:
    ValueError: a bad argument, or clipping='ghost' for a model it does not
      cover.
  """
  learning_rate, clip_norm, local_steps = _checked_arguments(
      learning_rate,
      clip_norm,
      local_steps,
      per_example_loss,
      report_train_metrics,
  )
  validation.one_of('clipping', clipping, CLIPPING)
  use_ghost, data_type, weights_type = _clipping_and_types(model_fn, clipping)

  update_fn = _client_update_fn(
      use_ghost, per_example_loss, learning_rate, clip_norm, local_steps
  )
  return _client_work_process(
      model_fn, update_fn, weights_type, data_type, report_train_metrics
  )


def _checked_arguments(
    learning_rate,
    clip_norm,
    local_steps,
    per_example_loss,
    report_train_metrics,
):
  """(learning rate, clip norm, local steps), after their checks."""
  learning_rate = validation.positive('learning_rate', learning_rate)
  clip_norm = validation.positive('clip_norm', clip_norm)
  local_steps = validation.int_at_least('local_steps', local_steps, 1)
  if not callable(per_example_loss):
    raise TypeError('per_example_loss must be callable (y_true, y_pred)')
  if not isinstance(report_train_metrics, bool):
    raise TypeError(
        'report_train_metrics must be a bool, got ' f'{report_train_metrics!r}'
    )
  return learning_rate, clip_norm, local_steps


def _client_work_process(
    model_fn, update_fn, weights_type, data_type, report_train_metrics
):
  """The `ClientWorkProcess` running `update_fn` on each client."""

  @tff.tensorflow.computation(weights_type, data_type)
  def client_update(initial_weights, dataset):
    model = model_fn()
    # A tf.function, for automatic control dependencies between the weight
    # assignments and the steps (as TFF's own client updates).
    return tf.function(update_fn)(model, initial_weights, dataset)

  @tff.tensorflow.computation(np.float32, np.float32)
  def loss_summary(total_loss, total_examples):
    return collections.OrderedDict(
        loss=tf.math.divide_no_nan(total_loss, total_examples),
        num_examples=total_examples,
    )

  @tff.federated_computation()
  def init_fn():
    return tff.federated_value((), tff.SERVER)

  @tff.federated_computation(
      init_fn.type_signature.result,
      tff.FederatedType(weights_type, tff.CLIENTS),
      tff.FederatedType(data_type, tff.CLIENTS),
  )
  def next_fn(state, weights, client_data):
    result, loss_sum, num_examples = tff.federated_map(
        client_update, (weights, client_data)
    )
    if report_train_metrics:
      train = tff.federated_map(
          loss_summary,
          (tff.federated_sum(loss_sum), tff.federated_sum(num_examples)),
      )
    else:  # The clients' losses and counts never leave them.
      train = tff.federated_value(collections.OrderedDict(), tff.SERVER)
    measurements = tff.federated_zip(collections.OrderedDict(train=train))
    return tff.templates.MeasuredProcessOutput(state, result, measurements)

  return tff.learning.templates.ClientWorkProcess(init_fn, next_fn)
