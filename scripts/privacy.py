r"""Privacy calculator: what a run spends, or the noise for a target eps.

Every accountant that can count the mechanism (dp_accounting RDP and PLD) is
shown, with the paper's closed form beside it where the paper has one
(`tff_priv.program.registry.privacy_report`). The mechanism's flags are
those of its report (`registry.report_parameters()`); --delta defaults to
1e-5.

  python scripts/privacy.py --mechanism=smp --noise_multiplier=1.1 \
      --sampling_rate=0.01 --rounds=300 --delta=1e-5
  python scripts/privacy.py --mechanism=udp --epsilon=8 --delta=1e-3 \
      --rounds=200 --sensitivity=0.0125           # noise for a target eps
  python scripts/privacy.py --mechanism=ldp --ldp_epsilon=1 --num_values=1000 \
      --num_clients=100000 --rounds=10 --format=json

Exit status 2 with a one-line message on bad flags.
"""

import sys

from tff_priv import cli

cli.quiet(sys.argv)  # Before TensorFlow is imported.

# pylint: disable=g-import-not-at-top,g-bad-import-order
import json

from absl import flags

from tff_priv.accounting import sampling as sampling_lib
from tff_priv.program import registry

# pylint: enable=g-import-not-at-top,g-bad-import-order

_VERBOSE = cli.define_verbose()
_MECHANISM = flags.DEFINE_enum(
    'mechanism', None, list(registry.REPORTS), 'Which mechanism.'
)
_DEFINE = {
    float: flags.DEFINE_float,
    int: flags.DEFINE_integer,
    str: flags.DEFINE_string,
    bool: flags.DEFINE_bool,
}


def _define_report_flags():
  """What was released: one flag per parameter of the mechanisms' reports.

  Their `Config` fields and what a run resolves (`ReportInputs`), with what
  each means to each mechanism; None: not given.
  """
  for name, (kind, text) in registry.report_parameters().items():
    _DEFINE[kind](name, None, text)


_define_report_flags()
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
_FORMAT = flags.DEFINE_enum(
    'format', 'text', ['text', 'json'], 'Output format.'
)


_CLI = cli.Cli('privacy.py', doc=__doc__, key_modules=(__name__,))
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


def _sampling() -> sampling_lib.Sampling:
  """The rounds' client sampling of the flags (a bad mix: one line, exit 2)."""
  rate, population, k = (
      _SAMPLING_RATE.value,
      _POPULATION.value,
      _CLIENTS_PER_ROUND.value,
  )
  if rate is not None and (population is not None or k is not None):
    _fail(
        'give --sampling_rate (Poisson sampling) or --population and '
        '--clients_per_round (fixed-size sampling), not both'
    )
  if (population is None) != (k is None):
    _fail('fixed-size sampling needs both --population and --clients_per_round')
  try:
    return sampling_lib.Sampling(rate, population, k)
  except ValueError as e:
    _fail(str(e))


def main(argv):
  if len(argv) > 1:
    _fail(f'unexpected arguments {argv[1:]}')
  if _MECHANISM.value is None:
    _fail('--mechanism is required')
  if _ROUNDS.value is None:
    _fail('--rounds is required')
  try:
    report = registry.privacy_report(
        _MECHANISM.value,
        rounds=_ROUNDS.value,
        sampling=_sampling(),
        **{k: flags.FLAGS[k].value for k in registry.report_parameters()},
    )
  except (ValueError, TypeError) as e:
    _fail(str(e))
  if _FORMAT.value == 'json':
    json.dump(report, sys.stdout, indent=2, sort_keys=True)
    print()
  else:
    _print_text(report)


def entry():
  """The `tff-priv-privacy` console command (pyproject.toml)."""
  _CLI.run(main)


if __name__ == '__main__':
  entry()
