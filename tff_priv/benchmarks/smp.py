"""Times Fed-SMP's `SparsifiedSecureSumFactory` against DP-FedAvg's."""

import collections
import dataclasses
from typing import Any, Callable, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import runtime
from tff_priv import validation
from tff_priv.aggregators import smp as smp_aggregators
from tff_priv.benchmarks import harness
from tff_priv.mechanisms import smp as smp_mechanisms

BASELINE = 'gaussian_fixed'
VALUE_SOURCES = ('python', 'clients')
_DRAWS = 'client_noise_draws_'
# The McMahan CNN of the Fed-SMP paper (d = 1,663,370).
CNN_SHAPES = '5x5x1x32,32,5x5x32x64,64,3136x512,512,512x10,10'


@dataclasses.dataclass(frozen=True)
class Options:
  """What `run` times (the flags of scripts/benchmark_smp.py).

  Attributes:
    shapes: the tensor shapes of one client update, 'AxB,C,...'
      (`harness.parse_shapes`).
    clients: K, clients per round.
    noise_multiplier: sigma.
    clip: C, the L2 clip.
    compressions: p = k/d values for secure=False.
    secure_compressions: p = k/d values for secure=True.
    noise_free_rows: also time secure=False with sigma = 0 (rows *_sigma0),
      which shows how much of the time is the clients drawing their K x k
      Gaussians.
    repeats: timed rounds per process.
    value_sources: where the client updates come from, among `VALUE_SOURCES`
      (see `run`).
    update_scale: std of the synthetic update coordinates.
  """

  shapes: str = CNN_SHAPES
  clients: int = 100
  noise_multiplier: float = 1.0
  clip: float = 0.1
  compressions: Sequence[float] = (0.1, 1.0)
  secure_compressions: Sequence[float] = (0.1,)
  noise_free_rows: bool = True
  repeats: int = 3
  value_sources: Sequence[str] = VALUE_SOURCES
  update_scale: float = 1e-4

  def __post_init__(self):
    for source in self.value_sources:
      validation.one_of('value source', source, VALUE_SOURCES)


def run(options: Options, out: Callable[[str], Any] = print) -> None:
  """Times every process on each value source, printing a table per source.

  Processes, all on the same value type and K clients: `BASELINE`
  (`DifferentiallyPrivateFactory.gaussian_fixed`: clip, plain sum, server
  noise); `smp_plain_p<p>` (`SparsifiedSecureSumFactory(secure=False)`) for
  each p of `compressions`; `smp_secure_p<p>` (secure=True) for each p of
  `secure_compressions`; with `noise_free_rows`, `smp_plain_p<p>_sigma0`;
  and `client_noise_draws_p<p>`: only the K x k standard normal draws, timed
  alone (K calls of one tf.function, outside TFF), whose sum with the
  baseline is a reference point for noising every upload at its client (not
  a lower bound: it keeps gaussian_fixed's own d server draws, and K separate
  eager calls carry per-call overhead where TFF's clients may run
  concurrently).

  Value sources: 'python', `process.next(state, values)` with K numpy
  updates passed from Python (the transfer into TFF's worker is part of the
  time); 'clients', the updates made inside the computation at the clients
  from K integer seeds (a cheap fill), then `process.next`: the aggregation
  alone.

  Each process is warmed up once, then timed `repeats` times round-robin
  (`harness.round_robin`); the ratios are medians over the baseline's
  median.

  Args:
    options: what to time.
    out: where the text goes (one call per line or table).
  """
  runtime.set_context('simulation')
  shapes = harness.parse_shapes(options.shapes)
  value_type = tff.types.to_type(
      [tff.TensorType(np.float32, s) for s in shapes]
  )
  d = sum(int(np.prod(s)) for s in shapes)
  k_clients = options.clients
  out(
      f'd = {d}, K = {k_clients}, sigma = {options.noise_multiplier}, '
      f'C = {options.clip}, repeats = {options.repeats}'
  )
  processes = build_processes(options, value_type)
  states = {name: p.initialize() for name, p in processes.items()}
  for source in options.value_sources:
    if source == 'python':
      rng = np.random.default_rng(0)
      values = [
          [
              (options.update_scale * rng.standard_normal(s)).astype(np.float32)
              for s in shapes
          ]
          for _ in range(k_clients)
      ]
      calls = {
          name: lambda p=p, st=states[name], v=values: p.next(st, v)
          for name, p in processes.items()
      }
    else:
      seeds = list(range(k_clients))
      calls = {}
      for name, p in processes.items():
        run_process = _client_generated(
            p, value_type, shapes, options.update_scale
        )
        calls[name] = lambda r=run_process, st=states[name], s=seeds: r(st, s)
    calls.update(_noise_draw_calls(d, k_clients, options.compressions))
    times = harness.round_robin(calls, options.repeats)
    out(
        format_report(
            f'value_source={source}: seconds per round (median over '
            f'repeats) and ratio to {BASELINE}',
            times,
        )
    )
    if source == 'python':
      del values, calls


def build_processes(options: Options, value_type) -> dict[str, Any]:
  """name -> the aggregation process (`run` says which)."""
  k = options.clients
  out = collections.OrderedDict()
  out[BASELINE] = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
      options.noise_multiplier, float(k), options.clip
  ).create(value_type)
  sigma = options.noise_multiplier
  rows = [(False, float(p), sigma) for p in options.compressions]
  rows += [(True, float(p), sigma) for p in options.secure_compressions]
  if options.noise_free_rows:
    rows += [(False, float(p), 0.0) for p in options.compressions]
  for secure, p, row_sigma in rows:
    name = f'smp_{"secure" if secure else "plain"}_p{p:g}'
    if row_sigma == 0.0 and sigma != 0.0:
      name += '_sigma0'
    out[name] = smp_aggregators.SparsifiedSecureSumFactory(
        noise_multiplier=row_sigma,
        clip=options.clip,
        compression=p,
        expected_clients_per_round=k,
        secure=secure,
        mask_seed=0,
    ).create(value_type)
  return out


def _client_generated(process, value_type, shapes, scale):
  """next(state, updates generated at the clients from int32 seeds)."""

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
  def run_process(state, seeds):
    return process.next(state, tff.federated_map(make_update, seeds))

  return run_process


def _noise_draw_calls(d, k_clients, compressions):
  """The K x k standard normal draws alone, per p of `compressions`.

  Fed-SMP's noise is drawn on every client (K k normals per round) where
  gaussian_fixed draws d at the server.
  """
  calls = collections.OrderedDict()
  for p in compressions:
    k = int(smp_mechanisms.num_kept(d, float(p)))

    @tf.function
    def draw(k=k):
      return tf.random.normal([k])

    def draw_all(draw=draw):
      for _ in range(k_clients):
        draw().numpy()

    calls[f'{_DRAWS}p{float(p):g}'] = draw_all
  return calls


def format_report(title: str, times: dict[str, list[float]]) -> str:
  """A table of medians, minima and ratios to `BASELINE`, and the floors."""
  base = harness.median(times[BASELINE])
  floors = {
      name[len(_DRAWS) :]: harness.floor(base, harness.median(ts))
      for name, ts in times.items()
      if name.startswith(_DRAWS)
  }
  lines = [
      f'\n{title}',
      f'{"process":<22} {"median s":>9} {"min s":>8} {"ratio":>7}  all (s)',
  ]
  for name, ts in times.items():
    med = harness.median(ts)
    lines.append(
        f'{name:<22} {med:9.2f} {min(ts):8.2f} {med / base:6.2f}x  '
        + ', '.join(f'{t:.2f}' for t in ts)
    )
  for p, floor in floors.items():
    lines.append(
        f'{BASELINE} + the client noise draws at {p} timed alone: '
        f'{floor:.2f}x'
    )
  return '\n'.join(lines)
