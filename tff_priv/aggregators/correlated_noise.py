"""The server-side stream of BLTFactory, BandMFFactory and TreeRestartFactory.

BLT and BandMF clip each client's update to C (`clipping.clip_l2`: a
non-finite update contributes zeros), sum, add sigma x_t (x_t the round's
correlated noise, a linear function of fresh z_1..z_t ~ N(0, I)), and divide by
the public `clients_per_round` K. What differs is x_t's generator (BLT's
buffers, BandMF's window) and the event charged; this module holds the rest,
and the layout of the stream state the three factories share (`StreamState`).
"""

import collections
import secrets
from typing import Any, Callable, NamedTuple, Optional

import attr
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.aggregators import plan as plan_lib
from tff_priv.mechanisms import clipping
from tff_priv.mechanisms import gaussian


class StreamState(NamedTuple):
  """The fields of a correlated-noise stream's state, at SERVER.

  Shared by BLT, BandMF and the tree (DP-FTRL): each factory's state class is
  made of these fields by `stream_state_class`, with its own `accounting`
  (`guarantees.StateAccounting`).

  Attributes:
    noise: the generator's own state: BLT's buffers, BandMF's window of past
      noise, the tree (TFF's tree-aggregation state).
    nonce: int64 [2], the seed nonce of the stream's noise (`round_noise`).
    rounds_done: int64, the rounds released.
    force_restart: bool, restart the stream at the next round
      (`with_restart_forced`).
    dp_event: the `to_named_tuple()` form of the event the last round was
      charged (a placeholder in `initialize()`'s state).
    is_init_state: True in the state `initialize()` returns.
    planned_rounds: int64, the rounds a calibrated factory was calibrated for
      (0: no plan; `plan.check` refuses the round past it).
  """

  noise: Any
  nonce: Any
  rounds_done: Any
  force_restart: Any
  dp_event: Any
  is_init_state: Any
  planned_rounds: Any


def stream_state_class(
    name: str, module: str, accounting: Any, legacy_noise_key: str
) -> type:
  """A factory's state class: `StreamState`'s fields, its own `accounting`.

  A named tuple of its own, not a subclass of `StreamState`: TFF's program
  state manager restores only plain named tuples (dm-tree reads a subclass of
  one as another kind of sequence). `legacy_noise_key` is the key `noise` had
  in the OrderedDict the state was in tff_priv 0.2 (`legacy_form`).
  """
  cls = NamedTuple(name, [(field, Any) for field in StreamState._fields])
  cls.__module__ = module
  cls.__doc__ = (
      f'The state of a {accounting.factory} process: the fields of '
      '`correlated_noise.StreamState`.'
  )
  cls.accounting = accounting
  cls.legacy_noise_key = legacy_noise_key
  return cls


def is_stream_state(value) -> bool:
  """Whether `value` is the state of a `stream_state_class` class."""
  cls = type(value)
  return (
      getattr(cls, '_fields', None) == StreamState._fields
      and getattr(cls, 'legacy_noise_key', None) is not None
  )


def _legacy(state) -> collections.OrderedDict:
  """`state` as the OrderedDict of tff_priv 0.2."""
  legacy = collections.OrderedDict(
      (type(state).legacy_noise_key if k == 'noise' else k, v)
      for k, v in state._asdict().items()
      if k != 'planned_rounds'
  )
  if int(_numpy(state.planned_rounds)) > 0:
    legacy['planned_rounds'] = state.planned_rounds
  return legacy


def _numpy(value):
  return value.numpy() if hasattr(value, 'numpy') else value


def legacy_form(structure):
  """`structure` with every stream state in it as its tff_priv 0.2 dict."""
  if is_stream_state(structure):
    return _legacy(structure)
  return _map_children(legacy_form, structure)


def from_legacy_form(template, loaded):
  """`loaded` (read with `legacy_form(template)`) with `template`'s states.

  Where `template` has a stream state, `loaded` has its legacy dict: it
  becomes that state's class again (no plan: `planned_rounds` 0).
  """
  if is_stream_state(template):
    cls = type(template)
    fields = dict(loaded)
    fields['noise'] = fields.pop(cls.legacy_noise_key)
    fields.setdefault('planned_rounds', np.int64(0))
    return cls(**fields)
  return _map_children(from_legacy_form, template, loaded)


_ALONE = object()


def _map_children(fn, node, other=_ALONE):
  """`node` with `fn(child)` (or `fn(child, other's child)`) for each child.

  Over the containers TFF states are made of (named tuples, attrs classes,
  dicts, lists and tuples), children matched by field, key or index; any
  other node is returned as it is (`other` when given).
  """

  def child(get):
    return fn(get(node)) if other is _ALONE else fn(get(node), get(other))

  def item(key):
    return child(lambda tree: tree[key])

  if hasattr(node, '_fields'):
    return type(node)(*[item(i) for i in range(len(node))])
  if attr.has(type(node)):
    return attr.evolve(
        node,
        **{
            a.alias: child(lambda tree, name=a.name: getattr(tree, name))
            for a in attr.fields(type(node))
            if a.init
        },
    )
  if isinstance(node, dict):
    return type(node)((k, item(k)) for k in node)
  if isinstance(node, (list, tuple)):
    return type(node)(item(i) for i in range(len(node)))
  return node if other is _ALONE else other


def stream_state(
    cls: type,
    planned_rounds: Optional[int],
    **fields,
) -> tuple:
  """A `cls` state of `fields` with its plan (TF, or federated values)."""
  return cls(
      planned_rounds=tf.constant(planned_rounds or 0, tf.int64), **fields
  )


def new_key(noise_seed: Optional[int]) -> int:
  """The key of a `create()`: `noise_seed` (tests) or 63 secret bits."""
  return noise_seed if noise_seed is not None else secrets.randbits(63)


def round_seed(key, nonce, round_index):
  """The int64 [2] seed of round `round_index`'s z (TF)."""
  nonce = tf.cast(nonce, tf.int64)
  seed = tf.random.experimental.stateless_fold_in(
      tf.constant([key, 0], tf.int64), nonce[0]
  )
  seed = tf.random.experimental.stateless_fold_in(seed, nonce[1])
  return tf.random.experimental.stateless_fold_in(
      seed, tf.cast(round_index, tf.int64)
  )


def initial_nonce(fixed: bool):
  """The state's nonce at `initialize()` (TF); see `round_noise`."""
  if fixed:
    return tf.zeros([2], tf.int64)
  return tf.raw_ops.NonDeterministicInts(shape=[2], dtype=tf.int64)


def round_noise(key, fixed: bool, nonce, restart, round_index, like):
  """(the state's next nonce, z ~ N(0, I) of `like`'s structure) (TF).

  Round r's z from `round_seed(key, n, r)`, `key` 63 bits from Python's
  `secrets` per `create()` (`new_key`), `n` TF's nondeterministic integers
  drawn anew at every call of `next`, so that a round run again (after a
  forced restart, or from a state restored in the same process) never
  releases a z it released before (the difference of two such releases would
  be noise-free). Neither is released. With a fixed `noise_seed` (tests only)
  `n` is the state's nonce (`initial_nonce`), moved at each forced restart.
  """
  if fixed:
    # Tests: deterministic, but a forced restart moves to new draws.
    nonce = tf.where(restart, nonce + tf.constant([0, 1], tf.int64), nonce)
    seed = round_seed(key, nonce, round_index)
  else:
    # A fresh draw every call: a round run again (a restart, or a state
    # restored in the same process) never repeats a released z.
    seed = round_seed(
        key,
        tf.raw_ops.NonDeterministicInts(shape=[2], dtype=tf.int64),
        round_index,
    )
  z = gaussian.add_gaussian_noise(
      tf.nest.map_structure(tf.zeros_like, like), 1.0, seed=seed
  )
  return nonce, z


def noised_mean(total, flat_noise, stddev: float, divisor: float, round_index):
  """((total + stddev x noise) / divisor, the round's measurements) (TF).

  That is (sum + sigma x) / K, and the round's public measurements.
  """
  result = [
      (t + tf.cast(stddev, t.dtype) * x) / tf.cast(divisor, t.dtype)
      for t, x in zip(tf.nest.flatten(total), flat_noise)
  ]
  measurements = collections.OrderedDict(
      # Public: set by the factory's arguments and the round count.
      noise_stddev=tf.constant(stddev / divisor, tf.float32),
      round=round_index,
  )
  return tf.nest.pack_sequence_as(total, result), measurements


def stream_process(
    value_type, clip: float, initial_state: Callable, add_noise: Callable
) -> tff.templates.AggregationProcess:
  """The process: clip on each client, sum, `add_noise(state, sum)` at SERVER.

  The `AggregationProcess` around a factory's `initial_state` and
  `add_noise` TensorFlow functions.

  Args:
    value_type: the clients' value type.
    clip: the L2 clip of each client's value.
    initial_state: () -> the state (TF).
    add_noise: (state, total) -> OrderedDict(state=, result=,
      measurements=) (TF).
  """
  initial = tff.tensorflow.computation(initial_state)

  @tff.federated_computation()
  def init_fn():
    return tff.federated_eval(initial, tff.SERVER)

  state_type = init_fn.type_signature.result.member
  clip_fn = tff.tensorflow.computation(
      lambda value: clipping.clip_l2(value, clip), value_type
  )
  noise_fn = tff.tensorflow.computation(add_noise, state_type, value_type)

  @tff.federated_computation(
      tff.FederatedType(state_type, tff.SERVER),
      tff.FederatedType(value_type, tff.CLIENTS),
  )
  def next_fn(state, value):
    total = tff.federated_sum(tff.federated_map(clip_fn, value))
    output = tff.federated_map(noise_fn, (state, total))
    return tff.templates.MeasuredProcessOutput(
        state=output.state,
        result=output.result,
        measurements=output.measurements,
    )

  return tff.templates.AggregationProcess(init_fn, next_fn)


def refusing_past(planned_rounds: Optional[int], name: str):
  """Decorates `add_noise(state, total)` to refuse the round past the plan.

  With a plan, it fails on the round past it (`plan.check` on the state's
  `rounds_done`) before any noise.
  """

  def decorate(add_noise):
    if planned_rounds is None:
      return add_noise

    def checked(state, total):
      with tf.control_dependencies(
          [plan_lib.check(state.rounds_done, planned_rounds, name)]
      ):
        total = tf.nest.map_structure(tf.identity, total)
      return add_noise(state, total)

    return checked

  return decorate


def with_restart_forced(aggregator_state):
  """`aggregator_state` set to restart its noise at the next round.

  Its generator is zeroed and charged anew at that round: for a loop that
  runs rounds again.
  """
  return aggregator_state._replace(force_restart=True)
