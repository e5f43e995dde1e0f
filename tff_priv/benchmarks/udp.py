"""Times UDP's `GaussianUDPFactory` against TFF's DP-FedAvg aggregator."""

import collections
import dataclasses
from typing import Any, Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import runtime
from tff_priv.aggregators import udp as udp_aggregators
from tff_priv.benchmarks import harness

BASELINE = 'gaussian_fixed'
DRAWS = 'client_noise_draws'


@dataclasses.dataclass(frozen=True)
class Options:
  """What `run` times (the flags of scripts/benchmark_udp.py).

  Attributes:
    shapes: tensor shapes of one client update, 'AxB,C,...'
      (`harness.parse_shapes`); the default is UDP's MLP 784-256-10,
      d = 203,530.
    clients: K, clients per round (the paper's U = 50).
    noise_stddev: UDP's client noise std.
    repeats: timed rounds per process.
  """

  shapes: str = '784x256,256,256x10,10'
  clients: int = 50
  noise_stddev: float = 0.01
  repeats: int = 5


def run(
    options: Options, out: Callable[[str], Any] = print
) -> dict[str, list[float]]:
  """Times the processes on the same K client updates, side by side.

  `BASELINE`: `DifferentiallyPrivateFactory.gaussian_fixed` (clip, sum, one
  server-side noise draw); `udp_weighted` / `udp_unweighted`:
  `GaussianUDPFactory(noise_stddev=...)` (one noise draw per client, then the
  weighted / unweighted mean); and, as a floor, `DRAWS`: only the K x d
  standard normal draws client-side noise needs (`harness.noise_draws`),
  with no TFF in it. Each is warmed up once, then all are timed `repeats`
  times round-robin (`harness.round_robin`); the ratios are medians over the
  baseline's median. Each process's state is carried from round to round.

  Args:
    options: what to time.
    out: where the text goes (one call with the whole table).

  Returns:
    name -> the timed durations.
  """
  runtime.set_context()
  shapes = harness.parse_shapes(options.shapes)
  value_type = tff.StructWithPythonType(
      [tff.TensorType(np.float32, s) for s in shapes], list
  )
  weight_type = tff.TensorType(np.float32)
  k = options.clients
  processes = collections.OrderedDict(
      gaussian_fixed=(
          tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
              noise_multiplier=1.0, clients_per_round=k, clip=1.0
          ).create(value_type),
          False,
      ),
      udp_weighted=(
          udp_aggregators.GaussianUDPFactory(
              options.noise_stddev, sensitivity=1.0
          ).create(value_type, weight_type),
          True,
      ),
      udp_unweighted=(
          udp_aggregators.GaussianUDPFactory(
              options.noise_stddev,
              sensitivity=1.0,
              inner_agg_factory=tff.aggregators.UnweightedMeanFactory(),
          ).create(value_type),
          False,
      ),
  )
  rng = np.random.default_rng(0)
  values = [
      [rng.normal(size=s).astype(np.float32) * 1e-3 for s in shapes]
      for _ in range(k)
  ]
  weights = [float(w) for w in rng.integers(50, 150, size=k)]
  states = {name: p.initialize() for name, (p, _) in processes.items()}
  tensors = [[tf.constant(v) for v in value] for value in values]

  def next_round(name):
    process, weighted = processes[name]
    args = (
        (states[name], values, weights) if weighted else (states[name], values)
    )
    states[name] = process.next(*args).state

  calls = {name: lambda name=name: next_round(name) for name in processes}
  calls[DRAWS] = harness.noise_draws(tensors, options.noise_stddev)
  times = harness.round_robin(calls, options.repeats)
  out(
      format_report(
          times, sum(int(np.prod(s)) for s in shapes), k, options.repeats
      )
  )
  return times


def format_report(
    times: dict[str, list[float]], d: int, clients: int, repeats: int
) -> str:
  """Medians, ratios to `BASELINE` and the client-noise floor, as text."""
  base = harness.median(times[BASELINE])
  lines = [f'd = {d:,}, K = {clients}, repeats = {repeats} (median seconds)']
  for name, ts in times.items():
    median = harness.median(ts)
    lines.append(f'{name:18s} {median:8.3f} s   ratio {median / base:5.2f}x')
  floor = harness.floor(base, harness.median(times[DRAWS]))
  lines.append(
      f'floor for client-side noise (gaussian_fixed + the draws): '
      f'{floor:.2f}x'
  )
  return '\n'.join(lines)
