"""The error of DP-FTRL's prefix sums at equal privacy: BLT vs TFF's tree.

Every strategy here releases a composition of Gaussian mechanisms, whose
(eps, delta) curve is exactly that of one Gaussian of mu = sqrt(S) / z (S the
sensitivity^2 summed over the composed releases, z the noise multiplier):
equal (eps, delta) at every delta is equal mu. So each row (`Row`, which
lists the strategies) is computed exactly, in units of clip / mu.
"""

import dataclasses
import json
from typing import Callable, Sequence

import numpy as np

from tff_priv import validation
from tff_priv.accounting import events
from tff_priv.mechanisms import blt as blt_lib
from tff_priv.mechanisms import blt_sensitivity

# The row every ratio is relative to: TFF's tree as dp_ftrl runs it.
BASELINE = 'tree_efficient'


@dataclasses.dataclass(frozen=True)
class Options:
  """What to compute.

  Attributes:
    rounds: T values (comma-separated), each divisible by every k.
    participations: k values (comma-separated).
    format: 'table' or 'json'.
  """

  rounds: str = '100,500,2000'
  participations: str = '1,4'
  format: str = 'table'


@dataclasses.dataclass(frozen=True)
class Row:
  """One strategy's exact error for T rounds and k participations.

  Computed exactly (no sampling) as the noise of released prefix sum t,
  var_t at unit noise, times S: `rmse` = sqrt(mean_t var_t S) and
  `max_error` = sqrt(max_t var_t S), in units of clip / mu. Rows, for T
  rounds and k participations (b = T / k rounds apart, one per epoch of T / k
  rounds):

  * `identity`: independent noise each round (DP-SGD / DP-FedAvg without
    amplification); S = k.
  * `tree` (k = 1): one tree over T rounds, each prefix sum the sum of its
    dyadic nodes (tensorflow_privacy's `TreeAggregator`).
  * `tree_efficient` (`dp_ftrl` as tff_priv runs it): TFF's
    `DifferentiallyPrivateFactory.tree_aggregation` uses tensorflow_privacy's
    `EfficientTreeAggregator` (Honaker 2015), restarted every epoch
    (`TreeRestartFactory`): S = k x dp_accounting's sensitivity^2 of one
    `SingleEpochTreeAggregationDpEvent` of T / k steps, and after a restart
    the model carries the finished trees' noise.
  * `sqrt_toeplitz`: C = A^(1/2), the dense Toeplitz square-root
    factorization (coefficients of (1 - x)^(-1/2)), within 1 + o(1) of the
    optimal factorization's max error for single participation
    (Fichtenberger, Henzinger, Upadhyay 2023; Henzinger, Upadhyay, Upadhyay
    2023); for k > 1 its (k, b) sensitivity.
  * `blt_max` (`--mechanism=blt` as the program runs it, k = 1: one stream;
    k > 1: `--participation=epoch`, one stream per epoch, restarted, S = k x
    its sensitivity^2): the BLT `tff_priv.mechanisms.blt.optimize` gives for
    max error.
  * `blt_cyclic` (k > 1: `--participation=cyclic`, one stream over T rounds
    with the (k, b) sensitivity of Choquette-Choo et al. 2023, which holds
    for cyclic sampling, each client exactly b rounds apart): optimised for
    max error, as the program runs it.
  * `blt_mean` (k = 1) and `blt_stream` (k > 1: the cyclic stream optimised
    for mean error): the RMSE's own optimum.

  `ratio` is rmse / the `tree_efficient` row's rmse (issue target: BLT <=
  0.8).

  Attributes:
    strategy: one of the strategies above.
    rounds: T.
    participations: k.
    sensitivity_squared: S.
    rmse: sqrt(mean_t var_t S).
    max_error: sqrt(max_t var_t S).
    ratio: rmse / the `tree_efficient` row's rmse.
    detail: how the strategy ran (its trees, streams, buffers).
  """

  strategy: str
  rounds: int
  participations: int
  sensitivity_squared: float
  rmse: float
  max_error: float
  ratio: float = float('nan')
  detail: str = ''


def tree_prefix_variances(steps: int, efficient: bool = True) -> np.ndarray:
  """Variance of the tree's noise in prefix sums 1..steps, unit node noise.

  Prefix sum t is made of the complete dyadic nodes of its binary
  decomposition, one per set bit of t. Plain tree: each node's noise has
  variance 1. `EfficientTreeAggregator` keeps at level j the recursive
  average node = v + (l + r) / 2 (variance 2 - 2^-j) and releases it
  times 1 / (2 - 2^-j): variance 1 / (2 - 2^-j) per level-j node. The tests
  check both against tensorflow_privacy's aggregators by Monte Carlo.
  """
  t = np.arange(1, steps + 1)
  levels = np.arange(int(steps).bit_length())
  bits = (t[:, None] >> levels[None, :]) & 1
  per_node = 1.0 / (2.0 - 0.5**levels) if efficient else np.ones(levels.size)
  return bits @ per_node


def sqrt_toeplitz_coefs(n: int) -> np.ndarray:
  """Coefficients of (1 - x)^(-1/2): binom(2k, k) / 4^k."""
  k = np.arange(1, n)
  return np.concatenate([[1.0], np.cumprod((2 * k - 1) / (2 * k))])


def restarted(epoch_variances: np.ndarray, epochs: int) -> np.ndarray:
  """Prefix variances of `epochs` restarted streams, each carrying the last.

  The model after a restart keeps the finished streams' noise: prefix sum t
  in epoch e has the final variance of each earlier epoch plus its own.
  """
  return np.concatenate(
      [e * epoch_variances[-1] + epoch_variances for e in range(epochs)]
  )


def _row(name, rounds, k, variances, sens2, detail='') -> Row:
  return Row(
      name,
      rounds,
      k,
      float(sens2),
      float(np.sqrt(np.mean(variances) * sens2)),
      float(np.sqrt(np.max(variances) * sens2)),
      detail=detail,
  )


def _blt_detail(blt) -> str:
  return f'{blt.num_buffers} buffers'


def rows_for(rounds: int, k: int) -> list[Row]:
  """Every strategy's row for T = `rounds` and k participations."""
  if rounds % k:
    raise ValueError(f'rounds ({rounds}) must be divisible by k ({k})')
  epoch = rounds // k
  t = np.arange(1, rounds + 1, dtype=np.float64)
  sqrt_coefs = sqrt_toeplitz_coefs(rounds)
  sqrt_vars = np.cumsum(sqrt_coefs**2)  # B = A C^{-1} = A^(1/2) = C.
  program_blt = blt_lib.optimize(epoch, error='max')
  rows = [
      _row('identity', rounds, k, t, k),
      _row(
          BASELINE,
          rounds,
          k,
          restarted(tree_prefix_variances(epoch), k),
          k * events.tree_sensitivity_squared(epoch),
          'one tree per epoch' if k > 1 else 'one tree',
      ),
  ]
  if k == 1:
    rows.insert(
        1,
        _row(
            'tree',
            rounds,
            k,
            tree_prefix_variances(rounds, efficient=False),
            events.tree_sensitivity_squared(rounds),
            'one tree',
        ),
    )
    mean_blt = blt_lib.optimize(rounds, error='mean')
    rows += [
        _row('sqrt_toeplitz', rounds, k, sqrt_vars, np.sum(sqrt_coefs**2)),
        _row(
            'blt_max',
            rounds,
            k,
            program_blt.prefix_errors(rounds),
            program_blt.sensitivity(rounds) ** 2,
            _blt_detail(program_blt),
        ),
        _row(
            'blt_mean',
            rounds,
            k,
            mean_blt.prefix_errors(rounds),
            mean_blt.sensitivity(rounds) ** 2,
            _blt_detail(mean_blt),
        ),
    ]
  else:
    stream_blt = blt_lib.optimize(
        rounds, error='mean', min_sep=epoch, max_participations=k
    )
    cyclic_blt = blt_lib.optimize(
        rounds, error='max', min_sep=epoch, max_participations=k
    )
    rows += [
        _row(
            'sqrt_toeplitz',
            rounds,
            k,
            sqrt_vars,
            blt_sensitivity.minsep_sensitivity_squared(sqrt_coefs, epoch, k),
            'one stream, (k, b) sensitivity',
        ),
        _row(
            'blt_max',
            rounds,
            k,
            restarted(program_blt.prefix_errors(epoch), k),
            k * program_blt.sensitivity(epoch) ** 2,
            f'one stream per epoch, {_blt_detail(program_blt)}',
        ),
        _row(
            'blt_cyclic',
            rounds,
            k,
            cyclic_blt.prefix_errors(rounds),
            cyclic_blt.sensitivity(rounds, epoch, k) ** 2,
            f'one stream, (k, b) sensitivity, {_blt_detail(cyclic_blt)}',
        ),
        _row(
            'blt_stream',
            rounds,
            k,
            stream_blt.prefix_errors(rounds),
            stream_blt.sensitivity(rounds, epoch, k) ** 2,
            f'one stream, (k, b) sensitivity, {_blt_detail(stream_blt)}',
        ),
    ]
  base = next(r.rmse for r in rows if r.strategy == BASELINE)
  return [dataclasses.replace(r, ratio=r.rmse / base) for r in rows]


def _ints(name: str, text: str) -> list[int]:
  try:
    values = [int(v) for v in text.split(',') if v.strip()]
  except ValueError:
    raise ValueError(
        f'{name} must be comma-separated integers, got {text!r}'
    ) from None
  if not values:
    raise ValueError(f'{name} is empty')
  return [validation.int_at_least(name, v, 1) for v in values]


def compute(options: Options) -> list[Row]:
  """Every strategy's rows for each T of `rounds` and k of `participations`."""
  validation.one_of('format', options.format, ('table', 'json'))
  rounds = _ints('rounds', options.rounds)
  ks = _ints('participations', options.participations)
  return [row for n in rounds for k in ks for row in rows_for(n, k)]


def format_table(rows: Sequence[Row]) -> str:
  """The rows as a markdown table."""
  lines = [
      '| T | k | strategy | S (sensitivity^2) | RMSE | max error | RMSE / '
      f'{BASELINE} | |',
      '|---|---|---|---|---|---|---|---|',
  ]
  for r in rows:
    lines.append(
        f'| {r.rounds} | {r.participations} | {r.strategy} | '
        f'{r.sensitivity_squared:.3g} | {r.rmse:.3g} | {r.max_error:.3g} | '
        f'{r.ratio:.2f} | {r.detail} |'
    )
  return '\n'.join(lines)


def run(options: Options, out: Callable[[str], None] = print) -> list[Row]:
  """Computes the rows and writes them as a markdown table or JSON."""
  rows = compute(options)
  if options.format == 'json':
    out(json.dumps([dataclasses.asdict(r) for r in rows], indent=1))
  else:
    out(format_table(rows))
  return rows
