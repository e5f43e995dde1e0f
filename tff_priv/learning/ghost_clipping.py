"""Per-example gradient clipping without per-example gradients ("ghost norms").

`clipped_grad_sum` returns the sum over a batch of per-example gradients, each
clipped to L2 norm C, in one forward and one backward pass: the per-example
norms by tensorflow_privacy's fast gradient clipping registry functions, the
clipped sum by each layer's weight gradient from its recorded input and
row-scaled output gradient ("book-keeping"), or, for a Conv2D whose norm
materialised its per-example kernel gradients, by their weighted sum.
Every trainable layer is called once per forward pass: a shared layer's
per-example norm is not the sum of its calls' norms, so a model that calls
one twice is refused (`unsupported_layers`). `layer_registry` extends
tensorflow_privacy's registry (Dense, Embedding) with Conv2D;
`unsupported_layers` names the layers of a Keras model it cannot handle.
"""

from typing import Callable, Optional

import numpy as np
import tensorflow as tf
from tensorflow_privacy.privacy.fast_gradient_clipping import gradient_clipping_utils
from tensorflow_privacy.privacy.fast_gradient_clipping import layer_registry as lr

# Layers whose training-mode output is random: the norms and the clipped sum
# must come from the gradients of the training-mode pass, and the registry's
# forward pass (`gradient_clipping_utils.model_forward_pass`) does not promise
# to run these layers in training mode.
_RANDOM_LAYERS = (
    tf.keras.layers.Dropout,  # Also SpatialDropout1D/2D/3D.
    tf.keras.layers.GaussianNoise,
    tf.keras.layers.GaussianDropout,
    tf.keras.layers.AlphaDropout,
)


def clip_scale(norms: tf.Tensor, clip_norm: float) -> tf.Tensor:
  """min(1, C / norm): the factor that clips a gradient of L2 norm `norm` to C."""
  return tf.minimum(1.0, clip_norm / tf.maximum(norms, 1e-30))


def _conv2d_patches(layer: tf.keras.layers.Conv2D, inputs: tf.Tensor):
  """[batch, positions, kh * kw * c_in]: the input patch of every output position."""
  kh, kw = layer.kernel_size
  sh, sw = layer.strides
  dh, dw = layer.dilation_rate
  patches = tf.image.extract_patches(
      inputs,
      sizes=[1, kh, kw, 1],
      strides=[1, sh, sw, 1],
      rates=[1, dh, dw, 1],
      padding=layer.padding.upper(),
  )
  return tf.reshape(patches, [tf.shape(patches)[0], -1, patches.shape[-1]])


def _same_padding(size: int, kernel: int, stride: int, dilation: int):
  """(before, after): TensorFlow's 'SAME' padding of one spatial axis."""
  out = -(-size // stride)
  total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
  return total // 2, total - total // 2


# The largest batch for which `_per_example_kernel_grads` takes the depthwise
# form. Timed alone on 2 CPU cores against input patches and a batched
# product, on materialised layer shapes of the McMahan CNN, small_vgg and
# udp_cifar_cnn: 1.1-2.5x faster at batch 10 (six shapes), 1.1-1.6x slower
# at batch 32 (three).
_DEPTHWISE_MAX_BATCH = 16


def _depthwise_args(layer: tf.keras.layers.Conv2D, inputs, grads):
  """(strides, dilations) of the depthwise form, or None where TF lacks it.

  None for unequal dilations of the two axes (TF's depthwise convolution
  strides both alike) or spatial sizes unknown when tracing.
  """
  (sh, sw), (dh, dw) = layer.strides, layer.dilation_rate
  if None in (inputs.shape[1], inputs.shape[2], grads.shape[1], grads.shape[2]):
    return None
  if (dh, dw) == (1, 1):
    return [1, 1, 1, 1], [sh, sw]
  if dh == dw:  # Keras: a dilated Conv2D has strides 1.
    return [1, dh, dw, 1], [1, 1]
  return None


def _depthwise_kernel_grads(layer, inputs, grads, strides, rates):
  """[batch, kh, kw, c_in, d] by one depthwise convolution (see below)."""
  (kh, kw), (sh, sw), (dh, dw) = (
      layer.kernel_size, layer.strides, layer.dilation_rate)
  if layer.padding == 'same':
    inputs = tf.pad(inputs, [
        [0, 0],
        _same_padding(inputs.shape[1], kh, sh, dh),
        _same_padding(inputs.shape[2], kw, sw, dw),
        [0, 0],
    ])
  by_channel = tf.nn.depthwise_conv2d(
      tf.transpose(inputs, [3, 1, 2, 0]),  # [c_in, H, W, batch]
      tf.transpose(grads, [1, 2, 0, 3]),  # [H', W', batch, d]
      strides=strides,
      padding='VALID',
      dilations=rates,
  )[:, :kh, :kw, :]  # [c_in, kh, kw, batch * d]
  c_in, d = inputs.shape[-1], grads.shape[-1]
  return tf.transpose(
      tf.reshape(by_channel, [c_in, kh, kw, -1, d]), [3, 1, 2, 0, 4]
  )


def _per_example_kernel_grads(layer: tf.keras.layers.Conv2D, inputs, grads):
  """[batch, kh, kw, c_in, d]: each example's kernel gradient.

  Example b's kernel gradient, K_b[i, j, c, o] = sum_{h, w}
  X_b[h s + i r, w s + j r, c] G_b[h, w, o] (X padded, s the stride, r the
  dilation), is A_b^T G_b, A_b the input patches, or equally a depthwise
  convolution of the inputs with the batch as channels, the channels as
  batch and the output gradients as filters (Rochette et al. 2019,
  "Efficient per-example gradient computations in convolutional neural
  networks"). Examples do not mix in either: output channel b d + o of the
  depthwise form reads input channel b and filter b only. The depthwise
  form is taken for batches of at most `_DEPTHWISE_MAX_BATCH` (by `tf.cond`
  when the batch is unknown when tracing) where TF has it
  (`_depthwise_args`), the patches otherwise.
  """
  kh, kw = layer.kernel_size
  c_in, d = inputs.shape[-1], grads.shape[-1]

  def from_patches():
    a = _conv2d_patches(layer, inputs)
    g = tf.reshape(grads, [tf.shape(grads)[0], -1, d])
    return tf.reshape(
        tf.einsum('btp,btd->bpd', a, g), [-1, kh, kw, c_in, d])

  args = _depthwise_args(layer, inputs, grads)
  if args is None:
    return from_patches()
  depthwise = lambda: _depthwise_kernel_grads(layer, inputs, grads, *args)
  batch = grads.shape[0]
  if batch is not None:
    return depthwise() if batch <= _DEPTHWISE_MAX_BATCH else from_patches()
  return tf.cond(
      tf.shape(grads)[0] <= _DEPTHWISE_MAX_BATCH, depthwise, from_patches)


def use_ghost_form(positions: Optional[int], patch_size: int, filters: int):
  """Whether a Conv2D kernel's per-example squared norm is cheaper as a ghost norm.

  The kernel gradient of one example is A^T G, A the [T, p] input patches
  and G the [T, d] output gradients (T output positions, p = kh kw c_in,
  d = filters). Its squared Frobenius norm is either

    ghost:        sum_{s,t} <a_s, a_t> <g_s, g_t>   (two T x T Gram matrices)
    materialised: ||A^T G||_F^2                     (the p x d gradient)

  and, as Li et al. 2022 (ghost clipping) and Bu et al. 2022 (mixed ghost
  clipping) do layer by layer, the ghost form is used when its per-example
  memory is the smaller: 2 T^2 < p d. T unknown when tracing: materialised.
  """
  return positions is not None and 2 * positions**2 < patch_size * filters


def conv2d_layer_computation(
    layer_instance: tf.keras.layers.Conv2D,
    input_args,
    input_kwargs,
    tape: tf.GradientTape,
    num_microbatches=None,
):
  """tensorflow_privacy registry function for `tf.keras.layers.Conv2D`.

  As tensorflow_privacy's Dense function: the layer's pre-activation output
  Z is watched, and the returned function maps dL/dZ ([batch, H', W', d]) to
  the per-example squared gradient norms of kernel and bias, the kernel's by
  `use_ghost_form`'s choice (materialised: `_per_example_kernel_grads`)
  and the bias's as ||sum_t g_t||^2. Supports
  channels_last inputs and groups=1 (see `unsupported_layers`).

  Args:
    layer_instance: a `tf.keras.layers.Conv2D`.
    input_args: the layer's positional inputs (one tensor).
    input_kwargs: must be empty.
    tape: the tape that records the forward pass.
    num_microbatches: must be None (no microbatches).

  Returns:
    (Z, the layer's output, the squared-norm function).
  """
  if input_kwargs:
    raise ValueError('Conv2D layer calls should not receive kwargs')
  if len(input_args) != 1:
    raise ValueError('Conv2D layers take exactly one input')
  if num_microbatches is not None:
    raise NotImplementedError('the Conv2D ghost norm has no microbatches')
  inputs = input_args[0]
  activation = layer_instance.activation
  layer_instance.activation = None
  base_vars = layer_instance(inputs)
  layer_instance.activation = activation
  tape.watch(base_vars)
  outputs = activation(base_vars) if activation else base_vars

  def sqr_norms_and_kernel_grads(grads):
    # (per-example squared norms, the per-example kernel gradients where the
    # materialised form computed them, else None).
    g = tf.reshape(grads, [tf.shape(grads)[0], -1, grads.shape[-1]])
    patch_size = int(np.prod(layer_instance.kernel_size)) * inputs.shape[-1]
    positions = grads.shape[1] * grads.shape[2] if None not in grads.shape[1:3] else None
    kernel_grads = None
    if use_ghost_form(positions, patch_size, g.shape[-1]):
      a = _conv2d_patches(layer_instance, inputs)
      sqr = tf.reduce_sum(
          tf.einsum('bsp,btp->bst', a, a) * tf.einsum('bsd,btd->bst', g, g),
          axis=[1, 2],
      )
    else:
      kernel_grads = _per_example_kernel_grads(layer_instance, inputs, grads)
      sqr = tf.reduce_sum(
          tf.square(tf.reshape(kernel_grads, [tf.shape(g)[0], -1])), axis=1)
    if layer_instance.use_bias:
      sqr += tf.reduce_sum(tf.square(tf.reduce_sum(g, axis=1)), axis=1)
    return sqr, kernel_grads

  def sqr_norm_fn(grads):
    return sqr_norms_and_kernel_grads(grads)[0]

  # For `clipped_grad_sum`, whose clipped kernel sum is then a weighted sum of
  # the materialised gradients instead of a filter gradient of its own.
  sqr_norm_fn.with_kernel_grads = sqr_norms_and_kernel_grads
  return base_vars, outputs, sqr_norm_fn


def _conv2d_supported(layer: tf.keras.layers.Conv2D) -> bool:
  return layer.data_format == 'channels_last' and layer.groups == 1


def _scaled_rows(weights, t):
  """Each row m of `t` times weights[m]; rows of weight 0 are exactly 0.

  tf.where, not a product alone: a row of weight 0 may hold NaN or inf.
  """
  shape = tf.concat(
      [tf.shape(weights), tf.ones([tf.rank(t) - 1], tf.int32)], axis=0
  )
  w = tf.reshape(weights, shape)
  return tf.where(w > 0, t * w, tf.zeros_like(t))


def _dense_grads(layer: tf.keras.layers.Dense, input_args):
  """dL/dZ -> weighted kernel and bias gradients of `Z = X W + b`."""
  inputs = input_args[0]

  def grads(base_grads, weights, kept=None):
    del kept  # tensorflow_privacy's Dense norm keeps no gradient.
    x = tf.reshape(_scaled_rows(tf.cast(weights > 0, inputs.dtype), inputs),
                   [-1, inputs.shape[-1]])
    g = tf.reshape(_scaled_rows(weights, base_grads), [-1, base_grads.shape[-1]])
    out = [(layer.kernel, tf.matmul(x, g, transpose_a=True))]
    if layer.use_bias:
      out.append((layer.bias, tf.reduce_sum(g, axis=0)))
    return out

  return grads


def _conv2d_grads(layer: tf.keras.layers.Conv2D, input_args):
  """dL/dZ -> weighted kernel and bias gradients of `Z = conv(X, K) + b`.

  `kept`: the per-example kernel gradients of these dL/dZ ([batch, kh, kw,
  c_in, d]) if the norm materialised them
  (`conv2d_layer_computation`); their weighted sum is then the kernel's, one
  contraction in place of a filter gradient (about a convolution's work).
  """
  inputs = input_args[0]

  def grads(base_grads, weights, kept=None):
    g = _scaled_rows(weights, base_grads)

    def x():
      # The inputs, rows of weight 0 zeroed: only the two forms below read
      # them.
      return _scaled_rows(tf.cast(weights > 0, inputs.dtype), inputs)

    if kept is not None:
      kernel = tf.reshape(
          tf.reduce_sum(_scaled_rows(weights, kept), axis=0),
          tf.shape(layer.kernel),
      )
    elif tuple(layer.dilation_rate) == (1, 1):
      kernel = tf.compat.v1.nn.conv2d_backprop_filter(
          x(),
          tf.shape(layer.kernel),
          g,
          strides=[1, *layer.strides, 1],
          padding=layer.padding.upper(),
      )
    else:
      # TF's CPU Conv2DBackpropFilter without oneDNN (which TF enables only
      # on CPUs with AVX-512 VNNI and the like: not on most AMD machines)
      # refuses dilations > 1: the kernel gradient as sum_t a_t g_t^T over
      # the input patches instead (the same sum, more memory).
      a = _conv2d_patches(layer, x())
      flat_g = tf.reshape(g, [tf.shape(g)[0], -1, g.shape[-1]])
      kernel = tf.reshape(
          tf.einsum('bpk,bpo->ko', a, flat_g), tf.shape(layer.kernel)
      )
    out = [(layer.kernel, kernel)]
    if layer.use_bias:
      out.append((layer.bias, tf.reduce_sum(g, axis=[0, 1, 2])))
    return out

  return grads


def _embedding_grads(layer: tf.keras.layers.Embedding, input_args):
  """dL/dtable (IndexedSlices, one row per lookup) -> weighted table gradient."""
  ids = input_args[0]

  def grads(base_grads, weights, kept=None):
    del kept  # tensorflow_privacy's Embedding norm keeps no gradient.
    lookups = tf.size(ids) // tf.shape(ids)[0]
    row_weights = tf.repeat(weights, lookups)
    values = _scaled_rows(row_weights, base_grads.values)
    table = tf.math.unsorted_segment_sum(
        values, base_grads.indices, tf.shape(layer.embeddings)[0]
    )
    return [(layer.embeddings, table)]

  return grads


# Per-layer weighted gradients from dL/dZ (book-keeping), by layer class.
_WEIGHTED_GRADS = {
    tf.keras.layers.Dense: _dense_grads,
    tf.keras.layers.Conv2D: _conv2d_grads,
    tf.keras.layers.Embedding: _embedding_grads,
}

# Layer class -> (registry function, which instances it supports).
_EXTRA_LAYERS = {
    tf.keras.layers.Conv2D: (conv2d_layer_computation, _conv2d_supported),
}


def layer_registry() -> lr.LayerRegistry:
  """tensorflow_privacy's default registry (Dense, Embedding) plus Conv2D."""
  registry = lr.make_default_layer_registry()
  for layer_class, (fn, _) in _EXTRA_LAYERS.items():
    registry.insert(layer_class, fn)
  return registry


def _trainable_layer_calls(keras_model: tf.keras.Model, calls: dict) -> dict:
  """id(layer) -> how often one forward pass calls it, nested models included.

  Walks the nodes `gradient_clipping_utils.model_forward_pass` runs (the
  model's protected `_nodes_by_depth`, as tensorflow_privacy does).
  """
  for nodes in keras_model._nodes_by_depth.values():  # pylint: disable=protected-access
    for node in nodes:
      if node.is_input:
        continue
      if gradient_clipping_utils.has_internal_compute_graph(node.layer):
        _trainable_layer_calls(node.layer, calls)
      elif node.layer.trainable_weights:
        calls[id(node.layer)] = calls.get(id(node.layer), 0) + 1
  return calls


def unsupported_layers(
    keras_model: tf.keras.Model, registry: Optional[lr.LayerRegistry] = None
) -> list[str]:
  """Names of the layers that keep `keras_model` off the ghost-norm path.

  A layer blocks it if it has trainable weights and no registry function
  (or one that does not support its configuration, e.g. a grouped Conv2D),
  if its training-mode output is random (dropout, Gaussian noise), or if a
  forward pass calls it more than once (shared weights: the example's
  gradient is the sum of the calls' terms, whose norm the registry's
  per-call norms do not give). A model that is not a functional/Sequential
  Keras graph blocks it as a whole.

  Args:
    keras_model: the model.
    registry: default `layer_registry()`.

  Returns:
    'name (ClassName)' of each blocking layer, in model order; empty if the
    ghost path applies.
  """
  registry = registry or layer_registry()
  if not gradient_clipping_utils.has_internal_compute_graph(keras_model):
    return [f'{keras_model.name} ({type(keras_model).__name__}, not a '
            'functional Keras model)']
  return _unsupported(keras_model, registry, _trainable_layer_calls(
      keras_model, {}))


def _registered(layer, registry) -> bool:
  """Whether `registry` and this module clip `layer` in its configuration."""
  if not registry.is_elem(layer) or layer.__class__ not in _WEIGHTED_GRADS:
    return False
  extra = _EXTRA_LAYERS.get(type(layer))
  return extra is None or extra[1](layer)


def _unsupported(keras_model, registry, calls) -> list[str]:
  blocking = []
  for layer in keras_model.layers:
    if gradient_clipping_utils.has_internal_compute_graph(layer):
      blocking += _unsupported(layer, registry, calls)
      continue
    supported = True
    if isinstance(layer, _RANDOM_LAYERS):
      supported = False
    elif calls.get(id(layer), 0) > 1:
      blocking.append(f'{layer.name} ({type(layer).__name__}, called '
                      f'{calls[id(layer)]} times)')
      continue
    elif layer.trainable_weights:
      supported = _registered(layer, registry)
    if not supported:
      blocking.append(f'{layer.name} ({type(layer).__name__})')
  return blocking


def batch_losses(per_example_loss, y_true, y_pred) -> tf.Tensor:
  """[batch] losses: `per_example_loss` summed over any axes after the first."""
  losses = per_example_loss(y_true, y_pred)
  return tf.reduce_sum(tf.reshape(losses, [tf.shape(losses)[0], -1]), axis=1)


def clipped_grad_sum(
    keras_model: tf.keras.Model,
    x,
    y: tf.Tensor,
    per_example_loss: Callable[[tf.Tensor, tf.Tensor], tf.Tensor],
    clip_norm: float,
    registry: Optional[lr.LayerRegistry] = None,
):
  """Sum of the batch's per-example gradients, each clipped to L2 norm C.

  One forward pass records, for every trainable layer, its input X and its
  pre-activation output Z (tensorflow_privacy's registry functions); one
  backward pass gives G = dL/dZ, the per-example rows of the summed loss's
  gradient. From them, without materialising a per-example gradient except
  where a Conv2D norm is cheaper so (`use_ghost_form`):

    n_m = ||g_m||             by the registry's squared-norm functions
                              (tensorflow_privacy's fast gradient clipping),
    sum_m min(1, C / n_m) g_m by each layer's weight gradient computed from
                              X and the rows of G scaled by min(1, C / n_m)
                              (Dense: X^T G, Conv2D: the filter gradient, or
                              the sum of the per-example kernel gradients its
                              norm materialised, each scaled by
                              min(1, C / n_m), Embedding: a segment sum;
                              bias: sum of G).

  This is the "book-keeping" form of ghost clipping (Bu, Wang, Zha,
  Karypis, "Differentially Private Optimization on Large Model at Small
  Cost", ICML 2023): the clipped sum costs one forward and one backward
  pass, where tensorflow_privacy's `compute_clipped_gradients_and_outputs`
  runs a second forward and backward pass of the weighted loss. It is
  written here because tensorflow_privacy returns the norms only, not the
  intermediates the weighted gradients are computed from; the forward pass
  is its `model_forward_pass`, the norms its registry functions.

  An example whose norm or loss is not finite (NaN or inf in its input or
  gradient) gets weight 0 and its rows of X and G (and of the kept
  per-example kernel gradients) are replaced by zeros, so,
  as in the per-example path, it contributes a zero gradient and a zero
  loss. Every trainable layer must be registered and called once
  (`unsupported_layers` is empty); an unregistered layer, one in a
  configuration it does not support (a grouped or channels_first Conv2D) or
  one called twice raises.

  Args:
    keras_model: a functional/Sequential Keras model.
    x: the batch's inputs.
    y: the batch's labels.
    per_example_loss: (y_true, y_pred) -> losses with the batch first; axes
      after the first are summed (`batch_losses`).
    clip_norm: C > 0.
    registry: default `layer_registry()`.

  Returns:
    (list of summed clipped gradients, one per trainable variable of
    `keras_model`, [batch] losses, each finite).
  """
  registry = registry or layer_registry()
  tape = tf.GradientTape(persistent=True, watch_accessed_variables=False)
  recorded = set()

  def record(layer, args, kwargs):
    if not layer.trainable_variables:
      return layer(*args, **kwargs), None
    if not _registered(layer, registry):
      raise NotImplementedError(
          f'{layer.name} ({type(layer).__name__}) has no ghost-norm clipping'
          ' in this configuration'
      )
    if id(layer) in recorded:
      raise NotImplementedError(
          f'{layer.name} ({type(layer).__name__}) is called more than once '
          'in a forward pass: no ghost-norm clipping for shared layers'
      )
    recorded.add(id(layer))
    z, outputs, sqr_norm_fn = registry.lookup(layer)(
        layer, args, kwargs, tape, None
    )
    return outputs, (z, sqr_norm_fn, _WEIGHTED_GRADS[layer.__class__](layer, args))

  with tape:
    outputs, records = gradient_clipping_utils.model_forward_pass(
        keras_model, x, generator_fn=record
    )
    losses = batch_losses(per_example_loss, y, outputs)
    summed = tf.reduce_sum(losses)
  records = [r for r in records if r is not None]
  base_grads = tape.gradient(
      summed,
      [z for z, _, _ in records],
      unconnected_gradients=tf.UnconnectedGradients.ZERO,
  )
  sqr_norms, kept = [], []
  for g, (_, f, _) in zip(base_grads, records):
    with_kernel_grads = getattr(f, 'with_kernel_grads', None)
    sqr, grads = with_kernel_grads(g) if with_kernel_grads else (f(g), None)
    sqr_norms.append(sqr)
    kept.append(grads)
  norms = tf.sqrt(tf.add_n(sqr_norms))
  finite = tf.math.is_finite(norms) & tf.math.is_finite(losses)
  weights = tf.where(finite, clip_scale(norms, clip_norm), 0.0)
  sums = {}
  for g, k, (_, _, weighted_grads) in zip(base_grads, kept, records):
    for variable, grad in weighted_grads(g, weights, k):
      key = variable.ref()
      sums[key] = sums[key] + grad if key in sums else grad
  grads = [
      sums.get(v.ref(), tf.zeros_like(v)) for v in keras_model.trainable_variables
  ]
  return grads, tf.where(finite, losses, 0.0)
