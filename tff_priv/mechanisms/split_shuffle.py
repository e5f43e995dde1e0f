"""Split and shuffle (LDP-FL, Sun, Qian, Chen 2021, Algorithm 3) as a transport.

Each client splits its encoded structure into scalar messages

    (tensor_id, flat_index, value, send_time),

one per reported scalar, and sends each after its own delay t ~ U(0, T), drawn
independently. The server receives the messages of all clients merged in
time order: a stream of (id, value) pairs that, by itself, does not say which
client sent which value, nor which values came from the same client. It
averages the values by id.

Equivalence with the factory: for the same encoded reports,
`average_by_id(merge([split(r_u) for u]))` is the per-coordinate mean of
`tff_priv.aggregators.ldp_encode.ReportMeanFactory` (the mean that
`LDPEncodeFactory` returns): a non-finite report is a message never sent, so
coordinate j is averaged over the clients that reported it, and a coordinate
nobody reported is 0. The only difference is rounding: this module sums in
float64, TFF sums in the values' dtype.

What is simulated and what is not: the send times and the merge. The
anonymity of the channel itself (the paper's Tor / VPN / proxy) is assumed;
this module does not model network metadata.

Everything is vectorised numpy: no Python loop per scalar. A client's send
times are drawn already sorted (order statistics of T uniforms from
exponential spacings, O(d)) and assigned to its messages by a uniform random
permutation, which has the same distribution as drawing one U(0, T) per
message and sorting; the merge is then one stable sort that finds the clients'
sorted runs.
"""

import functools
from typing import NamedTuple, Sequence, Union

import numpy as np
import tensorflow as tf

RngLike = Union[np.random.Generator, int, None]


class Messages(NamedTuple):
  """A batch of scalar messages, as parallel arrays of equal length.

  Attributes:
    tensor_id: int32, index of the tensor in tf.nest.flatten order of the
      encoded structure (= tff.structure.flatten order of the value type).
    flat_index: int32 (int64 for tensors of 2^31 or more entries), index of
      the scalar in the row-major flattened tensor.
    value: the reported scalar (the dtype of the encoded tensors).
    send_time: float64 in [0, max_delay], when the message is sent.
  """

  tensor_id: np.ndarray
  flat_index: np.ndarray
  value: np.ndarray
  send_time: np.ndarray

  def __len__(self):
    return len(self.value)


def split(encoded, rng: RngLike, max_delay: float) -> Messages:
  """Splits one client's encoded structure into messages, in send order.

  Args:
    encoded: a structure (tf.nest) of encoded tensors or arrays; non-finite
      entries are "no report" and produce no message.
    rng: a numpy Generator, or a seed for one (the client's own randomness).
    max_delay: T > 0; each message is sent after an independent U(0, T) delay.

  Returns:
    The client's `Messages`, sorted by `send_time`.

  Raises:
    ValueError: max_delay is not positive and finite, or `encoded` holds no
      tensor.
  """
  if not (np.isfinite(max_delay) and max_delay > 0):
    raise ValueError(f'max_delay must be > 0 and finite, got {max_delay}')
  rng = np.random.default_rng(rng)
  flats = [np.asarray(x).reshape(-1) for x in tf.nest.flatten(encoded)]
  if not flats:
    raise ValueError('encoded must contain at least one tensor')
  values = np.concatenate(flats)
  tensor_id, flat_index = _ids(tuple(f.size for f in flats))
  finite = np.isfinite(values)
  if not finite.all():
    values, tensor_id, flat_index = (
        values[finite],
        tensor_id[finite],
        flat_index[finite],
    )
  m = values.size
  # Sorted U(0, T) sample: S_k / S_{m+1} with S_k partial sums of Exp(1)
  # (float32 draws, summed in float64).
  spacings = np.cumsum(
      rng.standard_exponential(m + 1, dtype=np.float32), dtype=np.float64
  )
  send_time = max_delay * (spacings[:m] / spacings[m])
  order = rng.permutation(m)
  return Messages(
      tensor_id=tensor_id[order],
      flat_index=flat_index[order],
      value=values[order],
      send_time=send_time,
  )


@functools.lru_cache(maxsize=8)
def _ids(sizes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
  """(tensor_id, flat_index) of every scalar; cached: the same every round."""
  index_dtype = np.int64 if max(sizes) >= 2**31 else np.int32
  tensor_id = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
  flat_index = np.concatenate([np.arange(s, dtype=index_dtype) for s in sizes])
  tensor_id.flags.writeable = False
  flat_index.flags.writeable = False
  return tensor_id, flat_index


def merge(client_messages: Sequence[Messages]) -> Messages:
  """All clients' messages in order of send time (the server's view).

  Ties in send time keep the order of `client_messages` (stable sort).

  Args:
    client_messages: one `Messages` per client.

  Returns:
    The merged `Messages`, sorted by `send_time`.
  """
  if not client_messages:
    raise ValueError('client_messages must not be empty')
  send_time = np.concatenate([m.send_time for m in client_messages])
  # Timsort: the clients' messages are sorted runs, merged in O(N log K).
  order = np.argsort(send_time, kind='stable')
  fields = {'send_time': send_time[order]}
  del send_time
  for name in ('tensor_id', 'flat_index', 'value'):
    fields[name] = np.concatenate(
        [getattr(m, name) for m in client_messages]
    )[order]
  return Messages(**fields)


def average_by_id(
    messages: Messages, shapes: Sequence[Sequence[int]], dtype=None
) -> list[np.ndarray]:
  """The server's mean of the received values of every (tensor_id, index).

  Args:
    messages: the received messages (any order).
    shapes: the shape of every tensor, in tensor_id order.
    dtype: dtype of the result; defaults to the dtype of `messages.value`.

  Returns:
    One array per tensor: the mean of the values received for each
    coordinate (accumulated in float64), 0 where none was received.

  Raises:
    ValueError: a message names a tensor or index outside `shapes`.
  """
  shapes = [tuple(int(d) for d in s) for s in shapes]
  sizes = np.array([int(np.prod(s)) for s in shapes], np.int64)
  offsets = np.concatenate([[0], np.cumsum(sizes)])
  if len(messages):
    if messages.tensor_id.min() < 0 or messages.tensor_id.max() >= len(shapes):
      raise ValueError('a message has a tensor_id outside shapes')
    if messages.flat_index.min() < 0 or np.any(
        messages.flat_index >= sizes[messages.tensor_id]
    ):
      raise ValueError('a message has a flat_index outside its tensor')
  key = offsets[messages.tensor_id] + messages.flat_index
  total = int(offsets[-1])
  sums = np.bincount(key, weights=messages.value, minlength=total)
  counts = np.bincount(key, minlength=total)
  means = np.divide(
      sums, counts, out=np.zeros(total, np.float64), where=counts > 0
  )
  dtype = messages.value.dtype if dtype is None else dtype
  return [
      means[offsets[i] : offsets[i + 1]].astype(dtype).reshape(s)
      for i, s in enumerate(shapes)
  ]
