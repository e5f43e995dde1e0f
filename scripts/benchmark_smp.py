r"""Times Fed-SMP's aggregation against DP-FedAvg's, side by side in one run.

Processes, all on the same value type (default: the McMahan CNN's 8 weight
tensors, d = 1,663,370) and K clients (`tff_priv.benchmarks.smp`, whose
`run` says what each one is):

* `gaussian_fixed`:
  `tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed`
  (DP-FedAvg: clip, plain sum, server noise), the baseline;
* `smp_plain_p<p>`: `SparsifiedSecureSumFactory(secure=False)` for each p in
  --compressions;
* `smp_secure_p<p>`: `SparsifiedSecureSumFactory(secure=True)` for each p in
  --secure_compressions;
* `client_noise_draws_p<p>`: only the K x k standard normal draws, timed
  alone, and gaussian_fixed + these draws: a reference point for the cost
  that noising every upload at its client adds to DP-FedAvg's server-noised
  round. The sigma0 rows (noise multiplier 0) show the rest of the
  aggregation without any draw.

Value sources (--value_source, both by default): `python` (K numpy updates
passed from Python to `process.next`) and `clients` (the updates made inside
the computation at the clients from K integer seeds: the aggregation alone).

Each process is warmed up once, then timed --repeats times, round-robin, so that
all processes see the same machine load; the ratios are medians over the
baseline's median. Targets from issue 7: smp_plain at p = 0.1 <= 1.0x and at
p = 1.0 <= 1.2x of gaussian_fixed.

    .venv/bin/python scripts/benchmark_smp.py --repeats=3
"""

import sys

from tff_priv import cli

cli.quiet(sys.argv)  # Before TensorFlow is imported.

# pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import app
from absl import flags

from tff_priv.benchmarks import smp

# pylint: enable=g-import-not-at-top,g-bad-import-order

_VERBOSE = cli.define_verbose()

# Value type.
_SHAPES = flags.DEFINE_string(
    'shapes',
    smp.CNN_SHAPES,
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
    'noise_free_rows',
    True,
    'Also time secure=False with sigma = 0 (rows *_sigma0), which shows how '
    'much of the time is the clients drawing their K x k Gaussians.',
)

# Measurement.
_REPEATS = flags.DEFINE_integer('repeats', 3, 'Timed rounds per process.')
_VALUE_SOURCE = flags.DEFINE_enum(
    'value_source',
    'both',
    list(smp.VALUE_SOURCES) + ['both'],
    'Where the client updates come from (see the module docstring).',
)
_UPDATE_SCALE = flags.DEFINE_float(
    'update_scale', 1e-4, 'Std of the synthetic update coordinates.'
)


def main(argv):
  del argv
  smp.run(
      smp.Options(
          shapes=_SHAPES.value,
          clients=_CLIENTS.value,
          noise_multiplier=_NOISE_MULTIPLIER.value,
          clip=_CLIP.value,
          compressions=tuple(float(p) for p in _COMPRESSIONS.value),
          secure_compressions=tuple(
              float(p) for p in _SECURE_COMPRESSIONS.value
          ),
          noise_free_rows=_NOISE_FREE_ROWS.value,
          repeats=_REPEATS.value,
          value_sources=(
              smp.VALUE_SOURCES
              if _VALUE_SOURCE.value == 'both'
              else (_VALUE_SOURCE.value,)
          ),
          update_scale=_UPDATE_SCALE.value,
      )
  )


if __name__ == '__main__':
  app.run(main)
