"""Per-example gradient clipping without per-example gradients ("ghost norms").

`clipped_grad_sum` returns the sum over a batch of per-example gradients, each
clipped to L2 norm C, in one forward and one backward pass: the per-example
norms by tensorflow_privacy's fast gradient clipping registry functions, the
clipped sum by each layer's book-keeping. `layer_registry` extends
tensorflow_privacy's registry (Dense, Embedding) with Conv2D;
`unsupported_layers` names the layers of a Keras model it cannot handle (among
them any layer a forward pass calls twice).
"""

import functools
from typing import Callable, NamedTuple, Optional

import numpy as np
import tensorflow as tf
from tensorflow_privacy.privacy.fast_gradient_clipping import (
    gradient_clipping_utils,
)
from tensorflow_privacy.privacy.fast_gradient_clipping import (
    layer_registry as lr,
)

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
  """min(1, C / norm): the factor clipping a gradient of L2 norm `norm` to C."""
  return tf.minimum(1.0, clip_norm / tf.maximum(norms, 1e-30))


def _same_padding(size, kernel: int, stride: int, dilation: int):
  """(before, after): TensorFlow's 'SAME' padding of one spatial axis.

  `size` is an int, or a scalar tensor where it is unknown when tracing.
  """
  out = -(-size // stride)
  total = (out - 1) * stride + (kernel - 1) * dilation + 1 - size
  total = max(total, 0) if isinstance(total, int) else tf.maximum(total, 0)
  return total // 2, total - total // 2


def _padded(layer: tf.keras.layers.Conv2D, inputs: tf.Tensor) -> tf.Tensor:
  """The inputs with the layer's 'same' padding added ('valid': unchanged)."""
  if layer.padding != 'same':
    return inputs
  pads = [[0, 0]]
  for axis, kernel, stride, dilation in zip(
      (1, 2), layer.kernel_size, layer.strides, layer.dilation_rate
  ):
    size = inputs.shape[axis]
    size = tf.shape(inputs)[axis] if size is None else size
    pads.append(_same_padding(size, kernel, stride, dilation))
  return tf.pad(inputs, pads + [[0, 0]])


def _input_patches(layer: tf.keras.layers.Conv2D, inputs, out_size):
  """[batch, kh * kw * c_in, positions]: each output position's input patch.

  Entry (i, j, c) of output position (h, w) is X[h s + i r, w s + j r, c] of
  the padded inputs X (s the stride, r the dilation), for the `out_size`
  (H', W') output positions; the patch axis is ordered as the kernel's
  (kh, kw, c_in). Built from kh * kw strided slices of the inputs with the
  channels first. Timed on one CPU thread on the conv layers of the McMahan
  CNN, small_vgg and udp_cifar_cnn, the per-example kernel gradients from
  these patches took 0.2-0.8x the time of the same product from
  `tf.image.extract_patches` (whose output puts the patch axis last).
  """
  (kh, kw), (sh, sw), (dh, dw) = (
      layer.kernel_size,
      layer.strides,
      layer.dilation_rate,
  )
  out_h, out_w = out_size
  x = tf.transpose(_padded(layer, inputs), [0, 3, 1, 2])  # [batch, c, H, W]
  patches = tf.stack(
      [
          x[
              :,
              :,
              i * dh : i * dh + (out_h - 1) * sh + 1 : sh,
              j * dw : j * dw + (out_w - 1) * sw + 1 : sw,
          ]
          for i in range(kh)
          for j in range(kw)
      ],
      axis=1,
  )  # [batch, kh * kw, c, H', W']
  return tf.reshape(patches, [tf.shape(inputs)[0], -1, out_h * out_w])


def _spatial(t: tf.Tensor):
  """(H, W) of a [batch, H, W, channels] tensor: ints, or scalar tensors."""
  shape = tf.shape(t)
  return tuple(shape[a] if t.shape[a] is None else t.shape[a] for a in (1, 2))


@functools.cache
def grouped_filter_grads() -> bool:
  """Whether this TensorFlow's CPU Conv2DBackpropFilter takes grouped inputs.

  oneDNN's kernel does (TensorFlow uses oneDNN on CPUs with AVX-512 VNNI and
  the like, unless TF_ENABLE_ONEDNN_OPTS=0); Eigen's, the one used otherwise,
  refuses them ("filter_size does not have enough elements"). TensorFlow's
  GPU kernel (cuDNN) takes them too (tensorflow/tensorflow#25818). Asked
  once, by running one on a 1x1 kernel, in the process that traces the
  computation: a TFF worker on another machine must have the same CPU
  kernels (docs/remote.md).
  """
  with tf.init_scope(), tf.device('/CPU:0'):
    if not tf.executing_eagerly():  # TF1 graph mode: nothing runs here.
      return False
    try:
      tf.compat.v1.nn.conv2d_backprop_filter(
          tf.ones([1, 1, 1, 2]),
          [1, 1, 1, 2],
          tf.ones([1, 1, 1, 2]),
          strides=[1, 1, 1, 1],
          padding='VALID',
      )
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError):
      return False
  return True


class KernelGrads(NamedTuple):
  """Per-example kernel gradients, the batch on axis `batch_axis`.

  Without that axis, `values` has the kernel's shape [kh, kw, c_in, d].
  """

  values: tf.Tensor
  batch_axis: int

  def sqr_norms(self) -> tf.Tensor:
    """[batch] squared Frobenius norms."""
    axes = [a for a in range(5) if a != self.batch_axis]
    return tf.reduce_sum(tf.square(self.values), axis=axes)

  def weighted_sum(self, weights: tf.Tensor) -> tf.Tensor:
    """sum_b weights[b] K_b, kernel-shaped."""
    return tf.tensordot(weights, self.values, [[0], [self.batch_axis]])


def _per_example_kernel_grads(
    layer: tf.keras.layers.Conv2D, inputs, grads
) -> KernelGrads:
  """Each example's kernel gradient.

  Example b's kernel gradient, K_b[i, j, c, o] = sum_{h, w}
  X_b[h s + i r, w s + j r, c] G_b[h, w, o] (X padded, s the stride, r the
  dilation), is the filter gradient of a grouped convolution whose groups
  are the examples: the batch moved into the channels of the inputs
  ([1, H, W, batch c_in]) and of the output gradients ([1, H', W', batch d]),
  output channel b d + o reads input channels b c_in to (b + 1) c_in only,
  so examples do not mix. That is one Conv2DBackpropFilter, taken where
  TensorFlow's CPU kernel has groups (`grouped_filter_grads`); elsewhere
  K_b = A_b G_b from the input patches A_b (`_input_patches`), a batched
  product. Timed on one CPU thread (oneDNN) on the materialised conv layers
  of the McMahan CNN, small_vgg and udp_cifar_cnn at batch 10, the grouped
  form took 1.1-1.25x the time of the summed filter gradient and the
  patches 1.3-2.2x (0.7-1.25x without oneDNN); the depthwise convolution of
  Rochette et al. 2019, the form this replaced, took 1.5-2.6x with oneDNN
  and up to 5.2x without it (docs/benchmarks.md).
  """
  kh, kw = layer.kernel_size
  c_in, d = inputs.shape[-1], grads.shape[-1]
  batch = tf.shape(grads)[0]
  if grouped_filter_grads():

    def as_channels(t):  # [batch, H, W, c] -> [1, H, W, batch c]
      return tf.reshape(tf.transpose(t, [1, 2, 0, 3]), [1, *_spatial(t), -1])

    kernels = tf.compat.v1.nn.conv2d_backprop_filter(
        as_channels(inputs),
        tf.stack([kh, kw, c_in, batch * d]),
        as_channels(grads),
        strides=[1, *layer.strides, 1],
        padding=layer.padding.upper(),
        dilations=[1, *layer.dilation_rate, 1],
    )  # [kh, kw, c_in, batch * d]
    return KernelGrads(tf.reshape(kernels, [kh, kw, c_in, -1, d]), 3)
  a = _input_patches(layer, inputs, _spatial(grads))
  products = tf.matmul(a, tf.reshape(grads, [batch, -1, d]))
  return KernelGrads(tf.reshape(products, [-1, kh, kw, c_in, d]), 0)


def use_ghost_form(positions: Optional[int], patch_size: int, filters: int):
  """Whether a Conv2D kernel's per-example norm is cheaper as a ghost norm.

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
    positions = (
        grads.shape[1] * grads.shape[2]
        if None not in grads.shape[1:3]
        else None
    )
    kernel_grads = None
    if use_ghost_form(positions, patch_size, g.shape[-1]):
      a = _input_patches(layer_instance, inputs, _spatial(grads))
      sqr = tf.reduce_sum(
          tf.einsum('bps,bpt->bst', a, a) * tf.einsum('bsd,btd->bst', g, g),
          axis=[1, 2],
      )
    else:
      kernel_grads = _per_example_kernel_grads(layer_instance, inputs, grads)
      sqr = kernel_grads.sqr_norms()
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


def _rows(weights: tf.Tensor, t: tf.Tensor, axis: int = 0) -> tf.Tensor:
  """`weights` shaped to multiply the slices of `t` along `axis`."""
  shape = [1] * t.shape.rank
  shape[axis] = -1
  return tf.reshape(weights, shape)


def _zero_rows(keep: tf.Tensor, t: tf.Tensor, axis: int = 0) -> tf.Tensor:
  """`t` with the slices along `axis` where `keep` is False set to 0.

  tf.where, not a product: such a slice may hold NaN or inf.
  """
  return tf.where(_rows(keep, t, axis), t, tf.zeros_like(t))


# The book-keeping functions below map (dL/dZ, the examples' weights, the
# per-example kernel gradients the norm kept or None, `safe`) to
# (variable, weighted gradient) pairs. With `safe`, some weight is 0 (an
# example whose norm or loss is not finite) and the rows of that example
# are zeroed before they are used; `clipped_grad_sum` passes safe=False only
# when every weight is positive, and the weighted sums are then the plain
# products.


def _dense_grads(layer: tf.keras.layers.Dense, input_args):
  """dL/dZ -> weighted kernel and bias gradients of `Z = X W + b`."""
  inputs = input_args[0]

  def grads(base_grads, weights, kept, safe):
    del kept  # tensorflow_privacy's Dense norm keeps no gradient.
    x = _zero_rows(weights > 0, inputs) if safe else inputs
    g = _zero_rows(weights > 0, base_grads) if safe else base_grads
    g = g * _rows(weights, g)
    x = tf.reshape(x, [-1, inputs.shape[-1]])
    g = tf.reshape(g, [-1, base_grads.shape[-1]])
    out = [(layer.kernel, tf.matmul(x, g, transpose_a=True))]
    if layer.use_bias:
      out.append((layer.bias, tf.reduce_sum(g, axis=0)))
    return out

  return grads


def _conv2d_grads(layer: tf.keras.layers.Conv2D, input_args):
  """dL/dZ -> weighted kernel and bias gradients of `Z = conv(X, K) + b`.

  `kept`: the per-example kernel gradients of these dL/dZ (a `KernelGrads`)
  if the norm materialised them (`conv2d_layer_computation`); their
  weighted sum is then the kernel's, one contraction in place of a filter
  gradient (about a convolution's work).
  """
  inputs = input_args[0]

  def grads(base_grads, weights, kept, safe):
    g = _zero_rows(weights > 0, base_grads) if safe else base_grads
    g = g * _rows(weights, g)

    def x():
      # Read only by the two filter-gradient forms below.
      return _zero_rows(weights > 0, inputs) if safe else inputs

    if kept is not None:
      values = kept.values
      if safe:
        values = _zero_rows(weights > 0, values, kept.batch_axis)
      kernel = KernelGrads(values, kept.batch_axis).weighted_sum(weights)
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
      a = _input_patches(layer, x(), _spatial(g))
      flat_g = tf.reshape(g, [tf.shape(g)[0], -1, g.shape[-1]])
      kernel = tf.reshape(
          tf.einsum('bpt,bto->po', a, flat_g), tf.shape(layer.kernel)
      )
    out = [(layer.kernel, kernel)]
    if layer.use_bias:
      out.append((layer.bias, tf.reduce_sum(g, axis=[0, 1, 2])))
    return out

  return grads


def _embedding_grads(layer: tf.keras.layers.Embedding, input_args):
  """dL/dtable (IndexedSlices, a row per lookup) -> weighted table gradient."""
  ids = input_args[0]

  def grads(base_grads, weights, kept, safe):
    del kept  # tensorflow_privacy's Embedding norm keeps no gradient.
    lookups = tf.size(ids) // tf.shape(ids)[0]
    row_weights = tf.repeat(weights, lookups)
    values = base_grads.values
    if safe:
      values = _zero_rows(row_weights > 0, values)
    table = tf.math.unsorted_segment_sum(
        values * _rows(row_weights, values),
        base_grads.indices,
        tf.shape(layer.embeddings)[0],
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
    return [
        f'{keras_model.name} ({type(keras_model).__name__}, not a '
        'functional Keras model)'
    ]
  return _unsupported(
      keras_model, registry, _trainable_layer_calls(keras_model, {})
  )


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
      blocking.append(
          f'{layer.name} ({type(layer).__name__}, called '
          f'{calls[id(layer)]} times)'
      )
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


def _weighted_sums(variables, records, base_grads, kept, weights):
  """sum_m weights[m] g_m for each variable, from the layers' book-keeping.

  The zeroing of a zero-weight example's rows (`safe`) costs a select per
  tensor, needed only when some example's weight is 0: a branch.
  """

  def bookkeeping(safe):
    sums = {}
    for g, k, (_, _, weighted_grads) in zip(base_grads, kept, records):
      for variable, grad in weighted_grads(g, weights, k, safe):
        key = variable.ref()
        sums[key] = sums[key] + grad if key in sums else grad
    return [sums.get(v.ref(), tf.zeros_like(v)) for v in variables]

  return tf.cond(
      tf.reduce_all(weights > 0),
      lambda: bookkeeping(safe=False),
      lambda: bookkeeping(safe=True),
  )


def _recorder(registry, tape):
  """`clipped_grad_sum`'s `generator_fn` for `model_forward_pass`.

  For each layer call: the outputs and, for a trainable layer, its record (Z,
  the squared-norm function, the book-keeping function); raises for a layer
  it cannot clip, or one called a second time.
  """
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
    return outputs, (
        z,
        sqr_norm_fn,
        _WEIGHTED_GRADS[layer.__class__](layer, args),
    )

  return record


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
  record = _recorder(registry, tape)

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

  grads = _weighted_sums(
      keras_model.trainable_variables, records, base_grads, kept, weights
  )
  return grads, tf.where(finite, losses, 0.0)
