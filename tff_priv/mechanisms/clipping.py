"""L2 clipping of one client's value, with tff_priv's one non-finite policy.

`clip_l2(value, C)` returns value * min(1, C / ||value||_2), the norm taken
over the whole structure as one vector. Policy for every factory: a value
whose norm is not finite (NaN or inf anywhere, or a norm that overflows)
contributes zeros, which lie in every clip ball, so one client can never
turn an aggregate into NaN (a deterministic indicator of that client: eps =
infinity for that neighbour), and nothing reports that it happened.
`clip_l2(value, None)` applies the policy alone (a factory whose sensitivity
is bounded elsewhere, e.g. by UDP's clipped client step).
"""

from typing import Any, Optional

import tensorflow as tf


def clip_l2(value: Any, clip: Optional[float]) -> Any:
  """`value` (a tensor or structure of tensors) clipped to L2 norm `clip`.

  Args:
    value: float tensor or (nested) structure of float tensors.
    clip: C > 0 (a number or scalar tensor), or None for no norm bound.

  Returns:
    The same structure: scaled to norm <= C, or all zeros when the norm is
    not finite.
  """
  leaves = [tf.convert_to_tensor(t) for t in tf.nest.flatten(value)]
  norm = tf.linalg.global_norm(leaves)

  def clipped():
    if clip is None:
      return leaves
    return tf.clip_by_global_norm(leaves, clip, use_norm=norm)[0]

  # A branch, not a select of every coordinate: one pass over the value
  # fewer, for what is zeros only in the rare non-finite case.
  leaves = tf.cond(
      tf.math.is_finite(norm),
      clipped,
      lambda: [tf.zeros_like(t) for t in leaves],
  )
  return tf.nest.pack_sequence_as(value, leaves)
