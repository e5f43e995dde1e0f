r"""Benchmarks LDP-FL's encoder, factory and split-and-shuffle transport.

Measures side by side, in one run, interleaving the contenders repeat by
repeat so that machine load affects both alike, and prints ratios of medians
(`tff_priv.benchmarks.ldp`, whose `run` says what each part measures):

1. Client encode of d values vs `tf.random.uniform` of the same size
   (target <= 1.5x), in range and with some values clipped.
2. `LDPEncodeFactory` `next` with --clients clients vs
   `tff.aggregators.UnweightedMeanFactory` on the same data (target <= 1.5x).
3. Split and shuffle of --transport_clients clients' encoded values: wall and
   CPU time and peak memory of each step (target: well under 30 s for 100
   clients x 1.66M values); with --transport_baseline, also the direct
   simulation (an independent U(0, T) delay per message, argsort).

The value structure is the McMahan et al. CNN (1,663,370 float32 parameters
in 8 tensors) unless --flat. Usage:

  python scripts/benchmark_ldp.py
  python scripts/benchmark_ldp.py --clients=10 --transport_clients=10
  # Part 3 alone (part 1 once, part 2 skipped):
  python scripts/benchmark_ldp.py --encode_repeats=1 --clients=0
"""

import sys

from tff_priv import cli

cli.quiet(sys.argv)  # Before TensorFlow is imported.

# pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import app
from absl import flags

from tff_priv.benchmarks import ldp

# pylint: enable=g-import-not-at-top,g-bad-import-order

_VERBOSE = cli.define_verbose()
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


def main(argv):
  del argv
  ldp.run(
      ldp.Options(
          flat=_FLAT.value,
          d=_D.value,
          epsilon=_EPSILON.value,
          radius=_RADIUS.value,
          out_of_range_fraction=_OUT_OF_RANGE.value,
          encode_repeats=_ENCODE_REPEATS.value,
          clients=_CLIENTS.value,
          factory_repeats=_FACTORY_REPEATS.value,
          transport_clients=_TRANSPORT_CLIENTS.value,
          max_delay=_MAX_DELAY.value,
          chunk_size=_CHUNK_SIZE.value,
          transport_baseline=_TRANSPORT_BASELINE.value,
      )
  )


if __name__ == '__main__':
  app.run(main)
