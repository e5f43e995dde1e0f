"""Times LDP-FL's encoder, its factory and the split-and-shuffle transport."""

import dataclasses
import gc
import os
from typing import Any, Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import runtime
from tff_priv.aggregators import ldp as ldp_aggregators
from tff_priv.benchmarks import harness
from tff_priv.mechanisms import ldp as ldp_mechanisms
from tff_priv.mechanisms import split_shuffle

# McMahan et al. (2017) CNN for 28x28x1 inputs: 1,663,370 parameters.
CNN_SHAPES = (
    (5, 5, 1, 32),
    (32,),
    (5, 5, 32, 64),
    (64,),
    (3136, 512),
    (512,),
    (512, 10),
    (10,),
)  # pyformat: disable


@dataclasses.dataclass(frozen=True)
class Options:
  """What `run` measures (the flags of scripts/benchmark_ldp.py).

  Attributes:
    flat: one float32 tensor of `d` values instead of the CNN's 8 tensors
      (`CNN_SHAPES`, d = 1,663,370).
    d: values per client with `flat`.
    epsilon: eps of the encoder.
    radius: the range's radius (center 0).
    out_of_range_fraction: fraction of values outside the range in the
      clipped encode case.
    encode_repeats: timed repeats of each encode contender (part 1).
    clients: clients of the factory (part 2); 0 skips it.
    factory_repeats: timed rounds of each factory.
    transport_clients: clients of split and shuffle (part 3); 0 skips it.
    max_delay: T of the send delays.
    chunk_size: chunk_size of merge / merge_chunks; 0: their default.
    transport_baseline: also time the direct simulation (a U(0, T) delay per
      message, argsort); it needs about 50 bytes per message at its peak.
  """

  flat: bool = False
  d: int = 1_663_370
  epsilon: float = 1.0
  radius: float = 0.05
  out_of_range_fraction: float = 0.01
  encode_repeats: int = 30
  clients: int = 100
  factory_repeats: int = 3
  transport_clients: int = 100
  max_delay: float = 10.0
  chunk_size: int = 0
  transport_baseline: bool = False

  @property
  def shapes(self) -> list[tuple[int, ...]]:
    return [(self.d,)] if self.flat else list(CNN_SHAPES)


def run(options: Options, out: Callable[[str], Any] = print) -> None:
  """Measures the three parts side by side, printing each as it is done.

  1. Client encode (`tff_priv.mechanisms.ldp.encode`) of d values vs
     `tf.random.uniform` of the same size (target <= 1.5x), once with all
     values inside the range (fast path) and once with some values clipped
     (exact path).
  2. `LDPEncodeFactory.next` with `clients` clients vs
     `tff.aggregators.UnweightedMeanFactory` on the same data (target
     <= 1.5x).
  3. Split and shuffle of `transport_clients` clients' encoded values: split,
     merge and average by id, then the streaming path (average_by_id over
     merge_chunks); wall and CPU time and peak memory of each step (target:
     well under 30 s for 100 clients x 1.66M values), the means checked
     against the direct mean of the encoded values; with
     `transport_baseline`, also the direct simulation and the ratio.

  Parts 1 and 2 time their contenders round-robin (`harness.round_robin`),
  ratios of medians.

  Args:
    options: what to measure.
    out: where the text goes (one call per line or block).
  """
  runtime.set_context()
  out(f'load average at start: {os.getloadavg()} ({os.cpu_count()} cpus)')
  shapes = options.shapes
  d = sum(int(np.prod(s)) for s in shapes)
  out(
      f'setup: d = {d} float32 values per client, structure = '
      f'{"flat" if options.flat else "McMahan CNN (8 tensors)"}, '
      f'eps = {options.epsilon}, range = [-{options.radius}, {options.radius}]'
  )
  out(bench_encode(options, d))
  if options.clients > 0:
    out(bench_factory(options, shapes))
    # The TFF worker holds the clients' data; free it for the transport.
    runtime.stop_workers()
    gc.collect()
  if options.transport_clients > 0:
    out(bench_transport(options, shapes))
  out(f'\nload average at end: {os.getloadavg()}')


def _client_values(rng, shapes, radius):
  """Values inside [-radius, radius] (the in-range case)."""
  return [
      rng.uniform(-0.9 * radius, 0.9 * radius, size=s).astype(np.float32)
      for s in shapes
  ]


def bench_encode(options: Options, d: int) -> str:
  """Part 1: encode vs tf.random.uniform on a flat tensor of d values (text)."""
  eps, r = options.epsilon, options.radius
  rng = np.random.default_rng(0)
  inside = tf.constant(rng.uniform(-0.9 * r, 0.9 * r, d).astype(np.float32))
  clipped_np = inside.numpy().copy()
  idx = rng.choice(d, int(options.out_of_range_fraction * d), replace=False)
  clipped_np[idx] *= 3.0 / 0.9
  clipped = tf.constant(clipped_np)

  @tf.function
  def uniform():
    return tf.random.uniform([d])

  @tf.function
  def encode(w):
    return ldp_mechanisms.encode(w, 0.0, r, eps, ldp_mechanisms.fresh_seed())

  times = harness.round_robin(
      {
          'tf.random.uniform': lambda: uniform().numpy(),
          # A lambda: each call encodes again (what is timed).
          'encode (in range)': lambda: encode(inside).encoded.numpy(),  # noqa: PLW0108
          'encode (clipping)': lambda: encode(clipped).encoded.numpy(),  # noqa: PLW0108
      },
      options.encode_repeats,
  )
  lines = [
      f'\n[1] client encode, d = {d}, eps = {eps}, '
      f'{options.encode_repeats} interleaved repeats'
  ]
  for name, t in times.items():
    lines.append(f'  {name:22s} {harness.format_seconds(t)}')
  base = times['tf.random.uniform']
  for name in ('encode (in range)', 'encode (clipping)'):
    lines.append(
        f'  ratio {name} / uniform: {harness.ratio(times[name], base):.2f}x'
        '  (target <= 1.5x)'
    )
  return '\n'.join(lines)


def bench_factory(options: Options, shapes) -> str:
  """Part 2: LDPEncodeFactory.next vs UnweightedMeanFactory.next (text)."""
  n = options.clients
  value_type = tff.StructWithPythonType(
      [tff.TensorType(np.float32, s) for s in shapes], list
  )
  rng = np.random.default_rng(1)
  data = [_client_values(rng, shapes, options.radius) for _ in range(n)]
  mean = tff.aggregators.UnweightedMeanFactory().create(value_type)
  ldp = ldp_aggregators.LDPEncodeFactory(
      options.epsilon, radius=options.radius
  ).create(value_type)
  mean_state, ldp_state = mean.initialize(), ldp.initialize()
  times = harness.round_robin(
      {
          'UnweightedMeanFactory': lambda: mean.next(mean_state, data),
          'LDPEncodeFactory': lambda: ldp.next(ldp_state, data),
      },
      options.factory_repeats,
  )
  d = sum(int(np.prod(s)) for s in shapes)
  lines = [
      f'\n[2] factory next, {n} clients x d = {d} ({len(shapes)} '
      f'tensors), {options.factory_repeats} interleaved repeats'
  ]
  for name, t in times.items():
    lines.append(f'  {name:22s} {harness.format_seconds(t)}')
  ratio = harness.ratio(
      times['LDPEncodeFactory'], times['UnweightedMeanFactory']
  )
  lines.append(
      f'  ratio LDPEncodeFactory / UnweightedMeanFactory: '
      f'{ratio:.2f}x  (target <= 1.5x)'
  )
  return '\n'.join(lines)


def direct_simulation(messages, rng, max_delay) -> split_shuffle.Messages:
  """The transport as the paper states it: a U(0, T) delay per message, sort.

  The reference the O(N) draw of `split_shuffle.merge` is measured against.
  """
  tensor_id, flat_index, value = (
      np.concatenate([getattr(m, f) for m in messages])
      for f in ('tensor_id', 'flat_index', 'value')
  )
  send_time = rng.uniform(0.0, max_delay, size=len(value))
  order = np.argsort(send_time)
  return split_shuffle.Messages(
      tensor_id[order], flat_index[order], value[order], send_time[order]
  )


def bench_transport(options: Options, shapes) -> str:
  """Part 3: split, merge and average_by_id: wall and CPU time, peak memory.

  Each step is run once (`harness.timed_step`). Returns the text.
  """
  encoded, direct_mean = _encoded_reports(options, shapes)
  costs, num_messages, errors = _time_transport(
      options, shapes, encoded, direct_mean
  )
  return _transport_text(options, shapes, costs, num_messages, errors)


def _encoded_reports(options: Options, shapes):
  """Every client's encoded values, and their direct (float64) mean."""
  n = options.transport_clients
  rng = np.random.default_rng(2)
  encoded = []
  sums = [np.zeros(s, np.float64) for s in shapes]
  for u in range(n):
    values = _client_values(rng, shapes, options.radius)
    encoded.append(
        [
            ldp_mechanisms.encode(
                v, 0.0, options.radius, options.epsilon, tf.constant([u, l])
            ).encoded.numpy()
            for l, v in enumerate(values)
        ]
    )
    for total, x in zip(sums, encoded[-1]):
      total += x
  # All reports are finite: the factory's mean is the plain mean.
  direct_mean = [total / n for total in sums]
  del sums
  return encoded, direct_mean


def _time_transport(options: Options, shapes, encoded, direct_mean):
  """Times each step once: (costs by step, messages, the means' errors).

  The split consumes `encoded` (each client's entry becomes None), and every
  step's output is freed as soon as the next steps no longer need it.
  """
  n = options.transport_clients
  costs = {}

  def timed(name, fn):
    result, costs[name] = harness.timed_step(fn)
    return result

  def split_all():
    messages = []
    for u in range(n):
      messages.append(split_shuffle.split(encoded[u]))
      encoded[u] = None  # keep memory down: the messages hold the values
    return messages

  def max_error(means):
    return max(float(np.max(np.abs(a - b))) for a, b in zip(means, direct_mean))

  chunk_size = options.chunk_size or None
  max_delay = options.max_delay
  messages = timed('split (all clients)', split_all)
  merged = timed(
      'merge',
      lambda: split_shuffle.merge(messages, 3, max_delay, chunk_size),
  )
  num_messages = len(merged)
  # float64 means: compared with the direct float64 mean below.
  means = timed(
      'average_by_id',
      lambda: split_shuffle.average_by_id(merged, shapes, np.float64),
  )
  merged = None  # Free it before the streaming path.
  error_merged = max_error(means)
  streamed = timed(
      'streaming',
      lambda: split_shuffle.average_by_id(
          split_shuffle.merge_chunks(messages, 3, max_delay, chunk_size),
          shapes,
          np.float64,
      ),
  )
  error_streamed = max_error(streamed)
  same_stream = max(
      float(np.max(np.abs(a - b))) for a, b in zip(means, streamed)
  )
  del means, streamed
  if options.transport_baseline:
    baseline = timed(
        'direct simulation',
        lambda: direct_simulation(
            messages, np.random.default_rng(4), max_delay
        ),
    )
    timed(
        'average_by_id (baseline)',
        lambda: split_shuffle.average_by_id(baseline, shapes, np.float64),
    )
    baseline = None
  return costs, num_messages, (error_merged, error_streamed, same_stream)


def _transport_text(options: Options, shapes, costs, num_messages, errors):
  """Part 3's text: each step's cost, the paths' totals, the means' errors."""
  error_merged, error_streamed, same_stream = errors
  n = options.transport_clients
  chunk_size = options.chunk_size or None
  d = sum(int(np.prod(s)) for s in shapes)
  lines = [
      f'\n[3] split and shuffle, {n} clients x d = {d} '
      f'= {num_messages:,} messages, chunk_size {chunk_size or "default"} '
      '(numpy, one thread: under load, CPU time is the better measure of the '
      'work; peak memory = peak RSS of the process during the step)'
  ]
  for name, cost in costs.items():
    lines.append(
        f'  {name:26s} wall {cost.wall:8.2f} s   cpu {cost.cpu:8.2f} '
        f's   peak {cost.peak_gb:6.2f} GB'
    )

  def total(names):
    return (sum(costs[k].wall for k in names), sum(costs[k].cpu for k in names))

  paths = {
      'split+merge+average': ['split (all clients)', 'merge', 'average_by_id'],
      'split+streaming': ['split (all clients)', 'streaming'],
  }
  if options.transport_baseline:
    paths['split+direct+average'] = [
        'split (all clients)',
        'direct simulation',
        'average_by_id (baseline)',
    ]
  for name, names in paths.items():
    wall, cpu = total(names)
    lines.append(
        f'  total {name:20s} wall {wall:8.2f} s   cpu {cpu:8.2f} s'
        '   (target: well under 30 s)'
    )
  if options.transport_baseline:
    new = total(paths['split+merge+average'])
    old = total(paths['split+direct+average'])
    lines.append(
        f'  ratio direct simulation / split+merge+average: wall '
        f'{old[0] / new[0]:.2f}x, cpu {old[1] / new[1]:.2f}x'
    )
  lines.append(
      f'  max |mean - direct mean of the reports|: merge {error_merged:.2e}, '
      f'streaming {error_streamed:.2e}; merge vs streaming (same seed, same '
      f'stream) {same_stream:.2e}'
  )
  return '\n'.join(lines)
