"""Split and shuffle (LDP-FL, Sun, Qian, Chen 2021, Algorithm 3) as a transport.

Each client splits its encoded structure into scalar messages (tensor_id,
flat_index, value), one per reported scalar, and sends each one after its own
delay t ~ U(0, T), drawn independently for every message. The server receives
the messages of all clients merged in order of arrival: a stream of (id,
value) pairs that, by itself, does not say which client sent which value, nor
which values came from the same client. It averages the values by id.
"""

import collections.abc
import functools
import numbers
from typing import Iterable, Iterator, NamedTuple, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

RngLike = Union[np.random.Generator, int, None]

# chunk_size=None: chunks of at least 2^16 messages (a chunk's permutation,
# 8 bytes a message, stays near the core's cache) and at most 2^8 chunks (8-bit
# labels: one radix pass). Measured with scripts/benchmark_ldp.py sizes: at
# 16.6M messages 2^16 beat 2^14, 2^15, 2^17, 2^18 and 2^20 by 10-30%; at 166M,
# 2^8 chunks of 650K beat 2^16 (2,538 chunks, 16-bit labels) by about 15%.
_MIN_AUTO_CHUNK = 2**16
_MAX_AUTO_CHUNKS = 2**8
# Radix sort (numpy's stable argsort) needs labels of at most 16 bits.
_MAX_CHUNKS = 2**16
# average_by_id counts this many messages per np.bincount (16 MB buffers).
_AVERAGE_PIECE = 2**21


class _Fields(NamedTuple):
  tensor_id: np.ndarray
  flat_index: np.ndarray
  value: np.ndarray
  send_time: Optional[np.ndarray] = None


class Messages(_Fields):
  """A batch of scalar messages, as parallel arrays of equal length.

  A named tuple of four arrays whose `len()` is the number of messages. The
  transport:

      messages = [split(report) for report in reports]     # the clients
      stream = merge(messages, rng, max_delay=T)           # the channel
      means = average_by_id(stream, shapes)                # the server
      # The same stream in pieces, never held whole:
      means = average_by_id(merge_chunks(messages, rng, T), shapes)

  What is simulated and what is not: the delays and the order of arrival. The
  channel draws the delays on the clients' behalf (one generator); that is the
  law of each client drawing its own, because all delays are independent of
  each other and of the reports. A client's own send schedule is the sub-stream
  of its messages. The anonymity of the channel itself (the paper's Tor / VPN /
  proxy) is assumed; this module does not model network metadata.

  Attributes:
    tensor_id: int32, index of the tensor in tf.nest.flatten order of the
      encoded structure (= tff.structure.flatten order of the value type).
    flat_index: int32 (int64 for tensors of 2^31 or more entries), index of
      the scalar in the row-major flattened tensor.
    value: the reported scalar (the dtype of the encoded tensors).
    send_time: float64 in [0, max_delay), when the message was sent (= when
      it arrives: the channel adds no other latency); None for messages not
      sent yet (the output of `split`).
  """

  __slots__ = ()

  def __len__(self):
    return len(self.value)

  @classmethod
  def _make(cls, iterable):
    # The named tuple's own _make (behind _replace) counts fields with len().
    fields = tuple(iterable)
    if tuple.__len__(fields) != len(cls._fields):
      raise TypeError(f'Messages has {len(cls._fields)} fields, got {fields}')
    return tuple.__new__(cls, fields)


def split(encoded) -> Messages:
  """Splits one client's encoded structure into its messages.

  Args:
    encoded: a structure (tf.nest) of encoded tensors or arrays; non-finite
      entries are "no report" and produce no message.

  Returns:
    The client's `Messages`, one per finite scalar, in (tensor_id, flat_index)
    order, with `send_time` None: the delays are drawn by `merge`. When every
    scalar is finite, `tensor_id` and `flat_index` are read-only arrays shared
    by all clients with the same tensor sizes.

  Raises:
    ValueError: `encoded` holds no tensor.
  """
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
  return Messages(tensor_id, flat_index, values)


@functools.lru_cache(maxsize=8)
def _ids(sizes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
  """(tensor_id, flat_index) of every scalar; cached: the same every round."""
  index_dtype = np.int64 if max(sizes) >= 2**31 else np.int32
  tensor_id = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
  flat_index = np.concatenate([np.arange(s, dtype=index_dtype) for s in sizes])
  tensor_id.flags.writeable = False
  flat_index.flags.writeable = False
  return tensor_id, flat_index


def merge(
    client_messages: Sequence[Messages],
    rng: RngLike,
    max_delay: float,
    chunk_size: Optional[int] = None,
) -> Messages:
  """All clients' messages in order of arrival (the server's view).

  Every message is sent after an independent U(0, max_delay) delay; the
  stream is drawn in law as below. The result is the concatenation of
  `merge_chunks` with the same arguments (same generator state, same
  chunk_size).

  How the stream is drawn: exactly in law, and without sorting. Let N be the
  number of messages of all clients and tau_1, ..., tau_N their delays, i.i.d.
  U(0, T). They are distinct with probability 1, so the order of arrival is a
  permutation Pi of the messages (Pi(k) = the k-th message to arrive) and the
  arrival times are the order statistics tau_(1) < ... < tau_(N).

  1. Pi is uniform over the N! permutations and independent of the arrival
     times. The joint density of (tau_1, ..., tau_N) is T^-N, unchanged by any
     reordering of its arguments, so for every permutation pi and every set A of
     increasing vectors

       P(Pi = pi, tau_() in A) = P(tau_pi(1) < ... < tau_pi(N),
                                   (tau_pi(1), ..., tau_pi(N)) in A)
                               = vol(A) / T^N = P(tau_() in A) / N!.

     The stream is therefore: all messages in a uniformly random order, the k-th
     one arriving at the k-th smallest of N independent U(0, T) draws, the order
     and the times independent. `merge` draws exactly this; it never sorts.
  2. Sorted uniforms from exponential spacings (Devroye 1986, Non-Uniform Random
     Variate Generation, Ch. V, Sec. 2): with E_1, ..., E_{N+1} i.i.d. Exp(1)
     and S_k = E_1 + ... + E_k,

       (T S_1 / S_{N+1}, ..., T S_N / S_{N+1}) ~ (tau_(1), ..., tau_(N)).

     In consecutive chunks of c_1, ..., c_J positions: the chunk sums
     G_j ~ Gamma(c_j) are independent, and given them the partial sums inside
     chunk j, divided by G_j, are those of c_j fresh Exp(1) divided by their own
     sum (for i.i.d. exponentials, E / sum(E) is Dirichlet and independent of
     sum(E)). So the G_j and E_{N+1} are drawn first and each chunk's times when
     the chunk is made. A clamp to the chunk's last time guards the order
     across chunks against rounding: the times are non-decreasing, exactly.
  3. A uniform permutation in chunks (Rao 1961; Sandelius 1962): give every
     message an independent uniform label in {0, ..., J-1}, put the messages
     with label j in chunk j (chunks in label order), and permute every chunk
     uniformly and independently (Fisher-Yates: `Generator.permutation`). For a
     fixed permutation pi and chunk sizes (c_1, ..., c_J), exactly one labelling
     puts every message in the chunk that pi needs, and then every chunk must
     get the matching order:

       P(pi) = sum over (c_1, ..., c_J) of J^-N prod_j 1 / c_j!,

     the same for every pi. The order of the messages inside a chunk before its
     permutation does not matter, so grouping by label is a stable radix sort
     of 8- or 16-bit labels, client by client.

  Args:
    client_messages: one `Messages` per client, from `split` (no send times).
    rng: a numpy Generator, or a seed for one (the channel's randomness).
    max_delay: T > 0, the largest delay.
    chunk_size: the work unit: the stream is drawn in J = ceil(N / chunk_size)
      chunks (at most 2^16) of random sizes, N / J on average. None: J =
      ceil(N / 2^16), at most 256.

  Returns:
    The merged `Messages`, `send_time` non-decreasing.

  Raises:
    ValueError: client_messages is empty or a single `Messages`, a client's
      fields differ in length or already have send times, max_delay is not
      positive and finite, or chunk_size is not positive.
    TypeError: a client's messages are not `Messages`, or chunk_size is not
      an integer.
  """
  plan = _Plan(client_messages, rng, max_delay, chunk_size)
  # The messages are grouped by chunk in the output itself, and every chunk
  # is then permuted in place: no memory for a second copy of the stream.
  out = plan.stage()
  send_time = np.empty(len(out), np.float64)
  for _ in plan.chunks(out, send_time):
    pass
  return out._replace(send_time=send_time)


def merge_chunks(
    client_messages: Sequence[Messages],
    rng: RngLike,
    max_delay: float,
    chunk_size: Optional[int] = None,
) -> Iterator[Messages]:
  """The stream of `merge`, as consecutive chunks of about chunk_size messages.

  The server can consume the stream without holding it whole (e.g.
  `average_by_id(merge_chunks(...), shapes)`); the clients' messages, grouped
  by chunk, are held until the last chunk. Arguments are checked at once.

  Args:
    client_messages: one `Messages` per client, from `split` (no send times).
    rng: a numpy Generator, or a seed for one (the channel's randomness).
    max_delay: T > 0, the largest delay.
    chunk_size: as in `merge`.

  Returns:
    An iterator of `Messages`, in order of arrival; empty chunks are skipped.
    The labels and chunk sums are drawn from `rng` at once, each chunk's
    permutation and times when the chunk is produced.

  Raises:
    As `merge`.
  """
  plan = _Plan(client_messages, rng, max_delay, chunk_size)
  return _chunks(plan)


def _chunks(plan: '_Plan') -> Iterator[Messages]:
  # A generator of its own, so that merge_chunks checks its arguments and
  # draws the labels at once, not at the first next().
  yield from plan.chunks(plan.stage())


class _Plan:
  """The channel's draws, and the chunks they make.

  At construction: the labels of all messages (step 3 of `merge`'s
  docstring), hence the chunk sizes and where every client's piece of every
  chunk goes, and the chunk sums of step 2. `stage` copies the messages into
  chunk order; `chunks` permutes each chunk and gives it its times.

  Cost: O(N) work, no Python loop per scalar (loops run over clients and
  chunks). Per message: a label; a stable radix-sort step, its inverse and three
  scatters that put the message in its chunk, reading its client's arrays in
  order; a Fisher-Yates step inside its chunk and three scatters; an
  exponential. The server's mean is a float64 `np.bincount` with weights over
  the key offset(tensor_id) + flat_index, in fixed-size pieces. Memory: `merge`
  groups the messages in its own output (20 bytes a message) and permutes every
  chunk there; `merge_chunks` groups them in a staging copy (12 bytes a message)
  and holds one chunk of the stream at a time; both keep a label per message (1
  or 2 bytes) until the messages are grouped.
  """

  def __init__(self, client_messages, rng, max_delay, chunk_size):
    if isinstance(client_messages, Messages) or not client_messages:
      raise ValueError(
          'client_messages must be a non-empty sequence of Messages, one per '
          'client'
      )
    client_messages = list(client_messages)
    for i, m in enumerate(client_messages):
      if not isinstance(m, Messages):
        raise TypeError(
            f'client_messages[{i}] must be Messages, got {type(m).__name__}'
        )
      if not len(m.tensor_id) == len(m.flat_index) == len(m.value):
        raise ValueError(
            f'client_messages[{i}] has fields of different lengths'
        )
      if m.send_time is not None:
        raise ValueError(
            f'client_messages[{i}] already has send times: merge takes the '
            'output of split'
        )
    if not (
        isinstance(max_delay, numbers.Real)
        and np.isfinite(max_delay)
        and max_delay > 0
    ):
      raise ValueError(f'max_delay must be > 0 and finite, got {max_delay}')
    if chunk_size is not None:
      if isinstance(chunk_size, bool) or not isinstance(
          chunk_size, numbers.Integral
      ):
        raise TypeError(
            f'chunk_size must be an integer or None, got {chunk_size!r}'
        )
      if chunk_size < 1:
        raise ValueError(f'chunk_size must be >= 1, got {chunk_size}')
    self._clients = client_messages
    self._rng = rng = np.random.default_rng(rng)
    n = sum(len(m) for m in client_messages)
    if chunk_size is None:
      j = min(max(1, -(-n // _MIN_AUTO_CHUNK)), _MAX_AUTO_CHUNKS)
    else:
      j = min(max(1, -(-n // int(chunk_size))), _MAX_CHUNKS)
    label_dtype = np.uint8 if j <= 2**8 else np.uint16
    # Step 3: a uniform label per message; chunk j = the messages labelled j.
    self._labels = [
        rng.integers(0, j, size=len(m), dtype=label_dtype)
        for m in client_messages
    ]
    self._piece_sizes = np.stack(
        [np.bincount(labels, minlength=j) for labels in self._labels]
    )  # [client, chunk]
    counts = self._piece_sizes.sum(axis=0)
    self._bounds = np.zeros(j + 1, np.int64)  # chunk j = [b_j, b_{j+1})
    np.cumsum(counts, out=self._bounds[1:])
    # Client u's piece of chunk j starts after the pieces of clients < u.
    self._piece_starts = self._bounds[:-1] + (
        np.cumsum(self._piece_sizes, axis=0) - self._piece_sizes
    )
    # Step 2: chunk sums G_j ~ Gamma(c_j), S_{N+1} = sum_j G_j + E_{N+1}.
    self._chunk_sums = rng.standard_gamma(counts.astype(np.float64))
    starts = np.zeros(j + 1, np.float64)
    np.cumsum(self._chunk_sums, out=starts[1:])
    self._time_scale = float(max_delay) / (
        starts[-1] + rng.standard_exponential()
    )
    self._scaled_starts = starts * self._time_scale

  def stage(self) -> Messages:
    """The messages grouped by chunk, in new arrays (send_time None)."""
    n = int(self._bounds[-1])
    staged = Messages(
        *(
            np.empty(n, np.result_type(*[getattr(m, f) for m in self._clients]))
            for f in ('tensor_id', 'flat_index', 'value')
        )
    )
    for u, m in enumerate(self._clients):
      labels, self._labels[u] = self._labels[u], None
      sizes = self._piece_sizes[u]
      # Where each message goes: its rank in its client's messages grouped by
      # label (a stable radix sort of 8- or 16-bit keys, inverted), shifted
      # from the client's group to the client's piece of the chunk. Then one
      # scatter per field, reading the client's arrays in order.
      order = np.argsort(labels, kind='stable')
      where = np.empty(len(labels), np.intp)
      where[order] = np.arange(len(labels))
      del order
      where += (self._piece_starts[u] - (np.cumsum(sizes) - sizes))[labels]
      for source, target in zip(m[:3], staged[:3]):
        target[where] = source
    return staged

  def chunks(
      self, staged: Messages, send_time: Optional[np.ndarray] = None
  ) -> Iterator[Messages]:
    """Permutes the staged chunks; with `send_time`, in place (see merge)."""
    rng = self._rng
    in_place = send_time is not None
    if in_place:
      largest = int(np.max(np.diff(self._bounds)))
      buffers = [np.empty(largest, f.dtype) for f in staged[:3]]
    for j in range(len(self._bounds) - 1):
      lo, hi = int(self._bounds[j]), int(self._bounds[j + 1])
      if hi == lo:
        continue
      # Step 3: the chunk in a uniformly random order (Fisher-Yates); the
      # staged message i goes to position perm[i] (a scatter: faster here
      # than the gather by perm).
      perm = rng.permutation(hi - lo)
      if in_place:
        fields = [f[lo:hi] for f in staged[:3]]
        for field, buffer in zip(fields, buffers):
          buffer = buffer[: hi - lo]
          buffer[perm] = field
          field[...] = buffer
        times = send_time[lo:hi]
      else:
        fields = [np.empty(hi - lo, f.dtype) for f in staged[:3]]
        for field, source in zip(fields, staged[:3]):
          field[perm] = source[lo:hi]
        times = np.empty(hi - lo, np.float64)
      del perm
      self._arrival_times(j, times)
      yield Messages(*fields, send_time=times)

  def _arrival_times(self, j: int, times: np.ndarray) -> None:
    """Fills `times` with chunk j's arrival times (step 2), in place."""
    # T S_k / S_{N+1} = scaled_start_j + (partial sum inside the chunk) *
    # G_j / (its last partial sum) * T / S_{N+1}.
    self._rng.standard_exponential(out=times)
    np.cumsum(times, out=times)
    times *= self._chunk_sums[j] * self._time_scale / times[-1]
    times += self._scaled_starts[j]
    # Rounding guard: never past the chunk's end, where the next one starts
    # (its times are that start plus non-negative terms).
    np.minimum(times, self._scaled_starts[j + 1], out=times)


def average_by_id(
    messages: Union[Messages, Iterable[Messages]],
    shapes: Sequence[Sequence[int]],
    dtype=None,
) -> list[np.ndarray]:
  """The server's mean of the received values of every (tensor_id, index).

  Equivalence with the factory: for the same encoded reports,
  `average_by_id(merge([split(r_u) for u], ...), shapes)` is the per-coordinate
  mean of `tff_priv.aggregators.ldp.ReportMeanFactory` (the mean that
  `LDPEncodeFactory` returns): a non-finite report is a message never sent, so
  coordinate j is averaged over the clients that reported it, and a coordinate
  nobody reported is 0. The only difference is rounding: this module sums in
  float64, TFF sums in the values' dtype.

  Args:
    messages: the received messages (any order): one `Messages`, or an
      iterable of them (e.g. `merge_chunks(...)`), consumed once.
    shapes: the shape of every tensor, in tensor_id order.
    dtype: dtype of the result; defaults to the dtype of the messages' values
      (float64 if the iterable is empty).

  Returns:
    One array per tensor: the mean of the values received for each
    coordinate (accumulated in float64), 0 where none was received.

  Raises:
    ValueError: a message names a tensor or index outside `shapes`.
    TypeError: messages is neither Messages nor an iterable of them.
  """
  if isinstance(messages, Messages):
    messages = [messages]
  elif not isinstance(messages, collections.abc.Iterable):
    raise TypeError(
        f'messages must be Messages or an iterable of them, got {messages!r}'
    )
  accumulator = _Accumulator(shapes)
  for chunk in messages:
    accumulator.add(chunk)
  return accumulator.means(dtype)


class _Accumulator:
  """Float64 sums and counts by key = offset(tensor_id) + flat_index.

  Messages are copied into fixed buffers of keys (intp) and values (float64),
  and every full buffer is counted with one pair of `np.bincount` calls: the
  cost per message does not depend on how the stream is cut, and bincount
  converts nothing.
  """

  def __init__(self, shapes):
    self._shapes = [tuple(int(d) for d in s) for s in shapes]
    sizes = [int(np.prod(s)) for s in self._shapes]
    self._offsets = np.zeros(len(sizes) + 1, np.intp)
    np.cumsum(sizes, out=self._offsets[1:])
    self._total = total = int(self._offsets[-1])
    self._sums = np.zeros(total, np.float64)
    self._counts = np.zeros(total, np.int64)
    self._keys = self._values = self._ends = None
    self._filled = 0
    self._value_dtype = None

  def add(self, messages: Messages) -> None:
    if self._value_dtype is None:
      self._value_dtype = messages.value.dtype
    n = len(messages)
    if n and self._keys is None:
      size = min(_AVERAGE_PIECE, max(n, 2**16))
      self._keys = np.empty(size, np.intp)
      self._values = np.empty(size, np.float64)
      self._ends = np.empty(size, np.intp)
    start = 0
    while start < n:
      stop = min(n, start + len(self._keys) - self._filled)
      self._put(
          messages.tensor_id[start:stop],
          messages.flat_index[start:stop],
          messages.value[start:stop],
      )
      start = stop
      if self._filled == len(self._keys):
        self._flush()

  def _put(self, tensor_id, flat_index, value) -> None:
    """Checks and copies one slice into the buffers."""
    if tensor_id.min() < 0 or tensor_id.max() >= len(self._offsets) - 1:
      raise ValueError('a message has a tensor_id outside shapes')
    lo, hi = self._filled, self._filled + len(value)
    keys, ends = self._keys[lo:hi], self._ends[lo:hi]
    # mode='clip': tensor_id is checked, and 'raise' would buffer `out`.
    np.take(self._offsets, tensor_id, out=keys, mode='clip')
    keys += flat_index
    np.take(self._offsets[1:], tensor_id, out=ends, mode='clip')
    if flat_index.min() < 0 or np.any(keys >= ends):
      raise ValueError('a message has a flat_index outside its tensor')
    self._values[lo:hi] = value
    self._filled = hi

  def _flush(self) -> None:
    n, self._filled = self._filled, 0
    if n:
      keys = self._keys[:n]
      self._sums += np.bincount(
          keys, weights=self._values[:n], minlength=self._total
      )
      self._counts += np.bincount(keys, minlength=self._total)

  def means(self, dtype=None) -> list[np.ndarray]:
    self._flush()
    means = np.divide(
        self._sums,
        self._counts,
        out=np.zeros(self._total, np.float64),
        where=self._counts > 0,
    )
    if dtype is None:
      dtype = np.float64 if self._value_dtype is None else self._value_dtype
    o = self._offsets
    return [
        means[o[i] : o[i + 1]].astype(dtype).reshape(s)
        for i, s in enumerate(self._shapes)
    ]
