r"""Times Fed-SMP's aggregation against DP-FedAvg's, side by side in one run.

Processes, all on the same value type (default: the McMahan CNN's 8 weight
tensors, d = 1,663,370) and K clients:

* `gaussian_fixed`: `tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed`
  (DP-FedAvg: clip, plain sum, server noise), the baseline;
* `smp_plain_p<p>`: `SparsifiedSecureSumFactory(secure=False)` for each p in
  --compressions;
* `smp_secure_p<p>`: `SparsifiedSecureSumFactory(secure=True)` for each p in
  --secure_compressions;
* `client_noise_draws_p<p>`: only the K x k standard normal draws, timed
  alone (K calls of one tf.function, outside TFF), and gaussian_fixed + these
  draws: a reference point for the cost that noising every upload at its
  client adds to DP-FedAvg's server-noised round. Not a lower bound: it keeps
  gaussian_fixed's own d server draws, and K separate eager calls carry
  per-call overhead where TFF's clients may run concurrently. The sigma0 rows
  (noise multiplier 0) show the rest of the aggregation without any draw.

Value sources (--value_source, both by default):

* `python`: `process.next(state, values)` with K numpy updates passed from
  Python (what a simulation loop does; the transfer of K d-vectors into TFF's
  worker is part of the time);
* `clients`: the updates are made inside the computation at the clients from
  K integer seeds (a cheap fill), then `process.next` runs: the aggregation
  alone, as in a learning process where client training makes the update.

Each process is warmed up once, then timed --repeats times, round-robin, so that
all processes see the same machine load; the ratios are medians over the
baseline's median. Targets from issue 7: smp_plain at p = 0.1 <= 1.0x and at
p = 1.0 <= 1.2x of gaussian_fixed.

    .venv/bin/python scripts/benchmark_smp.py --repeats=3
"""

import collections
import statistics
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import runtime
from tff_priv.aggregators import sparsified_secure_sum
from tff_priv.mechanisms import sparsify

# Value type.
_SHAPES = flags.DEFINE_string(
    'shapes',
    '5x5x1x32,32,5x5x32x64,64,3136x512,512,512x10,10',
    'Comma-separated tensor shapes (dims joined by x) of one client update; '
    'the default is the McMahan CNN of the Fed-SMP paper (d = 1,663,370).',
)
_CLIENTS = flags.DEFINE_integer('clients', 100, 'K, clients per round.')

# Mechanism.
_NOISE_MULTIPLIER = flags.DEFINE_float('noise_multiplier', 1.0, 'sigma.')
_CLIP = flags.DEFINE_float('clip', 0.1, 'C, the L2 clip.')
_COMPRESSIONS = flags.DEFINE_list(
    'compressions', ['0.1', '1.0'], 'p = k/d values for secure=False.'
)
_SECURE_COMPRESSIONS = flags.DEFINE_list(
    'secure_compressions', ['0.1'], 'p = k/d values for secure=True.'
)
_NOISE_FREE_ROWS = flags.DEFINE_bool(
    'noise_free_rows', True,
    'Also time secure=False with sigma = 0 (rows *_sigma0), which shows how '
    'much of the time is the clients drawing their K x k Gaussians.',
)

# Measurement.
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed rounds per process.')
_VALUE_SOURCE = flags.DEFINE_enum(
    'value_source', 'both', ['python', 'clients', 'both'],
    'Where the client updates come from (see the module docstring).',
)
_UPDATE_SCALE = flags.DEFINE_float(
    'update_scale', 1e-4, 'Std of the synthetic update coordinates.'
)


def _shapes():
  return [[int(x) for x in s.split('x')] for s in _SHAPES.value.split(',')]


def _processes(value_type):
  k = _CLIENTS.value
  out = collections.OrderedDict()
  out['gaussian_fixed'] = (
      tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
          _NOISE_MULTIPLIER.value, float(k), _CLIP.value
      ).create(value_type)
  )
  rows = [(False, float(p), _NOISE_MULTIPLIER.value) for p in _COMPRESSIONS.value]
  rows += [(True, float(p), _NOISE_MULTIPLIER.value) for p in _SECURE_COMPRESSIONS.value]
  if _NOISE_FREE_ROWS.value:
    rows += [(False, float(p), 0.0) for p in _COMPRESSIONS.value]
  for secure, p, sigma in rows:
    name = f'smp_{"secure" if secure else "plain"}_p{p:g}'
    if sigma == 0.0 and _NOISE_MULTIPLIER.value != 0.0:
      name += '_sigma0'
    out[name] = sparsified_secure_sum.SparsifiedSecureSumFactory(
        noise_multiplier=sigma,
        clip=_CLIP.value,
        compression=p,
        expected_clients_per_round=k,
        secure=secure,
        mask_seed=0,
    ).create(value_type)
  return out


def _client_generated(process, value_type, shapes):
  """next(state, updates generated at the clients from int32 seeds)."""
  scale = _UPDATE_SCALE.value

  @tff.tensorflow.computation(np.int32)
  def make_update(seed):
    # Cheap to make (a fill), so that the time is the aggregation's; the
    # values do not change the work of either aggregator.
    return [
        tf.fill(s, scale * tf.cast(seed + i + 1, tf.float32))
        for i, s in enumerate(shapes)
    ]

  assert make_update.type_signature.result.is_equivalent_to(value_type)

  @tff.federated_computation(
      process.initialize.type_signature.result,
      tff.FederatedType(np.int32, tff.CLIENTS),
  )
  def run(state, seeds):
    return process.next(state, tff.federated_map(make_update, seeds))

  return run


def _noise_draw_calls(d, k_clients):
  """The K x k standard normal draws alone, per p of --compressions.

  Fed-SMP's noise is drawn on every client (K k normals per round) where
  gaussian_fixed draws d at the server.
  """
  calls = collections.OrderedDict()
  for p in _COMPRESSIONS.value:
    k = int(sparsify.num_kept(d, float(p)))

    @tf.function
    def draw(k=k):
      return tf.random.normal([k])

    def draw_all(draw=draw):
      for _ in range(k_clients):
        draw().numpy()

    calls[f'client_noise_draws_p{float(p):g}'] = draw_all
  return calls


def _time(fn, *args):
  start = time.perf_counter()
  fn(*args)
  return time.perf_counter() - start


def _report(title, times):
  base = statistics.median(times['gaussian_fixed'])
  floors = {
      name[len('client_noise_draws_'):]: (base + statistics.median(ts)) / base
      for name, ts in times.items()
      if name.startswith('client_noise_draws_')
  }
  print(f'\n{title}')
  print(f'{"process":<22} {"median s":>9} {"min s":>8} {"ratio":>7}  all (s)')
  for name, ts in times.items():
    med = statistics.median(ts)
    print(
        f'{name:<22} {med:9.2f} {min(ts):8.2f} {med / base:6.2f}x  '
        + ', '.join(f'{t:.2f}' for t in ts)
    )
  for p, floor in floors.items():
    print(f'gaussian_fixed + the client noise draws at {p} timed alone: '
          f'{floor:.2f}x')


def main(argv):
  del argv
  runtime.set_context('simulation')
  shapes = _shapes()
  value_type = tff.types.to_type(
      [tff.TensorType(np.float32, s) for s in shapes]
  )
  d = sum(int(np.prod(s)) for s in shapes)
  k_clients = _CLIENTS.value
  print(
      f'd = {d}, K = {k_clients}, sigma = {_NOISE_MULTIPLIER.value}, '
      f'C = {_CLIP.value}, repeats = {_REPEATS.value}'
  )
  processes = _processes(value_type)
  states = {name: p.initialize() for name, p in processes.items()}

  sources = (
      ['python', 'clients']
      if _VALUE_SOURCE.value == 'both'
      else [_VALUE_SOURCE.value]
  )
  for source in sources:
    if source == 'python':
      rng = np.random.default_rng(0)
      values = [
          [(_UPDATE_SCALE.value * rng.standard_normal(s)).astype(np.float32)
           for s in shapes]
          for _ in range(k_clients)
      ]
      calls = {
          name: (lambda p=p, st=states[name]: p.next(st, values))
          for name, p in processes.items()
      }
    else:
      seeds = list(range(k_clients))
      calls = {}
      for name, p in processes.items():
        run = _client_generated(p, value_type, shapes)
        calls[name] = lambda run=run, st=states[name]: run(st, seeds)
    draws = _noise_draw_calls(d, k_clients)
    calls.update(draws)
    for name, call in calls.items():  # warm-up: tracing, compilation
      call()
    times = {name: [] for name in calls}
    for _ in range(_REPEATS.value):
      for name, call in calls.items():
        times[name].append(_time(call))
    _report(
        f'value_source={source}: seconds per round (median over repeats) and '
        'ratio to gaussian_fixed',
        times,
    )
    if source == 'python':
      del values, calls


if __name__ == '__main__':
  app.run(main)
