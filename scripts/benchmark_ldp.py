r"""Benchmarks LDP-FL's encoder, factory and split-and-shuffle transport.

Measures side by side, in one run, interleaving the contenders repeat by
repeat so that machine load affects both alike, and prints ratios of medians:

1. Client encode (`tff_priv.mechanisms.ldp_encode.encode`) of d values vs
   `tf.random.uniform` of the same size (target <= 1.5x), once with all
   values inside the range (fast path) and once with some values clipped
   (exact path: clipping and non-finite bookkeeping).
2. `LDPEncodeFactory` `next` with `clients` clients vs
   `tff.aggregators.UnweightedMeanFactory` on the same data (target <= 1.5x).
3. Split and shuffle of `transport_clients` clients' encoded values: split,
   merge (the whole stream in memory) and average by id, then the streaming
   path (average_by_id over merge_chunks, the stream never held whole); wall
   and CPU time and peak memory of each path (target: well under 30 s for 100
   clients x 1.66M values), and the means checked against the direct mean of
   the encoded values. With --transport_baseline, also the direct simulation
   (an independent U(0, T) delay per message, argsort) on the same messages,
   and the ratio.

The value structure is the McMahan et al. CNN (1,663,370 float32 parameters
in 8 tensors) unless --flat. Usage:

  python scripts/benchmark_ldp.py
  python scripts/benchmark_ldp.py --clients=10 --transport_clients=10
  # Part 3 alone (part 1 once, part 2 skipped):
  python scripts/benchmark_ldp.py --encode_repeats=1 --clients=0
"""

import gc
import os
import statistics
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import runtime
from tff_priv.aggregators import ldp_encode as aggregators
from tff_priv.mechanisms import ldp_encode
from tff_priv.mechanisms import split_shuffle

_FLAT = flags.DEFINE_bool(
    'flat', False, 'One float32 tensor of --d values instead of the CNN.'
)
_D = flags.DEFINE_integer('d', 1_663_370, 'Values per client with --flat.')
_EPSILON = flags.DEFINE_float('epsilon', 1.0, 'eps of the encoder.')
_RADIUS = flags.DEFINE_float('radius', 0.05, 'Range radius (center 0).')
_OUT_OF_RANGE = flags.DEFINE_float(
    'out_of_range_fraction',
    0.01,
    'Fraction of values outside the range in the clipped encode case.',
)
_ENCODE_REPEATS = flags.DEFINE_integer(
    'encode_repeats', 30, 'Timed repeats of each encode contender.'
)
_CLIENTS = flags.DEFINE_integer('clients', 100, 'Clients for the factory.')
_FACTORY_REPEATS = flags.DEFINE_integer(
    'factory_repeats', 3, 'Timed rounds of each factory.'
)
_TRANSPORT_CLIENTS = flags.DEFINE_integer(
    'transport_clients', 100, 'Clients for split and shuffle; 0 skips it.'
)
_MAX_DELAY = flags.DEFINE_float('max_delay', 10.0, 'T of the send delays.')
_CHUNK_SIZE = flags.DEFINE_integer(
    'transport_chunk_size',
    0,
    'chunk_size of merge / merge_chunks; 0 = their default.',
)
_TRANSPORT_BASELINE = flags.DEFINE_bool(
    'transport_baseline',
    False,
    'Also time the direct simulation (a U(0, T) delay per message, argsort); '
    'it needs about 50 bytes per message at its peak.',
)

# McMahan et al. (2017) CNN for 28x28x1 inputs: 1,663,370 parameters.
_CNN_SHAPES = (
    (5, 5, 1, 32), (32,), (5, 5, 32, 64), (64,),
    (3136, 512), (512,), (512, 10), (10,),
)  # pyformat: disable


def _shapes():
  return [(_D.value,)] if _FLAT.value else list(_CNN_SHAPES)


def _client_values(rng, shapes, radius):
  """Values inside [-radius, radius] (the in-range case)."""
  return [
      rng.uniform(-0.9 * radius, 0.9 * radius, size=s).astype(np.float32)
      for s in shapes
  ]


def _median_ratio(times_a, times_b):
  return statistics.median(times_a) / statistics.median(times_b)


def _fmt(times):
  return (
      f'median {statistics.median(times) * 1e3:9.2f} ms '
      f'(min {min(times) * 1e3:.2f}, max {max(times) * 1e3:.2f})'
  )


def _interleaved(fns, repeats):
  """{name: [seconds]} timing each fn once per repeat, in turn."""
  times = {name: [] for name in fns}
  for fn in fns.values():
    fn()  # warm-up (tracing, kernel caches)
  for _ in range(repeats):
    for name, fn in fns.items():
      start = time.perf_counter()
      fn()
      times[name].append(time.perf_counter() - start)
  return times


def bench_encode(d):
  """Part 1: encode vs tf.random.uniform on a flat tensor of d values."""
  eps, r = _EPSILON.value, _RADIUS.value
  rng = np.random.default_rng(0)
  inside = tf.constant(rng.uniform(-0.9 * r, 0.9 * r, d).astype(np.float32))
  clipped_np = inside.numpy().copy()
  idx = rng.choice(d, int(_OUT_OF_RANGE.value * d), replace=False)
  clipped_np[idx] *= 3.0 / 0.9
  clipped = tf.constant(clipped_np)

  @tf.function
  def uniform():
    return tf.random.uniform([d])

  @tf.function
  def encode(w):
    return ldp_encode.encode(w, 0.0, r, eps, ldp_encode.fresh_seed())

  times = _interleaved(
      {
          'tf.random.uniform': lambda: uniform().numpy(),
          'encode (in range)': lambda: encode(inside).encoded.numpy(),
          'encode (clipping)': lambda: encode(clipped).encoded.numpy(),
      },
      _ENCODE_REPEATS.value,
  )
  print(f'\n[1] client encode, d = {d}, eps = {eps}, '
        f'{_ENCODE_REPEATS.value} interleaved repeats')
  for name, t in times.items():
    print(f'  {name:22s} {_fmt(t)}')
  base = times['tf.random.uniform']
  for name in ('encode (in range)', 'encode (clipping)'):
    print(f'  ratio {name} / uniform: {_median_ratio(times[name], base):.2f}x'
          '  (target <= 1.5x)')


def bench_factory(shapes):
  """Part 2: LDPEncodeFactory.next vs UnweightedMeanFactory.next."""
  n = _CLIENTS.value
  value_type = tff.StructWithPythonType(
      [tff.TensorType(np.float32, s) for s in shapes], list
  )
  rng = np.random.default_rng(1)
  data = [_client_values(rng, shapes, _RADIUS.value) for _ in range(n)]
  mean = tff.aggregators.UnweightedMeanFactory().create(value_type)
  ldp = aggregators.LDPEncodeFactory(
      _EPSILON.value, radius=_RADIUS.value
  ).create(value_type)
  mean_state, ldp_state = mean.initialize(), ldp.initialize()
  times = _interleaved(
      {
          'UnweightedMeanFactory': lambda: mean.next(mean_state, data),
          'LDPEncodeFactory': lambda: ldp.next(ldp_state, data),
      },
      _FACTORY_REPEATS.value,
  )
  d = sum(int(np.prod(s)) for s in shapes)
  print(f'\n[2] factory next, {n} clients x d = {d} ({len(shapes)} tensors), '
        f'{_FACTORY_REPEATS.value} interleaved repeats')
  for name, t in times.items():
    print(f'  {name:22s} {_fmt(t)}')
  ratio = _median_ratio(
      times['LDPEncodeFactory'], times['UnweightedMeanFactory']
  )
  print(f'  ratio LDPEncodeFactory / UnweightedMeanFactory: {ratio:.2f}x'
        '  (target <= 1.5x)')


def _reset_peak_memory():
  """Resets the peak RSS of this process (Linux), if the kernel allows it."""
  try:
    with open('/proc/self/clear_refs', 'w') as f:
      f.write('5')
  except OSError:
    pass


def _peak_memory_gb():
  """Peak RSS (VmHWM) since the last reset, in GB; nan where unknown."""
  try:
    with open('/proc/self/status') as f:
      for line in f:
        if line.startswith('VmHWM:'):
          return int(line.split()[1]) * 1024 / 1e9
  except OSError:
    pass
  return float('nan')


def _direct_simulation(messages, rng, max_delay):
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


def bench_transport(shapes):
  """Part 3: split, merge and average_by_id, wall and CPU time, peak memory."""
  n = _TRANSPORT_CLIENTS.value
  rng = np.random.default_rng(2)
  encoded = []
  sums = [np.zeros(s, np.float64) for s in shapes]
  for u in range(n):
    values = _client_values(rng, shapes, _RADIUS.value)
    encoded.append([
        ldp_encode.encode(
            v, 0.0, _RADIUS.value, _EPSILON.value, tf.constant([u, l])
        ).encoded.numpy()
        for l, v in enumerate(values)
    ])
    for total, x in zip(sums, encoded[-1]):
      total += x
  # All reports are finite: the factory's mean is the plain mean.
  direct_mean = [total / n for total in sums]
  del sums
  timings = {}

  def timed(name, fn):
    gc.collect()
    _reset_peak_memory()
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    timings[name] = (
        time.perf_counter() - wall,
        time.process_time() - cpu,
        _peak_memory_gb(),
    )
    return result

  def split_all():
    messages = []
    for u in range(n):
      messages.append(split_shuffle.split(encoded[u]))
      encoded[u] = None  # keep memory down: the messages hold the values
    return messages

  def max_error(means):
    return max(float(np.max(np.abs(a - b))) for a, b in zip(means, direct_mean))

  chunk_size = _CHUNK_SIZE.value or None
  messages = timed('split (all clients)', split_all)
  merged = timed(
      'merge',
      lambda: split_shuffle.merge(messages, 3, _MAX_DELAY.value, chunk_size),
  )
  num_messages = len(merged)
  # float64 means: compared with the direct float64 mean below.
  means = timed(
      'average_by_id',
      lambda: split_shuffle.average_by_id(merged, shapes, np.float64),
  )
  del merged
  error_merged = max_error(means)
  streamed = timed(
      'streaming',
      lambda: split_shuffle.average_by_id(
          split_shuffle.merge_chunks(
              messages, 3, _MAX_DELAY.value, chunk_size
          ),
          shapes,
          np.float64,
      ),
  )
  error_streamed = max_error(streamed)
  same_stream = max(
      float(np.max(np.abs(a - b))) for a, b in zip(means, streamed)
  )
  del means, streamed
  if _TRANSPORT_BASELINE.value:
    baseline = timed(
        'direct simulation',
        lambda: _direct_simulation(
            messages, np.random.default_rng(4), _MAX_DELAY.value
        ),
    )
    timed(
        'average_by_id (baseline)',
        lambda: split_shuffle.average_by_id(baseline, shapes, np.float64),
    )
    del baseline

  d = sum(int(np.prod(s)) for s in shapes)
  print(f'\n[3] split and shuffle, {n} clients x d = {d} '
        f'= {num_messages:,} messages, chunk_size {chunk_size or "default"} '
        '(numpy, one '
        'thread: under load, CPU time is the better measure of the work; peak '
        'memory = peak RSS of the process during the step)')
  for name, (wall, cpu, peak) in timings.items():
    print(f'  {name:26s} wall {wall:8.2f} s   cpu {cpu:8.2f} s   '
          f'peak {peak:6.2f} GB')

  def total(names):
    wall = sum(timings[k][0] for k in names)
    cpu = sum(timings[k][1] for k in names)
    return wall, cpu

  paths = {
      'split+merge+average': ['split (all clients)', 'merge', 'average_by_id'],
      'split+streaming': ['split (all clients)', 'streaming'],
  }
  if _TRANSPORT_BASELINE.value:
    paths['split+direct+average'] = [
        'split (all clients)', 'direct simulation', 'average_by_id (baseline)'
    ]
  for name, names in paths.items():
    wall, cpu = total(names)
    print(f'  total {name:20s} wall {wall:8.2f} s   cpu {cpu:8.2f} s'
          '   (target: well under 30 s)')
  if _TRANSPORT_BASELINE.value:
    new, old = total(paths['split+merge+average']), total(
        paths['split+direct+average']
    )
    print(f'  ratio direct simulation / split+merge+average: wall '
          f'{old[0] / new[0]:.2f}x, cpu {old[1] / new[1]:.2f}x')
  print(f'  max |mean - direct mean of the reports|: merge {error_merged:.2e}, '
        f'streaming {error_streamed:.2e}; merge vs streaming (same seed, same '
        f'stream) {same_stream:.2e}')
  del messages


def main(argv):
  del argv
  runtime.set_context()
  print(f'load average at start: {os.getloadavg()} ({os.cpu_count()} cpus)')
  shapes = _shapes()
  d = sum(int(np.prod(s)) for s in shapes)
  print(f'setup: d = {d} float32 values per client, structure = '
        f'{"flat" if _FLAT.value else "McMahan CNN (8 tensors)"}, '
        f'eps = {_EPSILON.value}, range = [-{_RADIUS.value}, {_RADIUS.value}]')
  bench_encode(d)
  if _CLIENTS.value > 0:
    bench_factory(shapes)
    # The TFF worker holds the clients' data; free it for the transport.
    runtime.stop_workers()
    gc.collect()
  if _TRANSPORT_CLIENTS.value > 0:
    bench_transport(shapes)
  print(f'\nload average at end: {os.getloadavg()}')


if __name__ == '__main__':
  app.run(main)
