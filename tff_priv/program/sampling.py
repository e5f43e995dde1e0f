"""Client sampling of the training program, and how the ledger must count it.

The privacy accountant is only right if it is told how clients were really
sampled, so the program draws every round's clients here (`ClientSampling`:
'poisson', 'fixed', 'epoch', 'cyclic' or 'banded', round t's draw a function
of (seed, t) alone) and the ledger is charged with the same description
(`ledger_sampling`, an accounting `Sampling`). Each kind, its accounting and
why the seed stays secret: `ClientSampling`.
"""

import dataclasses
import secrets
from typing import Optional, Sequence

import numpy as np

from tff_priv import validation
from tff_priv.accounting import sampling as sampling_lib

KINDS = ('poisson', 'fixed', 'epoch', 'cyclic', 'banded')
# The kinds whose mechanism's event covers a stream of rounds (no
# amplification by sampling).
STREAM_KINDS = ('epoch', 'cyclic')


@dataclasses.dataclass(frozen=True)
class ClientSampling:
  """How each round's clients are drawn from a population of N.

  The privacy accountant is only right if it is told how clients were really
  sampled, so the program draws every round's clients here and the ledger is
  charged with the same description (`ledger_sampling`, an accounting
  `Sampling`):

  * 'poisson': each of the N clients joins a round independently with
    probability q = K / N (K = `clients_per_round`, the expected number), so a
    round has Binomial(N, q) clients, possibly none. Accounted as
    `PoissonSampledDpEvent(q, ...)` under add-or-remove-one adjacency
    (DP-FedAvg, Fed-SMP).
  * 'fixed': exactly K of the N clients, uniformly without replacement.
    Accounted as `SampledWithoutReplacementDpEvent(N, K, ...)` under replace-one
    adjacency (the local-noise mechanisms: UDP, whose paper samples K of U
    clients; distortion; LDP-FL, whose shuffle bound needs the number n = K of
    clients whose reports are shuffled together).
  * 'epoch': a fresh seeded permutation of the N clients per epoch of
    R = N // K rounds, K consecutive clients of it per round (the N - R K left
    over sit that epoch out), so each client takes part at most once per
    epoch. No amplification: the mechanism's event already covers an epoch
    (DP-FTRL's tree, Kairouz et al. 2021), under its own relation
    (`ledger_sampling` is `Sampling.none()`).
  * 'cyclic': one seeded permutation of the N clients for the whole run, cut
    into b = N // K groups of K (the N - b K left over never take part);
    round t trains group (t - 1) mod b. Each client takes part every b rounds,
    exactly b apart: at most k = ceil(T / b) times in T rounds, the
    (k, b)-participation of matrix-factorization DP-FTRL (Choquette-Choo et
    al. 2023), whose one stream covers the whole run. No amplification.
  * 'banded': amplified BandMF's cyclic Poisson sampling (Choquette-Choo et
    al. 2023, Algorithm 2): one seeded permutation cut into b = `bands`
    groups of floor(N / b) (the N mod b left over never take part); round t
    takes each client of group (t - 1) mod b independently with probability
    q = K / floor(N / b). The mechanism's event holds that sampling (one
    `PoissonSampledDpEvent(q, ...)` per cycle of b rounds), so
    `ledger_sampling` is `Sampling.none()`.

  Round t's draw depends only on (seed, t): numpy's generator seeded with the
  sequence [seed, t]. A run resumed from a checkpoint therefore samples exactly
  the clients the uninterrupted run would have sampled, except in a round it
  released before the stop and runs again: that one draws with fresh coins
  ([seed, t, attempt], `attempt` >= 1 the session). The ledger charges the
  two releases as two independent sampled events, which they are only with
  independent draws: two releases on the same draw amplify less (at Renyi
  order 2, 1 + q^2 (e^{2/z^2} - 1) against (1 + q^2 (e^{1/z^2} - 1))^2).
  The permutations of 'epoch', 'cyclic' and 'banded' stay. The training program
  draws the seed from the operating system and keeps it out of everything it
  releases: whoever knows it can recompute who was sampled, which the
  amplification by sampling assumes hidden from the analyst.

  Attributes:
    kind: one of `KINDS` (described above).
    num_clients: N >= 1.
    clients_per_round: K in [1, N]: the expected number per round for
      'poisson' and 'banded', the exact number for the others.
    bands: b, the groups of 'banded' (1 for the other kinds), with
      K <= floor(N / b).
  """

  kind: str
  num_clients: int
  clients_per_round: int
  bands: int = 1

  def __post_init__(self):
    validation.one_of('sampling kind', self.kind, KINDS)
    validation.int_at_least('num_clients', self.num_clients, 1)
    validation.int_at_least('clients_per_round', self.clients_per_round, 1)
    if self.clients_per_round > self.num_clients:
      raise ValueError(
          f'clients_per_round ({self.clients_per_round}) must be <= the '
          f'number of clients of the task ({self.num_clients})'
      )
    validation.int_at_least('bands', self.bands, 1)
    if self.bands > 1 and self.kind != 'banded':
      raise ValueError(
          f"bands apply only to 'banded' sampling, not " f'{self.kind!r}'
      )
    if self.clients_per_round > self.num_clients // self.bands:
      raise ValueError(
          f'bands={self.bands} leaves groups of '
          f'{self.num_clients // self.bands} clients, fewer than '
          f'clients_per_round={self.clients_per_round}: at most '
          f'{self.num_clients // self.clients_per_round} bands'
      )

  @property
  def rate(self) -> float:
    """q = K / N: the Poisson rate, or the fraction sampled per round.

    'banded': q = K / floor(N / b), the rate inside a round's group.
    """
    return self.clients_per_round / (self.num_clients // self.bands)

  @property
  def rounds_per_epoch(self) -> int:
    """R = N // K: the rounds of an 'epoch' sampling's epoch.

    Also the separation b of a 'cyclic' sampling's participations.
    """
    return self.num_clients // self.clients_per_round

  def participations(self, total_rounds: int) -> int:
    """k: the most rounds of `total_rounds` one client takes part in."""
    if self.kind == 'cyclic':
      return -(-total_rounds // self.rounds_per_epoch)
    if self.kind == 'epoch':
      return -(-total_rounds // self.rounds_per_epoch)
    if self.kind == 'banded':
      return -(-total_rounds // self.bands)
    return total_rounds

  def ledger_sampling(self) -> sampling_lib.Sampling:
    """The accounting `Sampling` this draw is charged under.

    'poisson': `Sampling.poisson(K / N)`; 'fixed': `Sampling.fixed(N, K)`;
    'epoch', 'cyclic': `Sampling.none()` (the mechanism's event covers a
    stream); 'banded': `Sampling.none()` (the mechanism's event holds the
    sampling).
    """
    if self.kind == 'poisson':
      return sampling_lib.Sampling.poisson(self.rate)
    if self.kind == 'fixed':
      return sampling_lib.Sampling.fixed(
          self.num_clients, self.clients_per_round
      )
    return sampling_lib.Sampling.none()

  def describe(self) -> dict:
    """A JSON-ready description (for the run summary)."""
    return {
        'model': self.kind,
        'num_clients': self.num_clients,
        'clients_per_round': self.clients_per_round,
        'rate': self.rate,
        **({'bands': self.bands} if self.kind == 'banded' else {}),
        'accounted_as': {
            'poisson': 'PoissonSampledDpEvent (add_or_remove_one)',
            'fixed': 'SampledWithoutReplacementDpEvent (replace_one)',
            'epoch': (
                "the mechanism's event, each client at most once per epoch "
                'of N // K rounds (no amplification)'
            ),
            'cyclic': (
                "the mechanism's event, each client every N // K rounds "
                '(no amplification)'
            ),
            'banded': (
                "the mechanism's event: a PoissonSampledDpEvent at rate q "
                'per cycle of b rounds (add_or_remove_one)'
            ),
        }[self.kind],
    }

  def sample_indices(
      self, seed: int, round_num: int, attempt: int = 0
  ) -> np.ndarray:
    """Sorted indices in [0, N) of the clients of round `round_num`.

    Args:
      seed: the run's seed, >= 0.
      round_num: the round, >= 1.
      attempt: 0, or >= 1 for a released round run again: fresh coins for
        'poisson', 'fixed' and 'banded' (see the class docstring).

    Returns:
      int64 indices, sorted; may be empty for 'poisson'.
    """
    seed = validation.int_at_least('seed', seed, 0)
    round_num = validation.int_at_least('round_num', round_num, 1)
    attempt = validation.int_at_least('attempt', attempt, 0)
    if self.kind == 'banded':
      return banded_indices(
          seed, round_num, self.num_clients, self.bands, self.rate, attempt
      )
    if self.kind in STREAM_KINDS:
      epoch, position = divmod(round_num - 1, self.rounds_per_epoch)
      if self.kind == 'cyclic':  # One permutation for the whole run.
        order = np.random.default_rng([seed, 0x4359434C]).permutation(
            self.num_clients
        )
      else:
        order = np.random.default_rng([seed, epoch, 0x45504F43]).permutation(
            self.num_clients
        )
      k = self.clients_per_round
      return np.sort(order[position * k : (position + 1) * k]).astype(np.int64)
    rng = np.random.default_rng(_coins(seed, round_num, attempt))
    if self.kind == 'poisson':
      joined = rng.random(self.num_clients) < self.rate
      return np.flatnonzero(joined).astype(np.int64)
    picked = rng.choice(
        self.num_clients, size=self.clients_per_round, replace=False
    )
    return np.sort(picked).astype(np.int64)

  def sample(
      self,
      client_ids: Sequence[str],
      seed: int,
      round_num: int,
      attempt: int = 0,
  ) -> list[str]:
    """The ids of the clients of round `round_num` (see `sample_indices`)."""
    if len(client_ids) != self.num_clients:
      raise ValueError(
          f'expected {self.num_clients} client ids, got {len(client_ids)}'
      )
    return [
        client_ids[i] for i in self.sample_indices(seed, round_num, attempt)
    ]


def _coins(seed: int, round_num: int, attempt: int) -> list[int]:
  """The seed sequence of a round's sampling coins."""
  return [seed, round_num] + ([attempt] if attempt else [])


class StreamSampler:
  """Each round's clients of a BLT or DP-FTRL stream, for a user's own loop.

  The streams' events (`BLTFactory`, `TreeRestartFactory`) hold only for
  the participation they were built for, and claim no amplification by
  sampling (`PrivacyLedger.record_round` refuses sampling arguments for
  their states). This draws exactly that participation, from a seed drawn
  from the operating system (secret: whoever knows it knows who took part):

  * 'epoch': a new permutation each epoch of b = N // K rounds, K clients a
    round: each client at most once per epoch (a stream per epoch:
    `BLTFactory.calibrated(..., participation='epoch')`);
  * 'cyclic': one permutation, round t takes group (t - 1) mod b: each
    client every b rounds, at most ceil(T / b) times in T rounds (one
    stream: `participation='cyclic'`).

  The N mod K clients left over never take part. Round t's clients are a
  function of (seed, t) only: a loop resumed with the same seed
  (`to_seed` / `StreamSampler(..., seed=...)`, kept with the loop's
  checkpoints, never released) draws what it would have.

  Args:
    population: N, the clients (indices 0 .. N - 1).
    clients_per_round: K in 1..N.
    participation: 'epoch' or 'cyclic'.
    seed: None (drawn from the operating system), or a saved `seed`.
    total_rounds: T of the factory's plan: rounds 1..T are drawn, any other
      refused (None: no plan, every t >= 1).
  """

  def __init__(
      self,
      population: int,
      clients_per_round: int,
      participation: str = 'epoch',
      seed=None,
      total_rounds: Optional[int] = None,
  ):
    validation.one_of('participation', participation, STREAM_KINDS)
    self._sampling = ClientSampling(
        participation, population, clients_per_round
    )
    if seed is None:
      seed = secrets.randbits(62)
    self.seed = validation.int_at_least('seed', seed, 0)
    self.total_rounds = (
        None
        if total_rounds is None
        else validation.int_at_least('total_rounds', total_rounds, 1)
    )

  @property
  def participation(self) -> str:
    return self._sampling.kind

  @property
  def population(self) -> int:
    """N: the clients drawn from (indices 0 .. N - 1)."""
    return self._sampling.num_clients

  @property
  def clients_per_round(self) -> int:
    """K: the clients of a round."""
    return self._sampling.clients_per_round

  @property
  def min_separation(self) -> int:
    """b = N // K: the rounds of an epoch; the gap between participations."""
    return self._sampling.rounds_per_epoch

  def sample(self, round_num: int) -> list[int]:
    """The clients (indices, sorted) of round `round_num`, 1..total_rounds."""
    round_num = _planned_round('StreamSampler', round_num, self.total_rounds)
    return self._sampling.sample_indices(self.seed, round_num).tolist()


class BandSampler:
  """Each round's clients of amplified BandMF, for a user's own loop.

  The schedule of `BandMFFactory`'s event (Choquette-Choo et al. 2023,
  Algorithm 2, "cyclic Poisson sampling"): one permutation of the N clients,
  from a seed drawn from the operating system (secret), cut into b groups of
  floor(N / b) (the N mod b left over never take part); round t takes each
  client of group (t - 1) mod b independently with probability
  q = K / floor(N / b): K clients a round on average, possibly none. Charge
  each round with `PrivacyLedger.record_round(state)` (the state's event
  holds the sampling). Round t's clients are a function of (seed, t) only.

  Args:
    population: N, the clients (indices 0 .. N - 1).
    clients_per_round: K, the expected clients a round, 1..N // b.
    bands: b >= 1 (`BandMFFactory.bands`).
    seed: None (drawn from the operating system), or a saved `seed`.
    total_rounds: T of the factory's plan: rounds 1..T are drawn, any other
      refused (None: no plan, every t >= 1).
  """

  def __init__(
      self,
      population: int,
      clients_per_round: int,
      bands: int,
      seed=None,
      total_rounds: Optional[int] = None,
  ):
    self.population = validation.int_at_least('population', population, 1)
    k = validation.int_at_least('clients_per_round', clients_per_round, 1)
    self.bands = validation.int_at_least('bands', bands, 1)
    self.group_size = population // self.bands
    if k > self.group_size:
      raise ValueError(
          f'bands={bands} leaves groups of {self.group_size} clients, fewer '
          f'than clients_per_round={k}: at most {population // k} bands'
      )
    self.sampling_probability = k / self.group_size
    if seed is None:
      seed = secrets.randbits(62)
    self.seed = validation.int_at_least('seed', seed, 0)
    self.total_rounds = (
        None
        if total_rounds is None
        else validation.int_at_least('total_rounds', total_rounds, 1)
    )

  def sample(self, round_num: int, attempt: int = 0) -> list[int]:
    """The clients (indices, sorted) of round `round_num` >= 1.

    `attempt` >= 1: a round run again after its release (a restored
    state) draws with fresh coins, as the ledger's second charge assumes;
    the groups stay.
    """
    round_num = _planned_round('BandSampler', round_num, self.total_rounds)
    attempt = validation.int_at_least('attempt', attempt, 0)
    return banded_indices(
        self.seed,
        round_num,
        self.population,
        self.bands,
        self.sampling_probability,
        attempt,
    ).tolist()


def _planned_round(
    name: str, round_num: int, total_rounds: Optional[int]
) -> int:
  """`round_num` if in 1..total_rounds (rounds count from 1), or one line."""
  if (
      not isinstance(round_num, (int, np.integer))
      or isinstance(round_num, bool)
      or round_num < 1
  ):
    raise ValueError(
        f'{name}.sample takes round numbers from 1 (the first '
        f'round is 1), got {round_num!r}'
    )
  if total_rounds is not None and round_num > total_rounds:
    raise ValueError(
        f'{name} was planned for {total_rounds} rounds and refuses round '
        f'{round_num}: to go on, extend the plan (a factory calibrated for '
        'the rounds added with spent=ledger) and draw them with a new '
        f'{name}(..., total_rounds=<rounds added>)'
    )
  return int(round_num)


def banded_indices(
    seed: int,
    round_num: int,
    population: int,
    bands: int,
    rate: float,
    attempt: int = 0,
) -> np.ndarray:
  """Round `round_num`'s clients of 'banded' sampling, sorted (int64)."""
  group_size = population // bands
  order = np.random.default_rng([seed, 0x42414E44]).permutation(population)
  group = (round_num - 1) % bands
  members = order[group * group_size : (group + 1) * group_size]
  joined = (
      np.random.default_rng(_coins(seed, round_num, attempt)).random(group_size)
      < rate
  )
  return np.sort(members[joined]).astype(np.int64)
