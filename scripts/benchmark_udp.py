r"""Times GaussianUDPFactory against TFF's DP-FedAvg aggregator, in one run.

Both processes aggregate the same K client updates of the same value type
(default: UDP's MLP 784-256-10, d = 203,530, K = 50 clients as the paper's U;
`tff_priv.benchmarks.udp`):

* `gaussian_fixed`:
  `tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed`
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

import sys

from tff_priv import cli

cli.quiet(sys.argv)  # Before TensorFlow is imported.

# pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import app
from absl import flags

from tff_priv.benchmarks import udp

# pylint: enable=g-import-not-at-top,g-bad-import-order

_VERBOSE = cli.define_verbose()
_SHAPES = flags.DEFINE_string(
    'shapes',
    udp.Options.shapes,
    'Comma-separated tensor shapes (dims joined by x) of one client update.',
)
_CLIENTS = flags.DEFINE_integer('clients', 50, 'K, clients per round.')
_NOISE = flags.DEFINE_float('noise_stddev', 0.01, 'UDP client noise std.')
_REPEATS = flags.DEFINE_integer('repeats', 5, 'Timed rounds per process.')


def main(argv):
  del argv
  udp.run(
      udp.Options(
          shapes=_SHAPES.value,
          clients=_CLIENTS.value,
          noise_stddev=_NOISE.value,
          repeats=_REPEATS.value,
      )
  )


if __name__ == '__main__':
  app.run(main)
