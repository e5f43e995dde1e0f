"""BLT DP-FTRL: matrix-factorization noise from a Buffered Linear Toeplitz C.

McMahan et al., "Hassle-free DP-FTRL for production" (arXiv 2408.08868);
Dvijotham et al. (arXiv 2404.16706); the math is in
`tff_priv.mechanisms.blt` and `tff_priv.mechanisms.blt_sensitivity`.
`BLTFactory` charges each stream of n rounds, in which each client takes part
at most k times at least b rounds apart, as one Gaussian under the zero-out
relation, client-level; the server adds the noise and sees the clipped
updates ('central'). `plan_streams` plans a run's streams; `resolved` and
`privacy_report` read a plan (the training program's `blt`).
"""

import collections
import dataclasses
import functools
from typing import Any, Optional, Sequence

import dp_accounting
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.accounting import calibration
from tff_priv.accounting import guarantees
from tff_priv.accounting import reports
from tff_priv.accounting import target_noise
from tff_priv.aggregators import correlated_noise
from tff_priv.aggregators import plan as plan_lib
from tff_priv.mechanisms import blt as blt_lib
from tff_priv.mechanisms import blt_sensitivity

GUARANTEE = guarantees.Guarantee(
    unit='client',
    noise='central',
    neighboring_relation='replace_special',
    description=(
        'client-level DP of each BLT stream (each client at most k times, b '
        'rounds apart), its update replaced by zero; the server sees the '
        'clipped updates'
    ),
)


# A BLTFactory process's state; its `noise` holds BLT's buffers
# ([num_buffers, ...] per tensor).
BLTState = correlated_noise.stream_state_class(
    'BLTState',
    __name__,
    accounting=guarantees.StateAccounting(
        factory='BLTFactory',
        relation=GUARANTEE.neighboring_relation,
        noise=GUARANTEE.noise,
        sampling='schedule',
        sampler='StreamSampler',
        schedule=(
            'the (k, b) participation it was built for (each client at most '
            'k times in a stream, b rounds apart)'
        ),
    ),
    legacy_noise_key='buffers',
)


def stream_event(noise_multiplier: float, sensitivity: float):
  """The DpEvent of one stream: one Gaussian of multiplier z / sensitivity."""
  return dp_accounting.GaussianDpEvent(noise_multiplier / sensitivity)


PARTICIPATIONS = ('epoch', 'cyclic')


@dataclasses.dataclass(frozen=True)
class StreamPlan:
  """A run of T rounds cut into BLT streams for a participation schedule.

  Attributes:
    participation: 'epoch' (a stream per epoch of b = N // K rounds, each
      client at most once in it) or 'cyclic' (one stream of T rounds, each
      client every b rounds: k = ceil(T / b) times, b apart).
    rounds_per_stream: n.
    max_participations: k, of one client in a stream.
    min_sep: b, rounds between two participations of one client.
    streams: the streams of the T rounds, each charged once.
    strategy: the BLT optimised for (n, k, b) (`blt_lib.optimize`).
    sensitivity: its (k, b) sensitivity (`blt_sensitivity`).
    noise_multiplier: z: z_t's std is z C per round.
  """

  participation: str
  rounds_per_stream: int
  max_participations: int
  min_sep: int
  streams: int
  strategy: blt_lib.BLT
  sensitivity: float
  noise_multiplier: float

  def event(self) -> dp_accounting.DpEvent:
    """The DpEvent of one stream."""
    return stream_event(self.noise_multiplier, self.sensitivity)


@functools.lru_cache(maxsize=16)
def _optimized(n, min_sep, participations, num_buffers) -> blt_lib.BLT:
  # Cached: a resumed run plans its streams twice (planned, recalibrated).
  return blt_lib.optimize(
      n,
      error='max',
      min_sep=min_sep,
      max_participations=participations,
      num_buffers=num_buffers,
  )


def plan_streams(
    total_rounds: int,
    population: int,
    clients_per_round: int,
    *,
    participation: str = 'epoch',
    epsilon: Optional[float] = None,
    noise_multiplier: Optional[float] = None,
    delta: float = 1e-5,
    num_buffers: Optional[int] = None,
    streams_left: Optional[int] = None,
    spent=None,
) -> StreamPlan:
  """The streams of a BLT run, its strategy, and z for a target eps (or given).

  With `epsilon`, z is calibrated so that the run's streams, each
  `GaussianDpEvent(z / sensitivity)` under zero-out (no amplification),
  compose to eps at `delta` (dp_accounting's RDP accountant): the entry
  point for a user's own loop, beside `StreamSampler` (the same schedule).
  `streams_left` and `spent` (`calibration.Spent`): a resumed run's streams
  still to charge after what its ledger holds.

  Raises:
    ValueError: bad arguments, neither or both of epsilon and
      noise_multiplier; `calibration.BudgetSpentError`: `spent` alone meets
      the target.
  """
  total_rounds = validation.int_at_least('total_rounds', total_rounds, 1)
  population = validation.int_at_least('population', population, 1)
  k = validation.int_at_least('clients_per_round', clients_per_round, 1)
  validation.one_of('participation', participation, PARTICIPATIONS)
  if (epsilon is None) == (noise_multiplier is None):
    raise ValueError('give one of epsilon and noise_multiplier')
  if k > population:
    raise ValueError(f'clients_per_round={k} exceeds population={population}')
  b = population // k
  if participation == 'epoch':
    n, participations, min_sep = b, 1, 1
  else:
    n, participations, min_sep = total_rounds, -(-total_rounds // b), b
  streams = -(-total_rounds // n)
  strategy = _optimized(n, min_sep, participations, num_buffers)
  sensitivity = strategy.sensitivity(n, min_sep, participations)
  if noise_multiplier is None:
    # `streams` unsampled Gaussians of multiplier z / sensitivity: z is
    # their noise std relative to that sensitivity.
    noise_multiplier = target_noise.noise_for_target(
        epsilon,
        delta,
        streams_left or streams,
        sensitivity=sensitivity,
        spent=spent,
    )
  return StreamPlan(
      participation,
      n,
      participations,
      min_sep,
      streams,
      strategy,
      sensitivity,
      validation.positive('noise_multiplier', noise_multiplier),
  )


# The keys of `resolved` that fix a stream's coefficients (the training
# program's `Mechanism.stream`).
STREAM_KEYS = (
    'participation',
    'rounds_per_stream',
    'max_participations',
    'min_sep',
    'sensitivity',
    'buf_decay',
    'output_scale',
)


def resolved(plan: StreamPlan) -> dict[str, Any]:
  """The JSON-ready values of `plan` a run resolves (its schedule, BLT, z)."""
  return {
      'participation': plan.participation,
      'noise_multiplier': plan.noise_multiplier,
      'rounds_per_stream': plan.rounds_per_stream,
      'max_participations': plan.max_participations,
      'min_sep': plan.min_sep,
      'sensitivity': plan.sensitivity,
      'buf_decay': [float(x) for x in plan.strategy.buf_decay],
      'output_scale': [float(x) for x in plan.strategy.output_scale],
  }


def privacy_report(
    plan: StreamPlan, rounds: int, delta: float, epsilon: Optional[float]
) -> dict:
  """eps of a plan's streams by every accountant, or the noise for a target.

  The run's streams (a stream per epoch of N // K rounds, or one stream of
  T rounds with each client every N // K rounds) are unsampled Gaussians of
  multiplier noise_multiplier / sensitivity (no amplification: the sampling
  only sets the schedule). No paper closed form. `rounds` in the report is
  T; `blt.streams` the releases the accountants count.

  Args:
    plan: the run's `plan_streams`.
    rounds: T >= 1.
    delta: the delta of the report.
    epsilon: the target `plan` was calibrated for; None: its noise
      multiplier was given.
  """
  report = reports.gaussian_mechanism_report(
      'blt',
      delta=delta,
      rounds=plan.streams,
      **(
          {'epsilon': epsilon}
          if epsilon is not None
          else {'noise_stddev': plan.noise_multiplier}
      ),
      scale=plan.sensitivity,
  )
  # The accountants' releases are the streams, not the rounds.
  reports.counted_as(report, rounds, plan.streams, 'streams')
  if 'neighboring_relation' in report:
    # The sensitivity is for a client's updates replaced by zero; an
    # unsampled Gaussian's eps is the same under either relation.
    report['neighboring_relation'] = GUARANTEE.neighboring_relation
  report['blt'] = {
      **resolved(plan),
      'streams': plan.streams,
      'note': (
          'rounds is T; the accountants count the streams, each a Gaussian '
          'of multiplier noise_multiplier / sensitivity (noise_multiplier is '
          "the std of each round's z in units of clip)"
      ),
  }
  return report


round_seed = correlated_noise.round_seed


class BLTFactory(
    plan_lib.Planned, tff.aggregators.UnweightedAggregationFactory
):
  """Clipped mean plus BLT-correlated Gaussian noise (DP-FTRL).

  Each round the server clips each client's update to C (`clipping.clip_l2`: a
  non-finite update contributes zeros), sums, adds sigma (C^{-1} z)_t with
  sigma = noise_multiplier x clip and z_t ~ N(0, I) fresh, and divides by the
  public `clients_per_round` K (as `TreeRestartFactory`'s NormalizedQuery). The
  noise comes from the streaming inverse (`blt.inverse_step`): num_buffers
  buffers of the value's shape, in the state. The model's prefix sums then carry
  the noise sigma A C^{-1} z: a post-processing of C x + sigma z.

  Stream and event, in the shape of `TreeRestartFactory`: a stream covers
  `rounds_per_stream` = n rounds and restarts (buffers zeroed) every n rounds
  and at the first round after `force_restart` (the program's resume: rounds run
  again get noise charged to a new stream). A stream of n rounds in which each
  client takes part at most k times, at least b rounds apart, is one
  `GaussianDpEvent(noise_multiplier / sensitivity)` (sensitivity = that of C for
  n rounds and (k, b), `blt_sensitivity`) under the zero-out relation
  (dp_accounting's REPLACE_SPECIAL: a client's update replaced by zero in the
  rounds it takes part in, which is what the column-sum bound of
  Choquette-Choo et al. bounds). The state's `dp_event` is
  `SelfComposedDpEvent(that, 1)` at a stream's first round and
  `SelfComposedDpEvent(that, 0)` otherwise: a stream is charged whole before
  anything of it is released. No amplification by sampling is claimed: the
  event is for the pattern (k, b), which the caller's sampling must guarantee.

  Noise seeds: round r's z is drawn from `fold_in(fold_in(fold_in(key,
  n[0]), n[1]), r)`, `key` 63 bits from Python's `secrets` per `create()`, `n`
  TF's nondeterministic integers drawn anew at every call of `next`
  (`correlated_noise`, shared with `BandMFFactory`): a round run again never
  releases a z it released before. Neither is released.

  Adversary: the server adds the noise and sees the clipped updates ('central').

  Args:
    noise_multiplier: z > 0: z_t's std is z C (the stream's Gaussian has
      multiplier z / sensitivity).
    clients_per_round: K, the sum's divisor.
    clip: C > 0, the L2 clip of each client's update.
    buf_decay, output_scale: the BLT of the strategy C (e.g. from
      `tff_priv.mechanisms.blt.optimize`); must give C >= 0, non-increasing,
      with a stable inverse.
    rounds_per_stream: n >= 1: the stream restarts every n rounds; the
      sensitivity is C's over n rounds.
    max_participations: k >= 1 participations of one client per stream.
    min_sep: b >= 1 rounds between two participations of one client.
    noise_seed: None (a secret key from the operating system); an int is
      the key and the nonce is 0 (tests only: then no guarantee holds).
    planned_rounds: None, or T: the state carries the plan and the T+1-th
      round is refused (`tff_priv.aggregators.plan`; `calibrated` sets it).
  """

  def __init__(
      self,
      noise_multiplier: float,
      clients_per_round: int,
      clip: float,
      buf_decay: Sequence[float],
      output_scale: Sequence[float],
      rounds_per_stream: int,
      max_participations: int = 1,
      min_sep: int = 1,
      noise_seed: Optional[int] = None,
      planned_rounds: Optional[int] = None,
  ):
    self._z = validation.positive('noise_multiplier', noise_multiplier)
    self._k = validation.int_at_least('clients_per_round', clients_per_round, 1)
    self._clip = validation.positive('clip', clip)
    self._rounds = validation.int_at_least(
        'rounds_per_stream', rounds_per_stream, 1
    )
    self._participations = validation.int_at_least(
        'max_participations', max_participations, 1
    )
    self._min_sep = validation.int_at_least('min_sep', min_sep, 1)
    self._blt = blt_lib.blt_from_lists(buf_decay, output_scale)
    # Refuses (ValueError) a C that is not >= 0 and non-increasing.
    blt_sensitivity.check_non_negative_non_increasing(
        self._blt.toeplitz_coefs(self._rounds)
    )
    self._sensitivity = self._blt.sensitivity(
        self._rounds, self._min_sep, self._participations
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
      participation: str = 'epoch',
      delta: float = 1e-5,
      clip: float = 1.0,
      num_buffers: Optional[int] = None,
      spent=None,
  ) -> 'BLTFactory':
    """A BLTFactory whose run of `total_rounds` rounds meets (eps, delta).

    For a loop that draws its clients with `tff_priv.program.StreamSampler`
    of the same `participation` (and N, K, T), and charges each round's
    state with `PrivacyLedger.record_round(state)` (no sampling arguments):
    the ledger then holds the run's streams (`plan_streams`), whose eps at
    `delta` is at most `epsilon`. Round T+1 is refused (`plan`).

    `spent`: a `PrivacyLedger` of earlier rounds: the `total_rounds` rounds
    added (new streams) are calibrated so that they and its charges meet
    `epsilon` together (a plan extended).
    """
    plan = plan_streams(
        total_rounds,
        population,
        clients_per_round,
        participation=participation,
        epsilon=epsilon,
        delta=delta,
        num_buffers=num_buffers,
        spent=calibration.Spent.of(spent),
    )
    return cls.from_plan(
        plan, clients_per_round, clip, planned_rounds=total_rounds
    )

  @classmethod
  def from_plan(
      cls,
      plan: StreamPlan,
      clients_per_round: int,
      clip: float,
      planned_rounds: Optional[int] = None,
  ) -> 'BLTFactory':
    """The factory of a `StreamPlan`."""
    return cls(
        plan.noise_multiplier,
        clients_per_round,
        clip,
        list(plan.strategy.buf_decay),
        list(plan.strategy.output_scale),
        plan.rounds_per_stream,
        plan.max_participations,
        plan.min_sep,
        planned_rounds=planned_rounds,
    )

  @property
  def guarantee(self) -> guarantees.Guarantee:
    return GUARANTEE

  @property
  def sensitivity(self) -> float:
    return self._sensitivity

  @property
  def clip(self) -> float:
    """The L2 clip C of each client's update."""
    return self._clip

  def audit_spec(self) -> guarantees.AuditSpec:
    """Its clip; coordinatewise: a clipped sum plus noise per coordinate."""
    return guarantees.AuditSpec(clip=self._clip, coordinatewise='central_sum')

  @property
  def blt(self) -> blt_lib.BLT:
    return self._blt

  @property
  def rounds_per_stream(self) -> int:
    return self._rounds

  @property
  def max_participations(self) -> int:
    """k: the participations of one client a stream's event allows."""
    return self._participations

  @property
  def min_sep(self) -> int:
    """b: the rounds a stream's event needs between two participations."""
    return self._min_sep

  def event(self) -> dp_accounting.DpEvent:
    """The DpEvent of one stream."""
    return stream_event(self._z, self._sensitivity)

  def create(self, value_type):
    specs = tff.types.type_to_tf_tensor_specs(value_type)
    rounds = self._rounds
    event = self.event()
    fixed = self._noise_seed is not None
    key = correlated_noise.new_key(self._noise_seed)
    nbuf = self._blt.num_buffers
    theta = self._blt.buf_decay
    omega = self._blt.output_scale

    def charged(count):
      return dp_accounting.SelfComposedDpEvent(event, count).to_named_tuple()

    planned = self._planned

    def initial_state():
      return correlated_noise.stream_state(
          BLTState,
          planned,
          noise=tf.nest.map_structure(
              lambda s: tf.zeros([nbuf] + s.shape.as_list(), s.dtype), specs
          ),
          nonce=correlated_noise.initial_nonce(fixed),
          rounds_done=tf.constant(0, tf.int64),
          force_restart=tf.constant(False),
          dp_event=charged(tf.constant(1, tf.int32)),
          is_init_state=tf.constant(True),
      )

    @correlated_noise.refusing_past(planned, 'BLTFactory')
    def add_noise(state, total):
      restart = tf.logical_or(
          state.force_restart, tf.equal(state.rounds_done % rounds, 0)
      )
      buffers = tf.nest.map_structure(
          lambda b: tf.where(restart, tf.zeros_like(b), b), state.noise
      )
      nonce, z = correlated_noise.round_noise(
          key,
          fixed,
          state.nonce,
          state.force_restart,
          state.rounds_done,
          total,
      )
      flat_noise, flat_buffers = [], []
      for b, zi in zip(tf.nest.flatten(buffers), tf.nest.flatten(z)):
        x, b = blt_lib.inverse_step(b, zi, theta, omega)
        flat_noise.append(x)
        flat_buffers.append(b)
      result, measurements = correlated_noise.noised_mean(
          total,
          flat_noise,
          self._z * self._clip,
          float(self._k),
          state.rounds_done,
      )
      new_state = correlated_noise.stream_state(
          BLTState,
          planned,
          noise=tf.nest.pack_sequence_as(buffers, flat_buffers),
          nonce=nonce,
          rounds_done=state.rounds_done + 1,
          force_restart=tf.constant(False),
          dp_event=charged(tf.cast(restart, tf.int32)),
          is_init_state=tf.constant(False),
      )
      return collections.OrderedDict(
          state=new_state, result=result, measurements=measurements
      )

    return correlated_noise.stream_process(
        value_type, self._clip, initial_state, add_noise
    )


# `aggregator_state` set to restart its stream at the next round.
with_restart_forced = correlated_noise.with_restart_forced
