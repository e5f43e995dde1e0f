"""Empirical lower bound on the eps of one round of an aggregation factory.

`audit_aggregator` runs a factory's own `tff.templates.AggregationProcess` many
times on two neighbouring client sets (with and without a worst-case canary
client), distinguishes them from everything the process releases (the
aggregate and every measurement), and turns the test's errors into a
Clopper-Pearson lower bound on eps (`tff_priv.auditing.bounds`), set beside the
eps the factory claims for that round.
"""

import dataclasses
import math
import time
from typing import Any, Optional, Sequence
import warnings

from absl import logging
import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.accounting import accountants
from tff_priv.accounting import guarantees
from tff_priv.auditing import bounds
from tff_priv.auditing import tradeoff


class AuditFailedError(AssertionError):
  """An audit's empirical lower bound exceeds the claimed eps."""


class AuditFailedWarning(UserWarning):
  """Warned by `audit_aggregator` whenever an audit fails."""


@dataclasses.dataclass(frozen=True)
class AuditResult:
  """The outcome of `audit_aggregator`.

  Attributes:
    mechanism: the factory's class name.
    epsilon_lower_bound: eps that the process is shown to exceed at `delta`,
      with probability >= 1 - alpha.
    claimed_epsilon: the claimed eps of one round at `delta` (inf for a
      non-private event).
    claimed_dp_event: the claimed round event, as text.
    accountant: 'pld' or 'rdp', the accountant that read the claim.
    delta: the delta of both numbers.
    alpha: the bound's error probability.
    neighboring_relation: 'add_or_remove_one' (the canary client joins) or
      'replace_one' (the canary replaces a client).
    noise: where the factory adds its noise ('local', 'secure_sum',
      'central'; '' when unknown).
    trials: runs of the process per client set (both sets run this many).
    selection_trials: runs per set used to choose the test.
    evaluation_trials: runs per set the bound is computed from.
    false_positives: evaluation runs without the canary guessed "with".
    false_negatives: evaluation runs with the canary guessed "without".
    max_epsilon_lower_bound: the largest bound the evaluation trials can show
      (a perfect test); a bound equal to it means "at least this".
    statistic: which released value the chosen (eps, delta) test reads.
    seconds: wall time of the audit.
    passed: neither bound refutes the claim: epsilon_lower_bound <=
      claimed_epsilon and the mu test's point lies on or above the claimed
      trade-off curve (for a Gaussian claim: mu_lower_bound <= claimed_mu).
    mu_lower_bound: the Gaussian-DP bound (`tradeoff.mu_lower_bound`): a
      mu-GDP process has mu >= this with probability >= 1 - alpha / 2.
    mu_epsilon_lower_bound: the eps at `delta` of a mu_lower_bound-GDP
      mechanism: a lower bound on the true eps when the process's trade-off
      curve is Gaussian (what a GaussianDpEvent claims).
    claimed_mu: 1 / z for a claimed GaussianDpEvent(z); nan for other claims
      (judged by their own trade-off curve, `tradeoff.violates_profile`).
    max_mu_lower_bound: the largest mu bound the evaluation trials can show.
    max_showable_epsilon: the largest eps either bound can show: the
      larger of max_epsilon_lower_bound and the eps of max_mu_lower_bound (the
      latter for claims with a Gaussian curve).
    mu_statistic: which released value the mu test reads.
    refuted_by: '' (passed), 'eps', 'mu' or 'eps+mu'.
    vectorized: True when the trials ran as blocks of one call
      (`audit_aggregator`'s `vectorized`).
  """

  mechanism: str
  epsilon_lower_bound: float
  claimed_epsilon: float
  claimed_dp_event: str
  accountant: str
  delta: float
  alpha: float
  neighboring_relation: str
  noise: str
  trials: int
  selection_trials: int
  evaluation_trials: int
  false_positives: int
  false_negatives: int
  max_epsilon_lower_bound: float
  statistic: str
  seconds: float
  passed: bool
  mu_lower_bound: float = 0.0
  mu_epsilon_lower_bound: float = 0.0
  claimed_mu: float = math.nan
  max_mu_lower_bound: float = 0.0
  max_showable_epsilon: float = 0.0
  mu_statistic: str = ''
  refuted_by: str = ''
  vectorized: bool = False

  def raise_if_failed(self) -> 'AuditResult':
    """Raises `AuditFailedError` if the audit failed, else returns self."""
    if not self.passed:
      raise AuditFailedError(self.summary())
    return self

  def summary(self) -> str:
    verdict = 'passed' if self.passed else 'FAILED'
    refuted = f' (refuted by {self.refuted_by})' if self.refuted_by else ''
    return (
        f'audit {verdict}{refuted}: {self.mechanism}: empirical eps >= '
        f'{self.epsilon_lower_bound:.3f} (max showable '
        f'{self.max_epsilon_lower_bound:.3f}, {self.evaluation_trials} '
        f'evaluation trials per set, from {self.statistic}); GDP mu >= '
        f'{self.mu_lower_bound:.4f} (eps {self.mu_epsilon_lower_bound:.3f} '
        f'if Gaussian; claimed mu {self.claimed_mu:.4f}); largest showable '
        f'eps {self.max_showable_epsilon:.3f}; vs claimed eps '
        f'{self.claimed_epsilon:.3f} ({self.claimed_dp_event}, '
        f'{self.neighboring_relation}) at delta={self.delta:g}'
    )


def _flat_leaves(value, path=()):
  """[(path, np.ndarray)] of every leaf of a TFF-returned structure."""
  if isinstance(value, tff.structure.Struct) or tf.nest.is_nested(value):
    struct = (
        value
        if isinstance(value, tff.structure.Struct)
        else tff.structure.from_container(value)
    )
    out = []
    for i, (name, element) in enumerate(tff.structure.iter_elements(struct)):
      out.extend(_flat_leaves(element, path + (name or str(i),)))
    return out
  return [('/'.join(path), np.asarray(value, np.float64).ravel())]


def _tff_gaussian_clip(factory) -> Optional[float]:
  """The clip of TFF's `DifferentiallyPrivateFactory.gaussian_fixed`, else None.

  TFF exposes no accessor: the clip is the `l2_norm_clip` of the
  tensorflow_privacy `GaussianSumQuery` inside its `NormalizedQuery`.
  """
  query = getattr(factory, '_query', None)
  query = getattr(query, '_numerator', query)
  clip = getattr(query, '_l2_norm_clip', None)
  if isinstance(clip, (int, float)) and clip > 0:
    return float(clip)
  return None


def _default_canary(factory, initial_state, dimension, rng):
  """(canary, replaced value, domain center) worst case for known factories."""
  # LDP-FL's 'fixed' range: the canary and the client it replaces sit at the
  # two ends of every coordinate's range [c - r, c + r].
  center = getattr(initial_state, 'center', None)
  radius = getattr(initial_state, 'radius', None)
  if type(factory).__name__ == 'LDPEncodeFactory':
    if getattr(factory, 'range_mode', None) != 'fixed':
      raise ValueError(
          'the default LDP canary needs range_mode="fixed"; pass canary='
      )
    c = np.asarray(center, np.float64).ravel()
    r = np.asarray(radius, np.float64).ravel()
    if c.size != 1:
      raise ValueError('the default LDP canary needs one tensor; pass canary=')
    base = np.full(dimension, c[0])
    return base + r[0], base - r[0], base
  clip = getattr(factory, 'clip', None)
  if not isinstance(clip, (int, float)):
    clip = _tff_gaussian_clip(factory)
  if clip is None:
    raise ValueError(
        f'no default canary for {type(factory).__name__} (no clip known): '
        'pass canary= (the canary client\'s value)'
    )
  direction = rng.standard_normal(dimension)
  canary = clip * direction / np.linalg.norm(direction)
  return canary, -canary, np.zeros(dimension)


def _batched_runner(process, batch_size, weighted):
  """A federated computation running `process.next` `batch_size` times.

  Every call is a genuine, independent run of the factory's `next` on the
  same state and client values (fresh client and server randomness each);
  gathering them in one computation only saves TFF's per-call overhead.
  """
  state_type = process.next.type_signature.parameter[0]
  value_type = process.next.type_signature.parameter[1]

  def outputs(state, *args):
    results = []
    for _ in range(batch_size):
      out = process.next(state, *args)
      results.append((out.result, out.measurements))
    return tff.federated_zip(tuple(results))

  if weighted:
    weight_type = process.next.type_signature.parameter[2]

    @tff.federated_computation(state_type, value_type, weight_type)
    def run(state, value, weight):
      return outputs(state, value, weight)

  else:

    @tff.federated_computation(state_type, value_type)
    def run(state, value):
      return outputs(state, value)

  return run


# Vectorised trials. A block of the value is one trial when the factory is
# coordinatewise: coordinate j of the release depends on coordinate j of the
# clients' values (through their sum, or the one client's value) and on noise
# drawn independently for each coordinate, and no clip binds. Then a call on B
# blocks of d values, each client holding its trial value in every block, draws
# B independent releases of the d-value factory: block b of the release has
# exactly the distribution of one unbatched release. Two kinds are known to be
# coordinatewise (and `_vector_kind` finds them):
#   'central_sum': TFF's DifferentiallyPrivateFactory.gaussian_fixed: each
#     client clipped to C, summed, N(0, (zC)^2) added to each coordinate of the
#     sum, divided by the FIXED clients_per_round. Add-or-remove-one. One
#     canary of norm a tiled over B blocks has norm a sqrt(B) and would be
#     clipped, so the canary's value is split over m = ceil(a sqrt(B) / C)
#     canary clients of a / m per block (each of norm <= C, not clipped):
#     their sum, all the factory reads, is the canary in every block. The
#     other clients hold 0 (their fixed values only shift both sets alike).
#   'single_client': one client under replace-one whose upload is noised per
#     coordinate with nothing coupling coordinates: tff_priv's
#     ClientNoiseFactory without a clip (udp: N(0, s^2) per coordinate, s not
#     a function of the dimension) and LDPEncodeFactory with a fixed range
#     (each scalar encoded on its own). The client holds the canary, or the
#     replaced value, in every block.
# Measurements are one per call, not per trial: the vectorised path reads the
# aggregate only (use vectorized=False to audit measurements).


def _vector_kind(factory, relation, num_clients, initial_state):
  """'central_sum', 'single_client' or None (see the comment above)."""
  if initial_state is not None:
    return None
  name = type(factory).__name__
  if (name == 'DifferentiallyPrivateFactory'
      and _tff_gaussian_clip(factory) is not None
      and relation == 'add_or_remove_one'):
    return 'central_sum'
  if num_clients != 1 or relation != 'replace_one':
    return None
  if name == 'ClientNoiseFactory' and getattr(factory, '_clip', 1.0) is None:
    source = type(getattr(factory, '_source', None)).__name__
    if source in ('FixedNoise', 'ScheduledNoise'):
      return 'single_client'
  if name == 'LDPEncodeFactory' and getattr(factory, 'range_mode', '') == 'fixed':
    return 'single_client'
  return None


def vectorizable(factory, num_clients: int) -> bool:
  """Whether `audit_aggregator` vectorises this factory's trials by default."""
  guarantee = guarantees.guarantee_of(factory)
  if guarantee is None:
    return False
  return _vector_kind(
      factory, guarantee.neighboring_relation, num_clients, None) is not None


def _vectorized_statistics(
    factory, kind, weighted, dtype, trials, canary, replaced, center,
    num_clients, values_per_call,
):
  """The canary-direction statistic of `trials` releases per set, blocks of one call."""
  d = canary.size
  if kind == 'central_sum':
    clip = _tff_gaussian_clip(factory)
    if np.any(center != 0):
      raise ValueError('the vectorised central sum needs the center at 0')
    norm = float(np.linalg.norm(canary))

    def canary_clients(blocks):
      return max(1, math.ceil(norm * math.sqrt(blocks) / clip * (1 + 1e-6)))

    blocks = max(1, min(trials, values_per_call // d))
    while blocks > 1 and blocks * d * (num_clients + canary_clients(blocks)) > (
        values_per_call):
      blocks = max(1, int(blocks * 0.8))
    m = canary_clients(blocks)
    piece = np.tile(canary / m, blocks).astype(dtype)
    while np.linalg.norm(piece.astype(np.float64)) > clip:  # float rounding
      m += 1
      piece = np.tile(canary / m, blocks).astype(dtype)
    zero = np.zeros(blocks * d, dtype)
    worlds = {0: [zero] * num_clients, 1: [zero] * num_clients + [piece] * m}
    direction = canary
  else:
    blocks = max(1, min(trials, values_per_call // d))
    worlds = {0: [np.tile(replaced, blocks).astype(dtype)],
              1: [np.tile(canary, blocks).astype(dtype)]}
    direction = canary - replaced
  unit = direction / max(np.linalg.norm(direction), 1e-300)
  value_type = tff.TensorType(dtype, [blocks * d])
  if weighted:
    process = factory.create(value_type, tff.TensorType(np.float32))
  else:
    process = factory.create(value_type)
  state = process.initialize()
  statistics = {}
  for world, values in worlds.items():
    args = (values, [np.float32(1.0)] * len(values)) if weighted else (values,)
    out = []
    for _ in range(-(-trials // blocks)):
      result = np.asarray(process.next(state, *args).result, np.float64)
      out.append(result.reshape(blocks, d) @ unit)
    statistics[world] = np.concatenate(out)[:trials]
  return statistics, blocks


def _claimed(event, relation):
  """(eps at delta as a function, accountant name) of a round event."""
  for name in ('pld', 'rdp'):
    if accountants.can_count(name, event, relation) is None:
      acc = accountants.make_accountant(name, relation).compose(event)
      return acc, name
  raise ValueError(f'no accountant counts the claimed event {event}')


def audit_aggregator(
    factory,
    *,
    value_type,
    num_clients: int,
    trials: int,
    delta: float,
    claimed_dp_event: Optional[dp_accounting.DpEvent] = None,
    canary: Optional[Sequence[float]] = None,
    seed: int = 0,
    replaced_value: Optional[Sequence[float]] = None,
    neighboring_relation: Optional[str] = None,
    alpha: float = 1e-3,
    batch_size: int = 8,
    initial_state: Any = None,
    warn: bool = True,
    vectorized: Optional[bool] = None,
    selection_fraction: Optional[float] = None,
    values_per_call: int = 2**22,
) -> AuditResult:
  """Lower-bounds the eps of one round of `factory` and checks it against its claim.

  Neighbouring client sets: the same `num_clients` clients, whose values are
  fixed (known to the adversary) and drawn once from `seed`, with and without
  one canary client. Under add-or-remove-one adjacency the canary joins them
  (num_clients + 1 clients); under replace-one it replaces client 0, which
  holds `replaced_value` in the other set. Default canary (`canary=None`):
  for a factory with an L2 clip C (`factory.clip`, or the clip of TFF's
  `DifferentiallyPrivateFactory.gaussian_fixed`) a value of norm C in a
  random direction, and the replaced client holds its negation (the two differ
  by 2C, the replace-one sensitivity); for `LDPEncodeFactory` with a fixed
  range every coordinate at c + r, the replaced client at c - r. Other
  factories (e.g. `GaussianUDPFactory`, whose sensitivity is not visible) need
  `canary=` (the replaced value defaults to its negation).

  Trials, vectorised (`vectorized=None` picks it when the factory is known
  to be coordinatewise, see `_vector_kind`: TFF's gaussian_fixed, udp's client
  noise without a clip, LDP-FL with a fixed range, the last two with one
  client): the factory's own process, created for a value of B blocks of the
  value's d values, runs on client sets that hold each trial's values in every
  block; each call gives B independent trials. This rests on one assumption,
  checked against the per-run path in tests/auditing/aggregator_audit_test.py:
  the factory is coordinatewise (coordinate j of its release depends on
  coordinate j of the client values, through their sum with a fixed
  denominator or through the single client's value, plus noise drawn
  independently per coordinate) and no clip binds (the canary's value is
  split over enough canary clients to stay within the clip). The statistic is
  the projection of each block onto the canary direction (the likelihood-ratio
  statistic of additive noise that is Gaussian); measurements, one per call,
  are not read. About 10^5 trials per set take 10-30 s on 2 cores.

  Trials, per run (`vectorized=False`, and every other factory): the process
  is run `trials` times on each set, every run from the same state
  (`process.initialize()` or `initial_state`), `batch_size` runs per TFF call
  (about 5 ms a run). Each run's released values (the aggregate and every
  measurement leaf) are flattened; the candidate statistics are the
  projection of the aggregate onto the canary's direction and, for every
  released leaf, the projection onto the difference of its means between the
  sets (fitted on the first half of the selection runs, judged on the second).

  Tests and bounds: a random `selection_fraction` of each set's runs (0.2
  vectorised, 0.5 per run) choose two threshold tests (candidate, threshold,
  side) and the others (N per set) bound them. The (eps, delta) test
  (`bounds.best_threshold_test`) gives, with FP of its N runs without the
  canary guessed "with" and FN of its N runs with the canary guessed
  "without",

      eps_lb = max(0, log((1 - delta - FNR_u) / FPR_u),
                      log((1 - delta - FPR_u) / FNR_u)),

  FPR_u, FNR_u one-sided Clopper-Pearson upper bounds at confidence
  1 - alpha / 4 each. It reaches at most log((1 - delta - u) / u),
  u = 1 - (alpha / 4)^(1 / N) (about log(N) - 2): a released exact statistic
  of the canary shows as that maximum. The Gaussian-DP test
  (`tradeoff.best_mu_threshold_test`, thresholds over the whole trade-off
  curve) gives mu_lb = Phi^-1(1 - FPR_u) - Phi^-1(FNR_u), also at alpha / 4
  per rate: the most powerful test of a Gaussian claim (its errors near
  the middle of the curve are measured to a few tenths of a percent). Each
  bound holds with probability >= 1 - alpha / 2, so a true claim fails with
  probability <= alpha (default 1e-3).

  The adversary: the audit sees what the process releases, so it audits the
  round's event against whoever sees the aggregate and the measurements.
  For noise added on the clients ('local') the server also sees each upload;
  with `num_clients=1` the released mean is the single upload itself, which
  audits that view too (more clients add their noise to the aggregate and
  weaken the test). For 'central' noise the server sees raw updates: no
  output of the process can audit that.

  Claim: `claimed_dp_event`, else the event in the state `next` returns
  (`guarantees.extract_dp_event`), read at `delta` under the factory's
  neighbouring relation (`factory.guarantee`, TFF's DP factory's, the state's,
  or `neighboring_relation`) by dp_accounting's PLD accountant (tight for
  Gaussian and pure-eps events), or the RDP accountant where PLD declines.

  Verdict: the audit fails when eps_lb > the claimed eps, or when the mu
  test's point (FPR_u, FNR_u) lies below the claimed trade-off curve: for a
  claimed GaussianDpEvent(z) (exactly (1 / z)-GDP) when mu_lb > 1 / z, for
  other claims when the point breaks the claimed (eps, delta(eps)) profile at
  some eps (`tradeoff.violates_profile`). A failed audit is loud: a
  `AuditFailedWarning` is warned and logged (unless `warn=False`), and
  `result.raise_if_failed()` raises `AuditFailedError`. With a true claim, an
  audit fails with probability <= alpha.

  Randomness: `seed` fixes the canary, the other clients' values and the
  split into halves; the factories' noise comes from TF's nondeterministic
  kernels, so two audits with one seed agree in distribution, not bit for bit.

  Args:
    factory: a `tff.aggregators.UnweightedAggregationFactory` or
      `WeightedAggregationFactory` (weighted ones get weight 1 per client).
    value_type: a `tff.TensorType` of floats with a fully defined shape.
    num_clients: clients in the set without the canary, >= 1.
    trials: runs per set, >= 4; 10^5 vectorised gives the power of
      docs/auditing.md (a Gaussian factory with 1.5x its claimed eps fails).
    delta: in (0, 1).
    claimed_dp_event: the claim to audit; default: the factory's own event.
    canary: the canary client's value (the shape of value_type, or flat).
    seed: seeds the canary direction, the other clients and the split.
    replaced_value: replace-one only: the value the canary replaces; default
      the reflection of the canary through the domain center.
    neighboring_relation: 'add_or_remove_one' or 'replace_one', for a factory
      whose relation is not known.
    alpha: a true claim fails with probability <= alpha (each bound at
      alpha / 2).
    batch_size: runs of `next` per TFF call (>= 1).
    initial_state: the state every run starts from; default
      `process.initialize()` (e.g. a top_k state with its mask set).
    warn: warn and log a failed audit.
    vectorized: None (vectorise when the factory is known coordinatewise and
      no `initial_state` is given), True (require it) or False (per run).
    selection_fraction: the share of each set's runs that choose the tests.
    values_per_call: vectorised: at most this many values over the clients
      of one call (memory).

  Returns:
    An `AuditResult`.
  """
  started = time.monotonic()
  num_clients = validation.int_at_least('num_clients', num_clients, 1)
  trials = validation.int_at_least('trials', trials, 4)
  batch_size = validation.int_at_least('batch_size', batch_size, 1)
  delta, alpha = bounds.check_delta_alpha(delta, alpha)
  seed = validation.int_at_least('seed', seed, 0)
  if not isinstance(value_type, tff.TensorType) or not np.issubdtype(
      value_type.dtype, np.floating
  ):
    raise ValueError(f'value_type must be a float tff.TensorType, got {value_type}')
  if value_type.shape is None or any(d is None for d in value_type.shape):
    raise ValueError(f'value_type must have a fully defined shape, got {value_type}')
  shape = tuple(value_type.shape)
  dimension = int(np.prod(shape, dtype=np.int64))
  dtype = value_type.dtype

  # A factory of both kinds (gaussian_udp.ClientNoiseFactory) says which.
  weighted = getattr(
      factory, 'weighted',
      isinstance(factory, tff.aggregators.WeightedAggregationFactory),
  )
  if weighted:
    process = factory.create(value_type, tff.TensorType(np.float32))
  elif isinstance(factory, tff.aggregators.UnweightedAggregationFactory):
    process = factory.create(value_type)
  else:
    raise ValueError(
        'factory must be a tff.aggregators Weighted- or '
        f'UnweightedAggregationFactory, got {type(factory).__name__}'
    )
  state = process.initialize() if initial_state is None else initial_state

  guarantee = guarantees.guarantee_of(factory)
  relation = neighboring_relation
  if relation is None and guarantee is not None:
    relation = guarantee.neighboring_relation
  if relation is None:
    try:
      relation = guarantees.relation_of_state(state)
    except TypeError as e:
      raise ValueError(
          f'the neighbouring relation of {type(factory).__name__} is unknown: '
          'pass neighboring_relation='
      ) from e
  validation.one_of('neighboring_relation', relation, accountants.RELATIONS)

  rng = np.random.default_rng(seed)
  if canary is None:
    canary_flat, replaced, center = _default_canary(
        factory, state, dimension, rng
    )
  else:
    canary_flat = np.asarray(canary, np.float64).ravel()
    if canary_flat.size != dimension:
      raise ValueError(
          f'canary has {canary_flat.size} values, value_type {dimension}'
      )
    replaced, center = -canary_flat, np.zeros(dimension)
  if replaced_value is not None:
    if relation != 'replace_one':
      raise ValueError('replaced_value applies only under replace_one')
    replaced = np.asarray(replaced_value, np.float64).ravel()
    if replaced.size != dimension:
      raise ValueError(
          f'replaced_value has {replaced.size} values, value_type {dimension}'
      )

  # The other clients: near the domain center, fixed for every run.
  spread = 0.1 * np.linalg.norm(canary_flat - center) / math.sqrt(dimension)
  others = center + spread * rng.standard_normal((num_clients, dimension))
  if relation == 'add_or_remove_one':
    without = list(others)
    with_canary = list(others) + [canary_flat]
    direction = canary_flat - center
  else:
    without = [replaced] + list(others[1:])
    with_canary = [canary_flat] + list(others[1:])
    direction = canary_flat - replaced

  def as_values(values):
    return [np.asarray(v, dtype).reshape(shape) for v in values]

  def args(values):
    values = as_values(values)
    if weighted:
      return (values, [np.float32(1.0)] * len(values))
    return (values,)

  # One plain run: the claimed event, when not given, is the state's.
  first = process.next(state, *args(with_canary))
  if claimed_dp_event is None:
    claimed_dp_event = guarantees.extract_dp_event(first.state)
  claim_accountant, accountant = _claimed(claimed_dp_event, relation)
  claimed_epsilon = float(claim_accountant.get_epsilon(delta))

  plain_claim = guarantees.plain_event(claimed_dp_event)
  claimed_mu = math.nan
  if isinstance(plain_claim, dp_accounting.GaussianDpEvent) and (
      plain_claim.noise_multiplier > 0):
    claimed_mu = 1.0 / plain_claim.noise_multiplier

  kind = _vector_kind(factory, relation, num_clients, initial_state)
  if vectorized is None:
    vectorized = kind is not None
  elif vectorized and kind is None:
    raise ValueError(
        f'{type(factory).__name__} (relation {relation}, {num_clients} '
        'clients) is not known to be coordinatewise: its trials cannot be '
        'vectorised; pass vectorized=False'
    )
  if selection_fraction is None:
    selection_fraction = 0.2 if vectorized else 0.5
  selection_fraction = validation.open_unit(
      'selection_fraction', selection_fraction)

  if vectorized:
    statistics, _ = _vectorized_statistics(
        factory, kind, weighted, dtype, trials, canary_flat, replaced, center,
        num_clients, validation.int_at_least('values_per_call', values_per_call, 1),
    )
    choose, held = tradeoff.split(trials, selection_fraction, rng)
    candidates = [('result . canary direction (vectorised)',
                   statistics[0], statistics[1])]
  else:
    run = _batched_runner(process, batch_size, weighted)
    calls = -(-trials // batch_size)
    leaves = {0: [], 1: []}
    for world, values in ((0, without), (1, with_canary)):
      for _ in range(calls):
        for result, measurements in run(state, *args(values)):
          leaves[world].append(
              _flat_leaves(result, ('result',))
              + _flat_leaves(measurements, ('measurements',))
          )
      leaves[world] = leaves[world][:trials]
    names = [name for name, _ in leaves[0][0]]
    data = {
        w: [np.stack([run_[i][1] for run_ in leaves[w]])
            for i in range(len(names))]
        for w in (0, 1)
    }
    pick, held = tradeoff.split(trials, selection_fraction, rng)
    # The mean-difference directions are fitted on one part of the selection
    # runs and the statistic and threshold chosen on the other: a direction
    # fitted on the trials that judge it looks better there than it is, and
    # would win the choice over a better fixed statistic.
    fit = {w: pick[w][: len(pick[w]) // 2] for w in (0, 1)}
    choose = {w: pick[w][len(pick[w]) // 2:] for w in (0, 1)}
    candidates = []
    unit = direction / max(np.linalg.norm(direction), 1e-300)
    result_index = names.index('result') if 'result' in names else None
    if result_index is not None and data[0][result_index].shape[1] == dimension:
      candidates.append(('result . canary direction',
                         data[0][result_index] @ unit,
                         data[1][result_index] @ unit))
    for i, name in enumerate(names):
      gap = data[1][i][fit[1]].mean(0) - data[0][i][fit[0]].mean(0)
      if np.any(gap != 0):
        candidates.append((f'{name} . mean difference',
                           data[0][i] @ gap, data[1][i] @ gap))
    if not candidates:
      raise ValueError('the process released nothing to audit')

  decision = tradeoff.decide(candidates, choose, held, delta, alpha)
  n = decision.evaluation_trials
  eps_lb = decision.epsilon_lower_bound
  mu_lb = decision.mu_lower_bound
  if math.isfinite(claimed_mu):
    mu_refutes = mu_lb > claimed_mu
  else:
    mu_refutes = tradeoff.violates_profile(
        decision.mu_fpr_upper, decision.mu_fnr_upper, claim_accountant.get_delta)
  eps_refutes = eps_lb > claimed_epsilon
  refuted_by = '+'.join(
      name for name, flag in (('eps', eps_refutes), ('mu', mu_refutes)) if flag)
  max_eps = bounds.max_epsilon_lower_bound(n, n, delta, alpha / 2.0)
  max_mu = tradeoff.max_mu_lower_bound(n, n, alpha / 2.0)
  result = AuditResult(
      mechanism=type(factory).__name__,
      epsilon_lower_bound=eps_lb,
      claimed_epsilon=claimed_epsilon,
      claimed_dp_event=str(guarantees.plain_event(claimed_dp_event)),
      accountant=accountant,
      delta=delta,
      alpha=alpha,
      neighboring_relation=relation,
      noise=guarantee.noise if guarantee is not None else '',
      trials=trials,
      selection_trials=trials - n,
      evaluation_trials=n,
      false_positives=decision.false_positives,
      false_negatives=decision.false_negatives,
      max_epsilon_lower_bound=max_eps,
      statistic=decision.epsilon_statistic,
      seconds=time.monotonic() - started,
      passed=not refuted_by,
      mu_lower_bound=mu_lb,
      mu_epsilon_lower_bound=tradeoff.gdp_epsilon(mu_lb, delta),
      claimed_mu=claimed_mu,
      max_mu_lower_bound=max_mu,
      max_showable_epsilon=max(max_eps, tradeoff.gdp_epsilon(max_mu, delta)),
      mu_statistic=decision.mu_statistic,
      refuted_by=refuted_by,
      vectorized=bool(vectorized),
  )
  if not result.passed and warn:
    logging.error('%s', result.summary())
    warnings.warn(result.summary(), AuditFailedWarning, stacklevel=2)
  return result
