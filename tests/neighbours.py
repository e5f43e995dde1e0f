"""The neighbouring-input check of what a private process releases."""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff


def _flat_leaves(nest):
  """{path: np.ndarray} of every leaf of a measurements structure.

  Paths join the names (or, unnamed, the positions) of the containers with
  '/'. Python containers (OrderedDict, tuple, NamedTuple, attrs) are read
  through `tff.structure`, as TFF returns them.
  """
  out = collections.OrderedDict()

  def visit(value, path):
    if not isinstance(value, tff.structure.Struct) and not tf.nest.is_nested(
        value
    ):
      out['/'.join(path)] = np.asarray(value)
      return
    struct = (
        value
        if isinstance(value, tff.structure.Struct)
        else tff.structure.from_container(value)
    )
    for i, (name, element) in enumerate(tff.structure.iter_elements(struct)):
      visit(element, path + [name if name is not None else str(i)])

  visit(nest, [])
  return out


def _same(a, b):
  """Bit-identical arrays (NaN equals NaN of the same payload)."""
  return (
      a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
  )


def exact_statistic_leaves(run, inputs, neighbour, *, public=()):
  """Measurement leaves that behave as exact statistics of the clients' data.

  Runs `run(inputs)` and `run(neighbour)` twice each (`neighbour` is `inputs`
  with one client's value replaced) and flattens what they return. A leaf is
  flagged when it is identical across the two runs of the same input (no
  noise) yet different between the neighbours: it reveals the replaced
  client's value exactly. Leaves listed in `public` (documented public or
  documented non-private releases) are not flagged.

  A value a process returns (a measurement, a metric) that is identical on two
  runs of the same input and different on a neighbouring input (one client's
  value, or one example, replaced) is an exact, un-noised statistic of the
  clients' data. Tests of every tff_priv factory run it on their measurements.

  Args:
    run: input -> a structure of measurements (tf.nest or tff.structure).
    inputs: the clients' values.
    neighbour: the same clients' values, one of them replaced.
    public: paths (joined with '/') of leaves documented as public.

  Returns:
    The flagged leaf paths, in flattening order.
  """
  first = [_flat_leaves(run(inputs)) for _ in range(2)]
  second = [_flat_leaves(run(neighbour)) for _ in range(2)]
  paths = list(first[0])
  for leaves in first[1:] + second:
    if list(leaves) != paths:
      raise ValueError(f'measurement structure changed: {list(leaves)}')
  flagged = []
  for path in paths:
    if path in public:
      continue
    a1, a2 = first[0][path], first[1][path]
    b1, b2 = second[0][path], second[1][path]
    if _same(a1, a2) and _same(b1, b2) and not _same(a1, b1):
      flagged.append(path)
  return flagged
