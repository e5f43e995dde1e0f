"""The canaries of a training run's one-shot privacy estimate, and the estimate.

Andrew et al.'s canaries (ICLR 2024): 2N random directions in the model's
space drawn from a secret seed, half of them inserted as canary clients
(`Canaries`); the estimate is read from their cosines with the released model
deltas (`estimate`), a post-processing of released outputs with independent
randomness, so releasing it costs no privacy beyond the accounted eps.
"""

import dataclasses
from typing import Any, Optional

import numpy as np

from tff_priv import validation
from tff_priv.auditing import one_shot

_DIRECTION_STREAM = 0
_PARTICIPATION_STREAM = 1
_EPOCH_STREAM = 2
# Above any seed `secrets.randbits(62)` or a user gives (< 2**63): the
# canary seed's stream in `seed_from`.
_SEED_STREAM = 2**63

MEANING = (
    'An empirical estimate (Andrew et al., ICLR 2024), not a bound: the eps at '
    'delta of telling inserted from held-out canaries by their cosines with '
    'the released model deltas, to compare with the accounted eps against '
    'the same adversary (the analyst, under the same sampling).'
)


BELOW = 'below the accounted eps'
INCONCLUSIVE = 'inconclusive'
EXCEEDS = 'exceeds the accounted eps'


def verdict(
    low: float,
    high: float,
    accounted_epsilon: Optional[float],
    null_quantile: float = 0.0,
) -> Optional[str]:
  """What an estimate's interval [low, high] says of the accounted eps.

  INCONCLUSIVE: the interval reaches the accounted eps, or the canary count
  cannot show it (`null_quantile`, the estimate's 0.95 quantile when nothing
  leaks, is at or above it: a leak-free run's bootstrap interval then lies
  above the accounted eps in about 15% of runs at 20 canaries, measured);
  BELOW: the whole interval is below it; EXCEEDS: the whole interval is
  above it and above what a leak-free run shows (the accounting or the
  mechanism is wrong, or chance). None: no accounted eps.
  """
  if accounted_epsilon is None:
    return None
  if null_quantile >= accounted_epsilon:
    return INCONCLUSIVE
  if high < accounted_epsilon:
    return BELOW
  if low > accounted_epsilon:
    return EXCEEDS
  return INCONCLUSIVE


def headline(empirical: dict[str, Any]) -> str:
  """One line for a run's end: the estimate, its interval, and the verdict."""
  low, high = empirical['final_model_interval_95']
  text = (
      f"one_shot_epsilon={empirical['final_model_epsilon']:.3g} "
      f'(95% interval {low:.3g}..{high:.3g}'
  )
  if empirical['inconclusive']:
    text += f"; inconclusive with {empirical['num_inserted']} canaries"
  elif empirical['final_model_verdict']:
    text += f"; {empirical['final_model_verdict']}"
  return text + ')'


def small_count_warning(
    num_canaries: int, delta: float, target_epsilon: Optional[float]
) -> Optional[str]:
  """A warning when `num_canaries` cannot show the run's target eps, else None.

  When nothing leaks, the estimate with N canaries exceeds
  `one_shot.null_quantile(N, delta)` in 5% of runs; at or above the target
  eps, a private run's estimate cannot be told from a leaking one's.
  """
  if target_epsilon is None:
    return None
  null = one_shot.null_quantile(num_canaries, delta)
  if null < target_epsilon:
    return None
  return (
      f'with audit_canaries={num_canaries} the one-shot estimate exceeds '
      f'{null:.3g} in 5% of runs where nothing leaks, above the target eps '
      f"{target_epsilon:g}: it cannot confirm this run's eps (the summary "
      'will mark it inconclusive); use more canaries'
  )


def seed_from(sampling_seed: int) -> int:
  """The canary seed of a run: a separate stream of its secret sampling seed.

  The canaries are then kept exactly as the sampling seed is (in the
  checkpoints and the write-ahead ledger, never released), and a run
  resumed from a checkpoint has the same canaries.
  """
  sampling_seed = validation.int_at_least('sampling_seed', sampling_seed, 0)
  return int(
      np.random.default_rng([sampling_seed, _SEED_STREAM]).integers(2**62)
  )


@dataclasses.dataclass(frozen=True)
class Canaries:
  """2N canary directions and their participation.

  Andrew, Kairouz, Oh, Oprea, McMahan, Suriyakumar, "One-shot Empirical Privacy
  Estimation for Federated Learning" (ICLR 2024): 2N unit random directions in
  the model's flattened trainable space are drawn from a secret seed; canaries
  0..N-1 are inserted (canary clients whose model delta is the direction scaled
  to the mechanism's clip take part in training), N..2N-1 are held out (never
  inserted). After training, the cosines of the released model delta (final
  minus initial model) with the inserted and with the held-out canaries are each
  fit by a Gaussian (`one_shot.one_shot_epsilon`); when every round's model is
  released, each canary's statistic is its largest cosine with a round's model
  delta (`one_shot.one_shot_epsilon_all_iterates`).

  Participation. As in the paper and its code (google-research/federated,
  one_shot_epe: canary clients are added to the population and drawn by the same
  Bernoulli sampling as the real clients), each inserted canary joins a round
  independently with the real clients' per-round rate q = K / N_real (for a
  fixed-size sampling of the real clients, q is the fraction they are drawn at).
  The real clients' sampling, rate and ledger are those of the run without
  canaries: the canaries are drawn on top, from their own stream.

  Everything random here is a function of `seed` only, through streams that
  cannot collide: direction j from `numpy.random.default_rng([seed, 0, j])`,
  round t's participation from `default_rng([seed, 1, t])`.

  Attributes:
    seed: the secret canary seed (`seed_from`).
    num_inserted: N >= 2: canaries 0..N-1 take part, N..2N-1 are held out.
    dimension: d, the model's trainable scalars.
    rate: q in (0, 1]: each inserted canary joins each round with
      probability q.
    rounds_per_epoch: None, or n >= 1 for a run whose clients come epoch by
      epoch (each at most once per epoch of n rounds: DP-FTRL's trees, BLT's
      streams): then each inserted canary joins exactly one round of each
      epoch, drawn uniformly from the secret seed, as a real client does
      (`rate` is not used).
  """

  seed: int
  num_inserted: int
  dimension: int
  rate: float
  rounds_per_epoch: Optional[int] = None

  def __post_init__(self):
    validation.int_at_least('seed', self.seed, 0)
    validation.int_at_least('num_inserted', self.num_inserted, 2)
    validation.int_at_least('dimension', self.dimension, 1)
    validation.half_open_unit('rate', self.rate)
    if self.rounds_per_epoch is not None:
      validation.int_at_least('rounds_per_epoch', self.rounds_per_epoch, 1)

  def direction(self, j: int) -> np.ndarray:
    """Canary j's unit direction (float64, [d]), j in [0, 2N)."""
    if not 0 <= j < 2 * self.num_inserted:
      raise ValueError(f'canary {j} not in [0, {2 * self.num_inserted})')
    x = np.random.default_rng(
        [self.seed, _DIRECTION_STREAM, j]
    ).standard_normal(self.dimension)
    return x / np.linalg.norm(x)

  def participants(self, round_num: int) -> np.ndarray:
    """The inserted canaries of round `round_num` (sorted indices in [0, N))."""
    round_num = validation.int_at_least('round_num', round_num, 1)
    if self.rounds_per_epoch is not None:
      epoch, position = divmod(round_num - 1, self.rounds_per_epoch)
      rng = np.random.default_rng([self.seed, _EPOCH_STREAM, epoch])
      rounds = rng.integers(0, self.rounds_per_epoch, self.num_inserted)
      return np.flatnonzero(rounds == position)
    rng = np.random.default_rng([self.seed, _PARTICIPATION_STREAM, round_num])
    return np.flatnonzero(rng.random(self.num_inserted) < self.rate)

  def cosines(self, model_delta) -> np.ndarray:
    """[2N] cosines of a flat model delta with every canary (O(N d) time).

    The directions are drawn again each call rather than kept: 2N x d floats
    would not fit in memory for large models.
    """
    return np.concatenate(
        [
            one_shot.cosines(model_delta, self.direction(j))
            for j in range(2 * self.num_inserted)
        ]
    )


def estimate(
    final_cosines,
    max_round_cosines,
    num_inserted: int,
    delta: float,
    accounted_epsilon: Optional[float],
) -> dict[str, Any]:
  """The `privacy['empirical']` entry of a run summary.

  Releasing the estimate costs no privacy beyond the accounted eps. Its inputs
  are the models the rounds release (the ledger charges every round's model as a
  release, so the accounted eps covers all iterates; the final model is written
  to the run directory) and the canaries, whose directions and participation
  come from a seed drawn independently of the clients' data and of who is
  sampled (the training program draws it from the operating system and keeps it
  as it keeps the sampling seed). No client's data, update or participation is
  an input: the estimate is a post-processing of released outputs with
  independent randomness.

  Args:
    final_cosines: [2N] cosines of (final - initial model) with the canaries.
    max_round_cosines: [2N] each canary's largest cosine with a round's
      model delta.
    num_inserted: N.
    delta: the run's delta.
    accounted_epsilon: the analyst's accounted eps at `delta` (None: none).

  Returns:
    A JSON-ready dict: `method`, `kind` ('estimate'), `final_model_epsilon`
    and `all_iterates_epsilon` each with its 95% bootstrap interval
    (`*_interval_95`, `one_shot.bootstrap_interval`) and `*_verdict`
    (`verdict`), `null_quantile_95` (`one_shot.null_quantile`: what N
    canaries show in 5% of leak-free runs), `inconclusive` (an interval
    reaches the accounted eps, or the null quantile does), `num_inserted`,
    `num_held_out`, `delta`, `accounted_epsilon`, `meaning`, and the fitted
    means / stds of the cosines (`fits`).
  """
  n = validation.int_at_least('num_inserted', num_inserted, 2)
  final = np.asarray(final_cosines, np.float64).ravel()
  best = np.asarray(max_round_cosines, np.float64).ravel()
  for name, values in (('final_cosines', final), ('max_round_cosines', best)):
    if values.size != 2 * n:
      raise ValueError(
          f'{name} must have 2N = {2 * n} values, got {values.size}'
      )

  def fit(values):
    return {'mean': float(values.mean()), 'std': float(values.std(ddof=1))}

  estimates = {
      'final_model': (final[:n], final[n:]),
      'all_iterates': (best[:n], best[n:]),
  }
  null = one_shot.null_quantile(n, delta)
  report = {
      'method': 'one-shot canary estimate (Andrew et al., ICLR 2024)',
      'kind': 'estimate',
      'num_inserted': n,
      'num_held_out': n,
      'delta': delta,
      'accounted_epsilon': accounted_epsilon,
      'null_quantile_95': null,
      'meaning': MEANING,
      'fits': {
          name: {'inserted': fit(a), 'held_out': fit(b)}
          for name, (a, b) in estimates.items()
      },
  }
  for name, (inserted, held_out) in estimates.items():
    low, high = one_shot.bootstrap_interval(inserted, held_out, delta)
    report[f'{name}_epsilon'] = one_shot.one_shot_epsilon(
        inserted, held_out, delta
    )
    report[f'{name}_interval_95'] = [low, high]
    report[f'{name}_verdict'] = verdict(low, high, accounted_epsilon, null)
  report['inconclusive'] = any(
      report[f'{name}_verdict'] == INCONCLUSIVE for name in estimates
  )
  report['headline'] = headline(report)
  return report
