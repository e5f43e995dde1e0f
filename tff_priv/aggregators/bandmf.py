"""Amplified BandMF: banded matrix-factorization noise with Poisson sampling.

Choquette-Choo et al., "(Amplified) Banded Matrix Factorization: A unified
approach to private training" (arXiv 2306.08153); the math (strategy,
optimiser, choice of bands, privacy argument) is in
`tff_priv.mechanisms.bandmf`. `BandMFFactory` is client-level DP under
add-or-remove-one, one Poisson-sampled Gaussian per cycle of b rounds, for
clients drawn by `tff_priv.program.BandSampler`; the server adds the noise
and sees the clipped updates ('central'). `plan_bands` plans a run's bands;
`resolved` and `privacy_report` read a plan (the training program's `bandmf`).
"""

import collections
import dataclasses
import functools
from typing import Any, Optional, Sequence

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.accounting import calibration
from tff_priv.accounting import guarantees
from tff_priv.accounting import reports
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.accounting import target_noise
from tff_priv.aggregators import correlated_noise
from tff_priv.aggregators import plan as plan_lib
from tff_priv.mechanisms import bandmf as bandmf_lib

GUARANTEE = guarantees.Guarantee(
    unit='client',
    noise='central',
    neighboring_relation='add_or_remove_one',
    description=(
        'client-level DP of banded matrix-factorization noise with clients '
        'Poisson-sampled inside b cyclic groups (BandSampler); the server '
        'sees the clipped updates'
    ),
)


# A BandMFFactory process's state; its `noise` holds the window of its last
# b - 1 noise draws.
BandMFState = correlated_noise.stream_state_class(
    'BandMFState',
    __name__,
    accounting=guarantees.StateAccounting(
        factory='BandMFFactory',
        relation=GUARANTEE.neighboring_relation,
        noise=GUARANTEE.noise,
        sampling='own',
        sampler='BandSampler',
        schedule=(
            'the cyclic Poisson sampling of rate q within its b groups of '
            'clients'
        ),
    ),
    legacy_noise_key='window',
)


def cycle_event(
    noise_multiplier: float, sampling_probability: float
) -> dp_accounting.DpEvent:
  """The DpEvent of one cycle of b rounds (each client in one of them)."""
  return dp_accounting.PoissonSampledDpEvent(
      sampling_probability, dp_accounting.GaussianDpEvent(noise_multiplier)
  )


@dataclasses.dataclass(frozen=True)
class BandPlan:
  """An amplified BandMF run of T rounds.

  Attributes:
    bands: b.
    coefs: C's b Toeplitz coefficients (unit L2 norm).
    sampling_probability: q = K / floor(N / b), within a round's group.
    cycles: ceil(T / b), each charged once.
    noise_multiplier: z: sigma = z x clip.
    scores: {b: z_b^2 x mean prefix variance} of every b compared (empty
      when b was given).
  """

  bands: int
  coefs: np.ndarray
  sampling_probability: float
  cycles: int
  noise_multiplier: float
  scores: dict = dataclasses.field(default_factory=dict)

  def event(self) -> dp_accounting.DpEvent:
    """The DpEvent of one cycle."""
    return cycle_event(self.noise_multiplier, self.sampling_probability)


def _calibrated(choice, epsilon, delta, cycles_left, spent, tol=1e-4):
  return target_noise.noise_for_target(
      epsilon,
      delta,
      cycles_left or choice.participations,
      sampling=sampling_lib.Sampling.poisson(choice.sampling_probability),
      spent=spent,
      tol=tol,
  )


def plan_bands(
    total_rounds: int,
    population: int,
    clients_per_round: int,
    *,
    epsilon: Optional[float] = None,
    noise_multiplier: Optional[float] = None,
    delta: float = 1e-5,
    bands: Optional[int] = None,
    cycles_left: Optional[int] = None,
    spent=None,
) -> BandPlan:
  """The bands, strategy and z of a run, for a target eps (or z given).

  With `epsilon` and no `bands`, every b of `bandmf.candidate_bands` is
  optimised and calibrated, and the one of least z^2 x mean prefix-sum
  variance is kept (jax_privacy's `optimize_coefs_for_amplifications`): a
  function of (T, N, K, eps, delta) only. b = 1 is DP-FedAvg, so the choice
  is never worse than it by this measure.

  Raises:
    ValueError: bad arguments, neither or both of epsilon and
      noise_multiplier, `bands` without `epsilon` or `noise_multiplier`;
      `calibration.BudgetSpentError`: `spent` alone meets the target.
  """
  if (epsilon is None) == (noise_multiplier is None):
    raise ValueError('give one of epsilon and noise_multiplier')
  if bands is None and epsilon is None:
    raise ValueError(
        'choosing bands needs epsilon; give bands with ' 'noise_multiplier'
    )
  validation.int_at_least('population', population, 1)
  validation.int_at_least('clients_per_round', clients_per_round, 1)
  if clients_per_round > population:
    raise ValueError(
        f'clients_per_round={clients_per_round} exceeds '
        f'population={population}'
    )
  options = (
      [bands]
      if bands is not None
      else bandmf_lib.candidate_bands(
          population, clients_per_round, total_rounds
      )
  )
  scores, best = {}, None
  for b in options:
    choice = bandmf_lib.band_choice(
        total_rounds, population, clients_per_round, b
    )
    z = noise_multiplier
    if z is None:
      # Compared at a coarser tolerance (the scores differ by percents);
      # the one kept is calibrated exactly below.
      z = _calibrated(
          choice,
          epsilon,
          delta,
          cycles_left,
          spent,
          tol=1e-2 if bands is None else 1e-4,
      )
    score = z * z * bandmf_lib.loss(choice.coefs, total_rounds)
    if bands is None:
      scores[b] = score
    if best is None or score < best[0]:
      best = (score, choice, z)
  _, choice, z = best
  if noise_multiplier is None and bands is None:
    z = _calibrated(choice, epsilon, delta, cycles_left, spent)
  return BandPlan(
      choice.bands,
      choice.coefs,
      choice.sampling_probability,
      choice.participations,
      validation.positive('noise_multiplier', z),
      scores,
  )


@functools.lru_cache(maxsize=16)
def cached_plan_bands(
    total_rounds: int,
    population: int,
    clients_per_round: int,
    epsilon: Optional[float],
    noise_multiplier: Optional[float],
    delta: float,
    bands: Optional[int],
) -> BandPlan:
  """`plan_bands` of a run with nothing spent, cached by its arguments.

  Cached: a resumed run plans twice (the bands, then its noise left); each
  candidate's calibration takes seconds. The same arguments give the same
  `BandPlan` object: not to be modified.
  """
  return plan_bands(
      total_rounds,
      population,
      clients_per_round,
      epsilon=epsilon,
      noise_multiplier=noise_multiplier,
      delta=delta,
      bands=bands,
  )


# The keys of `resolved` that fix the noise's coefficients (the training
# program's `Mechanism.stream`).
STREAM_KEYS = ('bands', 'sampling_probability', 'coefs')


def resolved(plan: BandPlan) -> dict[str, Any]:
  """The JSON-ready values of `plan` a run resolves (its bands, C, q, z)."""
  return {
      'noise_multiplier': plan.noise_multiplier,
      'bands': plan.bands,
      'sampling_probability': plan.sampling_probability,
      'cycles': plan.cycles,
      'coefs': [float(c) for c in plan.coefs],
      'scores': {str(b): s for b, s in plan.scores.items()},
  }


def privacy_report(
    plan: BandPlan, rounds: int, delta: float, epsilon: Optional[float]
) -> dict:
  """eps of a plan's cycles by every accountant, or the noise for a target.

  The run's releases are its ceil(T / b) cycles, each a Poisson-sampled
  Gaussian (q = K / floor(N / b), multiplier z) under add-or-remove-one. No
  paper closed form. `rounds` in the report is T; `bandmf.cycles` the
  releases the accountants count.

  Args:
    plan: the run's `plan_bands`.
    rounds: T >= 1.
    delta: the delta of the report.
    epsilon: the target `plan` was calibrated for; None: its noise
      multiplier was given.
  """
  report = reports.gaussian_mechanism_report(
      'bandmf',
      delta=delta,
      rounds=plan.cycles,
      **(
          {'epsilon': epsilon}
          if epsilon is not None
          else {'noise_multiplier': plan.noise_multiplier}
      ),
      sampling=sampling_lib.Sampling.poisson(plan.sampling_probability),
  )
  reports.counted_as(report, rounds, plan.cycles, 'cycles')
  report['neighboring_relation'] = GUARANTEE.neighboring_relation
  report['bandmf'] = {
      **resolved(plan),
      'note': (
          'rounds is T; the accountants count the cycles of b rounds, '
          'each a Poisson-sampled Gaussian of multiplier '
          'noise_multiplier'
      ),
  }
  return report


class BandMFFactory(
    plan_lib.Planned, tff.aggregators.UnweightedAggregationFactory
):
  """Clipped mean plus banded-Toeplitz-correlated Gaussian noise.

  Each round the server clips each client's update to C (`clipping.clip_l2`: a
  non-finite update contributes zeros), sums, adds sigma (C^{-1} z)_t with
  sigma = noise_multiplier x clip, z_t ~ N(0, I) fresh, C the b-banded Toeplitz
  strategy (unit column norm), and divides by the public `clients_per_round`
  K. (C^{-1} z)_t comes from the last b - 1 outputs, kept in the state's
  `noise` (its window).

  Event and schedule. The clients must be drawn as the theorem assumes:
  `tff_priv.program.BandSampler` (a secret partition into b groups, round t
  Poisson-samples group (t - 1) mod b with q = K / floor(N / b)). Then each
  cycle of b rounds is, for every client, one
  `PoissonSampledDpEvent(q, GaussianDpEvent(noise_multiplier))` under
  add-or-remove-one: the state's `dp_event` is `SelfComposedDpEvent(that, 1)`
  at a cycle's first round and `SelfComposedDpEvent(that, 0)` at the others,
  so a cycle is charged whole before anything of it is released. The
  amplification is in the event: `PrivacyLedger.record_round(state)` takes no
  sampling arguments for this state.

  Restarts: `with_restart_forced` (a loop that runs rounds again from a
  restored state) zeroes the window and charges a new cycle at the next round
  (it runs to the next multiple of b, each client at most once in it); a
  round run again draws fresh z (the seeds below).

  Noise seeds: as BLTFactory's (`correlated_noise`): round r's z from
  `round_seed(key, NonDeterministicInts, r)`, `key` 63 bits from Python's
  `secrets` per `create()`: never derivable from anything released, never
  repeated. With a fixed `noise_seed` (tests only) the nonce is the state's,
  moved at each forced restart.

  Adversary: the server adds the noise and sees the clipped updates
  ('central'); the guarantee is for an analyst who sees the released models.

  Args:
    noise_multiplier: z > 0: sigma = z x clip (C has unit column norm).
    clients_per_round: K, the sum's divisor (the expected clients a round).
    clip: C > 0, the L2 clip of each client's update.
    coefs: C's b >= 1 Toeplitz coefficients (scaled here to unit L2 norm;
      c_0 > 0).
    sampling_probability: q in (0, 1], each client's probability in its
      group's round (`BandSampler`).
    noise_seed: None (a secret key from the operating system); an int is the
      key and the nonce is 0 (tests only: then no guarantee holds).
    planned_rounds: None, or T: the state carries the plan and the T+1-th
      round is refused (`tff_priv.aggregators.plan`; `calibrated` sets it).
  """

  def __init__(
      self,
      noise_multiplier: float,
      clients_per_round: int,
      clip: float,
      coefs: Sequence[float],
      sampling_probability: float,
      noise_seed: Optional[int] = None,
      planned_rounds: Optional[int] = None,
  ):
    self._z = validation.positive('noise_multiplier', noise_multiplier)
    self._k = validation.int_at_least('clients_per_round', clients_per_round, 1)
    self._clip = validation.positive('clip', clip)
    c = np.asarray(coefs, np.float64).reshape(-1)
    if c.size < 1 or not np.all(np.isfinite(c)) or not c[0] > 0:
      raise ValueError(
          'coefs must be finite with coefs[0] > 0, got ' f'{list(c)}'
      )
    self._coefs = c / np.linalg.norm(c)
    self._q = validation.half_open_unit(
        'sampling_probability', sampling_probability
    )
    self._noise_seed = noise_seed
    self._planned = plan_lib.planned(planned_rounds)

  @classmethod
  def calibrated(
      cls,
      epsilon: float,
      *,
      total_rounds: int,
      population: int,
      clients_per_round: int,
      delta: float = 1e-5,
      clip: float = 1.0,
      bands: Optional[int] = None,
      spent=None,
  ) -> 'BandMFFactory':
    """A factory whose run of `total_rounds` rounds meets (eps, delta).

    For a loop that draws its clients with `tff_priv.program.BandSampler(N,
    K, factory.bands)` and charges each round's state with
    `PrivacyLedger.record_round(state)` (no sampling arguments): the ledger
    then holds ceil(T / b) cycle events, whose eps at `delta` is at most
    `epsilon`. `bands` None: chosen by `plan_bands`. Round T+1 is refused
    (`plan`). `spent`: a `PrivacyLedger` of earlier rounds: the
    `total_rounds` rounds added (new cycles) are calibrated so that they and
    its charges meet `epsilon` together (a plan extended).
    """
    plan = plan_bands(
        total_rounds,
        population,
        clients_per_round,
        epsilon=epsilon,
        delta=delta,
        bands=bands,
        spent=calibration.Spent.of(spent),
    )
    return cls.from_plan(
        plan, clients_per_round, clip, planned_rounds=total_rounds
    )

  @classmethod
  def from_plan(
      cls,
      plan: BandPlan,
      clients_per_round: int,
      clip: float,
      planned_rounds: Optional[int] = None,
  ) -> 'BandMFFactory':
    """The factory of a `BandPlan`."""
    return cls(
        plan.noise_multiplier,
        clients_per_round,
        clip,
        list(plan.coefs),
        plan.sampling_probability,
        planned_rounds=planned_rounds,
    )

  @property
  def guarantee(self) -> guarantees.Guarantee:
    return GUARANTEE

  @property
  def bands(self) -> int:
    return int(self._coefs.size)

  @property
  def coefs(self) -> np.ndarray:
    return self._coefs.copy()

  @property
  def clip(self) -> float:
    return self._clip

  def audit_spec(self) -> guarantees.AuditSpec:
    """Its clip; coordinatewise: a clipped sum plus noise per coordinate."""
    return guarantees.AuditSpec(clip=self._clip, coordinatewise='central_sum')

  @property
  def noise_multiplier(self) -> float:
    return self._z

  @property
  def sampling_probability(self) -> float:
    return self._q

  def event(self) -> dp_accounting.DpEvent:
    """The DpEvent of one cycle of `bands` rounds."""
    return cycle_event(self._z, self._q)

  def create(self, value_type):
    specs = tff.types.type_to_tf_tensor_specs(value_type)
    bands = self.bands
    event = self.event()
    fixed = self._noise_seed is not None
    key = correlated_noise.new_key(self._noise_seed)
    coefs = self._coefs

    def charged(count):
      return dp_accounting.SelfComposedDpEvent(event, count).to_named_tuple()

    planned = self._planned

    def initial_state():
      return correlated_noise.stream_state(
          BandMFState,
          planned,
          noise=tf.nest.map_structure(
              lambda s: tf.zeros([bands - 1] + s.shape.as_list(), s.dtype),
              specs,
          ),
          nonce=correlated_noise.initial_nonce(fixed),
          rounds_done=tf.constant(0, tf.int64),
          force_restart=tf.constant(False),
          dp_event=charged(tf.constant(1, tf.int32)),
          is_init_state=tf.constant(True),
      )

    def inverse_step(window, z):
      # w_t = (z_t - sum_{i=1}^{b-1} c_i w_{t-i}) / c_0; window[i-1] = w_{t-i}.
      if bands == 1:
        return z / tf.constant(coefs[0], z.dtype), window
      inner = tf.tensordot(tf.constant(coefs[1:], z.dtype), window, axes=1)
      w = (z - inner) / tf.constant(coefs[0], z.dtype)
      return w, tf.concat([w[tf.newaxis], window[:-1]], axis=0)

    @correlated_noise.refusing_past(planned, 'BandMFFactory')
    def add_noise(state, total):
      restart = state.force_restart
      rounds_done = state.rounds_done
      window = tf.nest.map_structure(
          lambda w: tf.where(restart, tf.zeros_like(w), w), state.noise
      )
      nonce, z = correlated_noise.round_noise(
          key, fixed, state.nonce, restart, rounds_done, total
      )
      flat_noise, flat_window = [], []
      for w_prev, zi in zip(tf.nest.flatten(window), tf.nest.flatten(z)):
        w, w_prev = inverse_step(w_prev, zi)
        flat_noise.append(w)
        flat_window.append(w_prev)
      result, measurements = correlated_noise.noised_mean(
          total, flat_noise, self._z * self._clip, float(self._k), rounds_done
      )
      new_state = correlated_noise.stream_state(
          BandMFState,
          planned,
          noise=tf.nest.pack_sequence_as(window, flat_window),
          nonce=nonce,
          rounds_done=rounds_done + 1,
          force_restart=tf.constant(False),
          # A cycle's first round charges the whole cycle; a forced restart
          # starts a new one (the rounds up to the next multiple of b: each
          # client at most once in them, b rounds from its next).
          dp_event=charged(
              tf.cast(
                  tf.logical_or(restart, tf.equal(rounds_done % bands, 0)),
                  tf.int32,
              )
          ),
          is_init_state=tf.constant(False),
      )
      return collections.OrderedDict(
          state=new_state, result=result, measurements=measurements
      )

    return correlated_noise.stream_process(
        value_type, self._clip, initial_state, add_noise
    )


# `aggregator_state` set to start new cycles (charged) at the next round.
with_restart_forced = correlated_noise.with_restart_forced
