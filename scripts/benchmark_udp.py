r"""Times GaussianUDPFactory against TFF's DP-FedAvg aggregator, in one run.

Both processes aggregate the same K client updates of the same value type
(default: UDP's MLP 784-256-10, d = 203,530, K = 50 clients as the paper's U):

* `gaussian_fixed`: `tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed`
  (clip, sum, one server-side noise draw), the baseline;
* `udp_weighted` / `udp_unweighted`: `GaussianUDPFactory(noise_stddev=...)`
  (one noise draw per client, then the weighted / unweighted mean).

and, as a floor, `client_noise_draws`: only the K x d standard normal draws
that client-side noise needs (one `tf.function` drawing d normals and adding
them to an update, run K times), with no TFF in it. The UDP mechanism puts the
noise on each client's upload, so these draws are part of its cost by
definition; `gaussian_fixed` draws d normals once, at the server.

Each process is warmed up once, then the processes are timed --repeats times
round-robin, so all see the same machine load; the printed ratios are medians
over the baseline's median. Issue 6's target: udp <= 1.1x gaussian_fixed.

    .venv/bin/python scripts/benchmark_udp.py --repeats=5
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
from tff_priv.aggregators import gaussian_udp
from tff_priv.mechanisms import gaussian

_SHAPES = flags.DEFINE_string(
    'shapes', '784x256,256,256x10,10',
    'Comma-separated tensor shapes (dims joined by x) of one client update.',
)
_CLIENTS = flags.DEFINE_integer('clients', 50, 'K, clients per round.')
_NOISE = flags.DEFINE_float('noise_stddev', 0.01, 'UDP client noise std.')
_REPEATS = flags.DEFINE_integer('repeats', 5, 'Timed rounds per process.')


def main(argv):
  del argv
  runtime.set_context()
  shapes = [[int(x) for x in s.split('x')] for s in _SHAPES.value.split(',')]
  value_type = tff.StructWithPythonType(
      [tff.TensorType(np.float32, s) for s in shapes], list
  )
  weight_type = tff.TensorType(np.float32)
  k = _CLIENTS.value
  processes = collections.OrderedDict(
      gaussian_fixed=(
          tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
              noise_multiplier=1.0, clients_per_round=k, clip=1.0
          ).create(value_type),
          False,
      ),
      udp_weighted=(
          gaussian_udp.GaussianUDPFactory(_NOISE.value, sensitivity=1.0).create(
              value_type, weight_type
          ),
          True,
      ),
      udp_unweighted=(
          gaussian_udp.GaussianUDPFactory(
              _NOISE.value,
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

  @tf.function
  def draw(update):
    return gaussian.add_gaussian_noise(update, _NOISE.value)

  def draws_only():
    start = time.perf_counter()
    for update in tensors:
      draw(update)
    return time.perf_counter() - start

  def run(name):
    if name == 'client_noise_draws':
      return draws_only()
    process, weighted = processes[name]
    args = (states[name], values, weights) if weighted else (states[name], values)
    start = time.perf_counter()
    states[name] = process.next(*args).state
    return time.perf_counter() - start

  names = list(processes) + ['client_noise_draws']
  for name in names:  # Warm-up: compilation and worker start.
    run(name)
  times = collections.defaultdict(list)
  for _ in range(_REPEATS.value):
    for name in names:
      times[name].append(run(name))
  d = sum(int(np.prod(s)) for s in shapes)
  base = statistics.median(times['gaussian_fixed'])
  print(f'd = {d:,}, K = {k}, repeats = {_REPEATS.value} (median seconds)')
  for name, ts in times.items():
    median = statistics.median(ts)
    print(f'{name:18s} {median:8.3f} s   ratio {median / base:5.2f}x')
  floor = (base + statistics.median(times['client_noise_draws'])) / base
  print(f'floor for client-side noise (gaussian_fixed + the draws): '
        f'{floor:.2f}x')


if __name__ == '__main__':
  app.run(main)
