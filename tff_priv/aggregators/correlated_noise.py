"""The server-side correlated-noise process of BLTFactory and BandMFFactory.

Both clip each client's update to C (`clipping.clip_l2`: a non-finite update
contributes zeros), sum, add sigma x_t (x_t the round's correlated noise, a
linear function of fresh z_1..z_t ~ N(0, I)), and divide by the public
`clients_per_round` K. What differs is x_t's generator (BLT's buffers,
BandMF's window) and the event charged; this module holds the rest.
"""

import collections
import secrets
from typing import Callable, Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_priv.aggregators import plan as plan_lib
from tff_priv.mechanisms import clipping
from tff_priv.mechanisms import gaussian


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


def with_plan(state, planned_rounds: Optional[int]):
  """`state` (an OrderedDict) with `planned_rounds` if there is a plan (TF)."""
  if planned_rounds is not None:
    state['planned_rounds'] = tf.constant(planned_rounds, tf.int64)
  return state


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
          [plan_lib.check(state['rounds_done'], planned_rounds, name)]
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
  state = collections.OrderedDict(aggregator_state)
  state['force_restart'] = True
  return state
