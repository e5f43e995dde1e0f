r"""Privacy calculator: what a tff_priv run spends, or the noise for a target eps.

Every accountant that can count the mechanism (dp_accounting RDP and PLD) is
shown, with the paper's closed form beside it where the paper has one.

  python scripts/privacy.py --mechanism=smp --noise_multiplier=1.1 \
      --sampling_rate=0.01 --rounds=300 --delta=1e-5
  python scripts/privacy.py --mechanism=udp --epsilon=8 --delta=1e-3 \
      --rounds=200 --sensitivity=0.0125           # noise for a target eps
  python scripts/privacy.py --mechanism=ldp --ldp_epsilon=1 --num_values=1000 \
      --num_clients=100000 --rounds=10 --format=json

Exit status 2 with a one-line message on bad flags.
"""

import json
import sys

from absl import flags

from tff_priv import cli
from tff_priv.accounting import reports

_MECHANISM = flags.DEFINE_enum(
    'mechanism', None, list(reports.MECHANISMS), 'Which mechanism.'
)
# What was released.
_NOISE_MULTIPLIER = flags.DEFINE_float(
    'noise_multiplier', None, 'Noise std / L2 sensitivity (dp_fedavg, smp, udp).'
)
_NOISE_STDDEV = flags.DEFINE_float(
    'noise_stddev', None, 'Absolute client noise std (udp with --sensitivity, '
    'distortion with --clip).'
)
_SENSITIVITY = flags.DEFINE_float(
    'sensitivity', None, 'udp: L2 sensitivity of a client update, 2 eta C / |D_i|.'
)
_CLIP = flags.DEFINE_float('clip', None, 'distortion: L2 clip of the upload.')
_LDP_EPSILON = flags.DEFINE_float('ldp_epsilon', None, 'ldp: eps0 per value.')
_NUM_VALUES = flags.DEFINE_integer(
    'num_values', None, 'ldp: values a client sends per round (model size d).'
)
_NUM_CLIENTS = flags.DEFINE_integer(
    'num_clients', None, 'ldp: clients whose reports are shuffled together.'
)
# Sampling and rounds.
_SAMPLING_RATE = flags.DEFINE_float(
    'sampling_rate', None, 'Poisson client sampling rate q in (0, 1].'
)
_POPULATION = flags.DEFINE_integer(
    'population', None, 'Fixed-size sampling: number of clients N.'
)
_CLIENTS_PER_ROUND = flags.DEFINE_integer(
    'clients_per_round', None, 'Fixed-size sampling: clients per round K.'
)
_ROUNDS = flags.DEFINE_integer('rounds', None, 'Number of rounds T.')
# Target.
_DELTA = flags.DEFINE_float('delta', 1e-5, 'delta of the (eps, delta) report.')
_EPSILON = flags.DEFINE_float(
    'epsilon', None, 'A target eps: report the noise that meets it instead.'
)
_FORMAT = flags.DEFINE_enum('format', 'text', ['text', 'json'], 'Output format.')


_CLI = cli.Cli('privacy.py')
_fail = _CLI.fail
_parse_flags = _CLI.parse_flags


def _print_text(report, indent=''):
  for key, value in report.items():
    if isinstance(value, dict):
      print(f'{indent}{key}:')
      _print_text(value, indent + '  ')
    elif isinstance(value, float):
      print(f'{indent}{key}: {value:.6g}')
    else:
      print(f'{indent}{key}: {value}')


def main(argv):
  if len(argv) > 1:
    _fail(f'unexpected arguments {argv[1:]}')
  if _MECHANISM.value is None:
    _fail('--mechanism is required')
  if _ROUNDS.value is None:
    _fail('--rounds is required')
  try:
    report = reports.mechanism_report(
        _MECHANISM.value,
        delta=_DELTA.value,
        rounds=_ROUNDS.value,
        noise_multiplier=_NOISE_MULTIPLIER.value,
        target_epsilon=_EPSILON.value,
        sampling_probability=_SAMPLING_RATE.value,
        population=_POPULATION.value,
        sample_size=_CLIENTS_PER_ROUND.value,
        sensitivity=_SENSITIVITY.value,
        noise_stddev=_NOISE_STDDEV.value,
        clip=_CLIP.value,
        ldp_epsilon=_LDP_EPSILON.value,
        num_values=_NUM_VALUES.value,
        num_clients=_NUM_CLIENTS.value,
    )
  except (ValueError, TypeError) as e:
    _fail(str(e))
  if _FORMAT.value == 'json':
    json.dump(report, sys.stdout, indent=2, sort_keys=True)
    print()
  else:
    _print_text(report)



if __name__ == '__main__':
  _CLI.run(main)
