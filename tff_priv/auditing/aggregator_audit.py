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


def audit_spec(factory) -> guarantees.AuditSpec:
  """What the auditor takes from `factory` (`guarantees.AuditSpec`).

  The factory's own `audit_spec()`; for TFF's `DifferentiallyPrivateFactory`
  (a Gaussian sum of clipped values, coordinatewise, when its query is
  `gaussian_fixed`'s) its query's clip; else only a public `clip` attribute.
  """
  declared = getattr(factory, 'audit_spec', None)
  if callable(declared):
    return declared()
  if guarantees.guarantee_of(factory) is guarantees.TFF_DP_FACTORY_GUARANTEE:
    clip = _tff_gaussian_clip(factory)
    return guarantees.AuditSpec(
        clip=clip, coordinatewise=None if clip is None else 'central_sum'
    )
  clip = getattr(factory, 'clip', None)
  return guarantees.AuditSpec(
      clip=float(clip) if isinstance(clip, (int, float)) else None
  )


def _default_canary(factory, dimension, rng):
  """(canary, replaced value, domain center), the worst case for `factory`."""
  spec = audit_spec(factory)
  if spec.value_range is not None:
    # A fixed public range [c - r, c + r]: the canary and the client it
    # replaces sit at its two ends in every coordinate.
    c, r = spec.value_range
    base = np.full(dimension, float(c))
    return base + float(r), base - float(r), base
  if spec.clip is None:
    raise ValueError(
        f'no default canary for {type(factory).__name__} (no clip known): '
        "pass canary= (the canary client's value)"
    )
  direction = rng.standard_normal(dimension)
  canary = spec.clip * direction / np.linalg.norm(direction)
  return canary, -canary, np.zeros(dimension)


def _batched_runner(process, batch_size, weighted, fresh_state):
  """A federated computation running `process.next` `batch_size` times.

  Every call is a genuine, independent run of the factory's `next` on the
  same client values (fresh client and server randomness each); gathering
  them in one computation only saves TFF's per-call overhead. With
  `fresh_state` each run starts from its own `process.initialize()` (the
  state argument is ignored): a factory whose noise seed lives in its state
  (BLTFactory, TreeRestartFactory: a fresh nonce per `initialize()`) would
  otherwise draw the same noise in every run from one state, which no real
  run does. Without it every run starts from the given state.
  """
  state_type = process.next.type_signature.parameter[0]
  value_type = process.next.type_signature.parameter[1]

  def outputs(state, *args):
    results = []
    for _ in range(batch_size):
      start = process.initialize() if fresh_state else state
      out = process.next(start, *args)
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
# exactly the distribution of one unbatched release. A factory says which of
# two kinds it is (`AuditSpec.coordinatewise`, read by `_vector_kind`); these
# declare one:
#   'central_sum': TFF's DifferentiallyPrivateFactory.gaussian_fixed: each
#     client clipped to C, summed, N(0, (zC)^2) added to each coordinate of the
#     sum, divided by the FIXED clients_per_round. Add-or-remove-one. One
#     canary of norm a tiled over B blocks has norm a sqrt(B) and would be
#     clipped, so the canary's value is split over m = ceil(a sqrt(B) / C)
#     canary clients of a / m per block (each of norm <= C, not clipped):
#     their sum, all the factory reads, is the canary in every block. The
#     other clients hold 0 (their fixed values only shift both sets alike).
#     BLTFactory too, under replace-special (the canary against a client
#     holding 0, which adds nothing to the sum), in its first round from a
#     fresh state (C^{-1}'s first row is e_1: the round's noise is z C times
#     fresh N(0, 1) per coordinate); each call starts from `initialize()`.
#     BandMFFactory as well, under add-or-remove-one, in its first round from a
#     fresh state (noise z C / c_0 times fresh N(0, 1) per coordinate).
#   'single_client': one client under replace-one whose upload is noised per
#     coordinate with nothing coupling coordinates: tff_priv's
#     ClientNoiseFactory without a clip (udp: N(0, s^2) per coordinate, s not
#     a function of the dimension) and LDPEncodeFactory with a fixed range
#     (each scalar encoded on its own). The client holds the canary, or the
#     replaced value, in every block.
# Measurements are one per call, not per trial: the vectorised path reads the
# aggregate only (use vectorized=False to audit measurements).


def _vector_kind(factory, relation, num_clients, initial_state):
  """'central_sum', 'single_client' or None (see the comment above).

  The factory's `AuditSpec.coordinatewise`, under the relation of its own
  guarantee, from a fresh state ('single_client': one client, replace-one).
  """
  guarantee = guarantees.guarantee_of(factory)
  if initial_state is not None or guarantee is None:
    return None
  if relation != guarantee.neighboring_relation:
    return None
  kind = audit_spec(factory).coordinatewise
  if kind == 'single_client' and (
      num_clients != 1 or relation != 'replace_one'
  ):
    return None
  return kind


def vectorizable(factory, num_clients: int) -> bool:
  """Whether `audit_aggregator` vectorises this factory's trials by default."""
  guarantee = guarantees.guarantee_of(factory)
  if guarantee is None:
    return False
  return (
      _vector_kind(factory, guarantee.neighboring_relation, num_clients, None)
      is not None
  )


def _vectorized_statistics(
    factory,
    kind,
    weighted,
    dtype,
    trials,
    canary,
    replaced,
    center,
    num_clients,
    values_per_call,
):
  """The canary-direction statistic of `trials` releases per set, in blocks.

  Returns ({set: statistics}, blocks): one call of `next` on a value of
  `blocks` blocks of the canary's d values gives `blocks` trials.
  """
  d = canary.size
  if kind == 'central_sum':
    clip = audit_spec(factory).clip
    if np.any(center != 0):
      raise ValueError('the vectorised central sum needs the center at 0')
    norm = float(np.linalg.norm(canary))

    def canary_clients(blocks):
      return max(1, math.ceil(norm * math.sqrt(blocks) / clip * (1 + 1e-6)))

    blocks = max(1, min(trials, values_per_call // d))
    while blocks > 1 and blocks * d * (num_clients + canary_clients(blocks)) > (
        values_per_call
    ):
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
    worlds = {
        0: [np.tile(replaced, blocks).astype(dtype)],
        1: [np.tile(canary, blocks).astype(dtype)],
    }
    direction = canary - replaced
  unit = direction / max(np.linalg.norm(direction), 1e-300)
  value_type = tff.TensorType(dtype, [blocks * d])
  if weighted:
    process = factory.create(value_type, tff.TensorType(np.float32))
  else:
    process = factory.create(value_type)
  statistics = {}
  for world, values in worlds.items():
    args = (values, [np.float32(1.0)] * len(values)) if weighted else (values,)
    out = []
    for _ in range(-(-trials // blocks)):
      # A fresh state per call: see `_batched_runner` (BLTFactory's noise is
      # a function of its state's seed).
      state = process.initialize()
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


@dataclasses.dataclass(frozen=True)
class _Claim:
  """The claim an audit judges, read at its delta.

  Attributes:
    event: the claimed round event without its wrappers
      (`guarantees.plain_event`).
    accountant: the accountant that composed the claimed event (its
      `get_epsilon` and `get_delta` give the claim's privacy profile).
    accountant_name: 'pld' or 'rdp'.
    epsilon: the claimed eps at delta.
    mu: 1 / z for a GaussianDpEvent(z) with z > 0, else nan.
  """

  event: Any
  accountant: Any
  accountant_name: str
  epsilon: float
  mu: float


@dataclasses.dataclass(frozen=True)
class _Clients:
  """The two neighbouring client sets (`_client_sets`).

  Attributes:
    canary: the canary client's value, flat float64.
    replaced: the value the canary replaces under replace-one.
    center: the domain center the other clients sit near.
    without: the clients' values without the canary.
    with_canary: the clients' values with the canary.
    direction: the canary's direction (from the center, or from `replaced`
      under replace-one).
  """

  canary: np.ndarray
  replaced: np.ndarray
  center: np.ndarray
  without: list
  with_canary: list
  direction: np.ndarray


def _checked_value_type(value_type) -> tuple[tuple[int, ...], int, Any]:
  """(shape, dimension, dtype) of a float `tff.TensorType` of defined shape."""
  if not isinstance(value_type, tff.TensorType) or not np.issubdtype(
      value_type.dtype, np.floating
  ):
    raise ValueError(
        f'value_type must be a float tff.TensorType, got {value_type}'
    )
  if value_type.shape is None or any(d is None for d in value_type.shape):
    raise ValueError(
        f'value_type must have a fully defined shape, got {value_type}'
    )
  shape = tuple(value_type.shape)
  dimension = int(np.prod(shape, dtype=np.int64))
  return shape, dimension, value_type.dtype


def _create_process(factory, value_type):
  """(the factory's `AggregationProcess` for `value_type`, whether weighted).

  A weighted factory's process gets a float32 weight type (weight 1 per
  client in every run).
  """
  # A factory of both kinds (udp.ClientNoiseFactory) says which.
  weighted = getattr(
      factory,
      'weighted',
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
  return process, weighted


def _neighboring_relation(factory, guarantee, neighboring_relation, state):
  """The relation to audit: the argument's, else the guarantee's or state's."""
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
  return relation


def _canary_values(
    factory,
    dimension,
    rng,
    canary,
    replaced_value,
    relation,
):
  """(canary, replaced value, domain center), each flat float64.

  Default canary (`canary=None`, `_default_canary`, which draws its direction
  from `rng`), from the factory's `audit_spec`: for an L2 clip C a value of
  norm C in a random direction, and the replaced client holds its negation
  (the two differ by 2C, the replace-one sensitivity); for a fixed public
  range [c - r, c + r] (`LDPEncodeFactory`'s 'fixed') every coordinate at
  c + r, the replaced client at c - r. Other factories (e.g.
  `GaussianUDPFactory`, whose sensitivity is not visible) need `canary=` (the
  replaced value defaults to its negation, the center to 0). `replaced_value`
  (replace-one only) overrides the replaced value.
  """
  if canary is None:
    canary_flat, replaced, center = _default_canary(factory, dimension, rng)
  else:
    canary_flat = np.asarray(canary, np.float64).ravel()
    if canary_flat.size != dimension:
      raise ValueError(
          f'canary has {canary_flat.size} values, value_type {dimension}'
      )
    replaced, center = -canary_flat, np.zeros(dimension)
  if relation == 'replace_special':
    # Zero-out: the neighbouring client's update is the special value 0.
    replaced = np.zeros(dimension)
  if replaced_value is not None:
    if relation != 'replace_one':
      raise ValueError('replaced_value applies only under replace_one')
    replaced = np.asarray(replaced_value, np.float64).ravel()
    if replaced.size != dimension:
      raise ValueError(
          f'replaced_value has {replaced.size} values, value_type {dimension}'
      )
  return canary_flat, replaced, center


def _client_sets(
    factory,
    dimension,
    rng,
    canary,
    replaced_value,
    relation,
    num_clients,
) -> _Clients:
  """The neighbouring client sets: without and with one canary client.

  The canary (`_canary_values`, which may draw its direction from `rng`)
  comes first; then the `num_clients` other clients, near the domain center,
  drawn once from `rng` and fixed for every run (known to the adversary).
  Under add-or-remove-one the canary joins them (num_clients + 1 clients);
  under replace-one it replaces client 0, which holds the replaced value in
  the other set (under replace-special, zero-out, the value 0).
  """
  canary, replaced, center = _canary_values(
      factory, dimension, rng, canary, replaced_value, relation
  )
  spread = 0.1 * np.linalg.norm(canary - center) / math.sqrt(dimension)
  others = center + spread * rng.standard_normal((num_clients, dimension))
  if relation == 'add_or_remove_one':
    without = list(others)
    with_canary = list(others) + [canary]
    direction = canary - center
  else:
    without = [replaced] + list(others[1:])
    with_canary = [canary] + list(others[1:])
    direction = canary - replaced
  return _Clients(canary, replaced, center, without, with_canary, direction)


def _client_args(values, shape, dtype, weighted):
  """The client arguments of `next` after the state: values (and weights 1)."""
  values = [np.asarray(v, dtype).reshape(shape) for v in values]
  if weighted:
    return (values, [np.float32(1.0)] * len(values))
  return (values,)


def _read_claim(
    claimed_dp_event,
    process,
    state,
    relation,
    delta,
    client_args,
) -> _Claim:
  """The claim: `claimed_dp_event`, else the event in the state `next` returns.

  One plain run of `process.next(state, *client_args)` comes first (always:
  the per-run trials follow it). The claimed event
  (`guarantees.extract_dp_event` of the state it returns, when not given) is
  read at `delta` under `relation` by dp_accounting's PLD accountant (tight
  for Gaussian and pure-eps events), or the RDP accountant where PLD
  declines (`_claimed`).
  """
  first = process.next(state, *client_args)
  if claimed_dp_event is None:
    claimed_dp_event = guarantees.extract_dp_event(first.state)
  claim_accountant, accountant = _claimed(claimed_dp_event, relation)
  claimed_epsilon = float(claim_accountant.get_epsilon(delta))
  plain_claim = guarantees.plain_event(claimed_dp_event)
  claimed_mu = math.nan
  gaussian, count = plain_claim, 1
  if isinstance(gaussian, dp_accounting.SelfComposedDpEvent):
    # c Gaussians of multiplier z compose to the Gaussian of mu sqrt(c) / z
    # (BLTFactory's and TreeRestartFactory's stream or tree events).
    gaussian, count = gaussian.event, gaussian.count
  if (
      isinstance(gaussian, dp_accounting.PoissonSampledDpEvent)
      and gaussian.sampling_probability == 1
  ):
    # Everyone sampled: the event itself (BandMFFactory at q = 1).
    gaussian = gaussian.event
  if isinstance(gaussian, dp_accounting.GaussianDpEvent) and (
      gaussian.noise_multiplier > 0 and count >= 1
  ):
    claimed_mu = math.sqrt(count) / gaussian.noise_multiplier
  return _Claim(
      event=plain_claim,
      accountant=claim_accountant,
      accountant_name=accountant,
      epsilon=claimed_epsilon,
      mu=claimed_mu,
  )


def _trial_mode(
    factory,
    relation,
    num_clients,
    initial_state,
    vectorized,
    selection_fraction,
):
  """(`_vector_kind`, whether vectorised, the selection fraction).

  `vectorized=None` vectorises when the factory is known coordinatewise;
  True requires it. The selection fraction defaults to 0.2 vectorised, 0.5
  per run.
  """
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
      'selection_fraction', selection_fraction
  )
  return kind, vectorized, selection_fraction


def _vectorized_candidates(
    factory,
    kind,
    weighted,
    dtype,
    trials,
    clients,
    num_clients,
    values_per_call,
    selection_fraction,
    rng,
):
  """(candidates, choose, held) of vectorised trials (`_vectorized_statistics`).

  The factory's own process, created for a value of B blocks of the value's d
  values, runs on client sets that hold each trial's values in every block;
  each call gives B independent trials. This rests on one assumption, checked
  against the per-run path in tests/auditing/aggregator_audit_test.py: the
  factory is coordinatewise (coordinate j of its release depends on
  coordinate j of the client values, through their sum with a fixed
  denominator or through the single client's value, plus noise drawn
  independently per coordinate) and no clip binds (the canary's value is
  split over enough canary clients to stay within the clip). The one
  candidate statistic is the projection of each block onto the canary
  direction (the likelihood-ratio statistic of additive noise that is
  Gaussian); measurements, one per call, are not read. About 10^5 trials per
  set take 10-30 s on 2 cores. `rng` then splits the runs
  (`tradeoff.split`).
  """
  statistics, _ = _vectorized_statistics(
      factory,
      kind,
      weighted,
      dtype,
      trials,
      clients.canary,
      clients.replaced,
      clients.center,
      num_clients,
      validation.int_at_least('values_per_call', values_per_call, 1),
  )
  choose, held = tradeoff.split(trials, selection_fraction, rng)
  candidates = [
      ('result . canary direction (vectorised)', statistics[0], statistics[1])
  ]
  return candidates, choose, held


def _per_run_releases(
    process,
    state,
    batch_size,
    weighted,
    sets,
    trials,
    shape,
    dtype,
    fresh_state,
):
  """(leaf names, {set: [runs x leaf values] per leaf}) of `trials` runs a set.

  Every run starts from `state`, or from its own `process.initialize()` with
  `fresh_state`, `batch_size` runs per TFF call (`_batched_runner`, about
  5 ms a run); each run's released values (the aggregate and every
  measurement leaf) are flattened. `sets` maps 0 and 1 to the clients
  without and with the canary.
  """
  run = _batched_runner(process, batch_size, weighted, fresh_state)
  calls = -(-trials // batch_size)
  leaves = {0: [], 1: []}
  for world, values in sets:
    for _ in range(calls):
      for result, measurements in run(
          state, *_client_args(values, shape, dtype, weighted)
      ):
        leaves[world].append(
            _flat_leaves(result, ('result',))
            + _flat_leaves(measurements, ('measurements',))
        )
    leaves[world] = leaves[world][:trials]
  names = [name for name, _ in leaves[0][0]]
  data = {
      w: [
          np.stack([run_[i][1] for run_ in leaves[w]])
          for i in range(len(names))
      ]
      for w in (0, 1)
  }
  return names, data


def _per_run_candidates(
    process,
    state,
    batch_size,
    weighted,
    clients,
    trials,
    shape,
    dtype,
    selection_fraction,
    rng,
    fresh_state,
):
  """(candidates, choose, held) of `trials` runs per set of `process`.

  The process is run `trials` times on each set, every run from its own
  `process.initialize()` (`fresh_state`) or from `initial_state`
  (`_per_run_releases`),
  and then `rng` splits the runs (`tradeoff.split`). The candidate statistics
  are the projection of the aggregate onto the canary's direction and, for
  every released leaf, the projection onto the difference of its means
  between the sets, fitted on the first half of the selection runs (the
  statistic and threshold are then chosen on the second half).
  """
  names, data = _per_run_releases(
      process,
      state,
      batch_size,
      weighted,
      ((0, clients.without), (1, clients.with_canary)),
      trials,
      shape,
      dtype,
      fresh_state,
  )
  dimension = clients.canary.size  # The value type's (`_canary_values`).
  direction = clients.direction
  pick, held = tradeoff.split(trials, selection_fraction, rng)
  # The mean-difference directions are fitted on one part of the selection
  # runs and the statistic and threshold chosen on the other: a direction
  # fitted on the trials that judge it looks better there than it is, and
  # would win the choice over a better fixed statistic.
  fit = {w: pick[w][: len(pick[w]) // 2] for w in (0, 1)}
  choose = {w: pick[w][len(pick[w]) // 2 :] for w in (0, 1)}
  candidates = []
  unit = direction / max(np.linalg.norm(direction), 1e-300)
  result_index = names.index('result') if 'result' in names else None
  if result_index is not None and data[0][result_index].shape[1] == dimension:
    candidates.append(
        (
            'result . canary direction',
            data[0][result_index] @ unit,
            data[1][result_index] @ unit,
        )
    )
  for i, name in enumerate(names):
    gap = data[1][i][fit[1]].mean(0) - data[0][i][fit[0]].mean(0)
    if np.any(gap != 0):
      candidates.append(
          (f'{name} . mean difference', data[0][i] @ gap, data[1][i] @ gap)
      )
  if not candidates:
    raise ValueError('the process released nothing to audit')
  return candidates, choose, held


def _refuted_by(decision: tradeoff.Decision, claim: _Claim) -> str:
  """'' (the claim stands), 'eps', 'mu' or 'eps+mu': the bounds refuting it.

  The (eps, delta) test's bound (`bounds.best_threshold_test` chose it) is,
  with FP of its N held-out runs without the canary guessed "with" and FN of
  its N runs with the canary guessed "without",

      eps_lb = max(0, log((1 - delta - FNR_u) / FPR_u),
                      log((1 - delta - FPR_u) / FNR_u)),

  FPR_u, FNR_u one-sided Clopper-Pearson upper bounds at confidence
  1 - alpha / 4 each. It reaches at most log((1 - delta - u) / u),
  u = 1 - (alpha / 4)^(1 / N) (about log(N) - 2): a released exact statistic
  of the canary shows as that maximum. The Gaussian-DP test
  (`tradeoff.best_mu_threshold_test`, thresholds over the whole trade-off
  curve) gives mu_lb = Phi^-1(1 - FPR_u) - Phi^-1(FNR_u), also at alpha / 4
  per rate: the most powerful test of a Gaussian claim (its errors near the
  middle of the curve are measured to a few tenths of a percent). Each bound
  holds with probability >= 1 - alpha / 2 (`tradeoff.decide`).

  'eps' refutes when eps_lb > the claimed eps; 'mu' when the mu test's point
  (FPR_u, FNR_u) lies below the claimed trade-off curve: for a claimed
  GaussianDpEvent(z) (exactly (1 / z)-GDP) when mu_lb > 1 / z, for other
  claims when the point breaks the claimed (eps, delta(eps)) profile at some
  eps (`tradeoff.violates_profile`).
  """
  if math.isfinite(claim.mu):
    mu_refutes = decision.mu_lower_bound > claim.mu
  else:
    mu_refutes = tradeoff.violates_profile(
        decision.mu_fpr_upper,
        decision.mu_fnr_upper,
        tradeoff.profile_of(claim.accountant),
    )
  eps_refutes = decision.epsilon_lower_bound > claim.epsilon
  return '+'.join(
      name for name, flag in (('eps', eps_refutes), ('mu', mu_refutes)) if flag
  )


def _audit_result(
    factory, decision, setting, vectorized, started
) -> AuditResult:
  """The `AuditResult` of a decision against the claim (`seconds` since then).

  Args:
    factory: the audited factory.
    decision: the tests' `tradeoff.Decision`.
    setting: the audit's `_Setting` (the claim, relation, delta, alpha...).
    vectorized: whether the trials ran vectorised.
    started: `time.monotonic()` when the audit started.
  """
  claim, guarantee, trials = setting.claim, setting.guarantee, setting.trials
  delta, alpha = setting.delta, setting.alpha
  n = decision.evaluation_trials
  eps_lb = decision.epsilon_lower_bound
  mu_lb = decision.mu_lower_bound
  refuted_by = _refuted_by(decision, claim)
  max_eps = bounds.max_epsilon_lower_bound(n, n, delta, alpha / 2.0)
  max_mu = tradeoff.max_mu_lower_bound(n, n, alpha / 2.0)
  return AuditResult(
      mechanism=type(factory).__name__,
      epsilon_lower_bound=eps_lb,
      claimed_epsilon=claim.epsilon,
      claimed_dp_event=str(claim.event),
      accountant=claim.accountant_name,
      delta=delta,
      alpha=alpha,
      neighboring_relation=setting.relation,
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
      claimed_mu=claim.mu,
      max_mu_lower_bound=max_mu,
      max_showable_epsilon=max(max_eps, tradeoff.gdp_epsilon(max_mu, delta)),
      mu_statistic=decision.mu_statistic,
      refuted_by=refuted_by,
      vectorized=bool(vectorized),
  )


@dataclasses.dataclass(frozen=True)
class _Setting:
  """What an audit's trials run on (`_set_up`).

  Attributes:
    num_clients: clients in the set without the canary.
    trials: runs per set.
    batch_size: runs of `next` per TFF call (per run).
    delta: the delta of the bounds and of the claim.
    alpha: the audit's error probability.
    shape: the value type's shape.
    dtype: the value type's dtype.
    process: the factory's `AggregationProcess` for the value type.
    weighted: whether the process takes client weights.
    state: the state the runs start from (`initial_state`, or one
      `process.initialize()`).
    initial_state: the caller's `initial_state` (None: each run its own
      `process.initialize()`).
    guarantee: the factory's `Guarantee`, or None.
    relation: the neighbouring relation audited.
    rng: the audit's generator (canary direction, other clients, split).
    clients: the two neighbouring client sets.
    claim: the claim the audit judges.
  """

  num_clients: int
  trials: int
  batch_size: int
  delta: float
  alpha: float
  shape: tuple[int, ...]
  dtype: Any
  process: Any
  weighted: bool
  state: Any
  initial_state: Any
  guarantee: Any
  relation: str
  rng: np.random.Generator
  clients: _Clients
  claim: _Claim


def _set_up(
    factory,
    *,
    value_type,
    num_clients,
    trials,
    batch_size,
    delta,
    alpha,
    seed,
    initial_state,
    neighboring_relation,
    canary,
    replaced_value,
    claimed_dp_event,
) -> _Setting:
  """`audit_aggregator`'s arguments checked, its client sets and its claim.

  The arguments are `audit_aggregator`'s; the claim's read runs `next` once
  (`_read_claim`).
  """
  num_clients = validation.int_at_least('num_clients', num_clients, 1)
  trials = validation.int_at_least('trials', trials, 4)
  batch_size = validation.int_at_least('batch_size', batch_size, 1)
  delta, alpha = bounds.check_delta_alpha(delta, alpha)
  seed = validation.int_at_least('seed', seed, 0)
  shape, dimension, dtype = _checked_value_type(value_type)
  process, weighted = _create_process(factory, value_type)
  state = process.initialize() if initial_state is None else initial_state
  guarantee = guarantees.guarantee_of(factory)
  relation = _neighboring_relation(
      factory, guarantee, neighboring_relation, state
  )
  rng = np.random.default_rng(seed)
  clients = _client_sets(
      factory,
      dimension,
      rng,
      canary,
      replaced_value,
      relation,
      num_clients,
  )
  claim = _read_claim(
      claimed_dp_event,
      process,
      state,
      relation,
      delta,
      _client_args(clients.with_canary, shape, dtype, weighted),
  )
  return _Setting(
      num_clients=num_clients,
      trials=trials,
      batch_size=batch_size,
      delta=delta,
      alpha=alpha,
      shape=shape,
      dtype=dtype,
      process=process,
      weighted=weighted,
      state=state,
      initial_state=initial_state,
      guarantee=guarantee,
      relation=relation,
      rng=rng,
      clients=clients,
      claim=claim,
  )


def _trial_candidates(
    factory, setting, vectorized, selection_fraction, values_per_call
):
  """(candidates, choose, held, vectorized): the trials, vectorised or per run.

  `vectorized` and `selection_fraction` are `audit_aggregator`'s
  (`_trial_mode` resolves them); `values_per_call` bounds a vectorised call.
  """
  kind, vectorized, selection_fraction = _trial_mode(
      factory,
      setting.relation,
      setting.num_clients,
      setting.initial_state,
      vectorized,
      selection_fraction,
  )
  if vectorized:
    candidates, choose, held = _vectorized_candidates(
        factory,
        kind,
        setting.weighted,
        setting.dtype,
        setting.trials,
        setting.clients,
        setting.num_clients,
        values_per_call,
        selection_fraction,
        setting.rng,
    )
  else:
    candidates, choose, held = _per_run_candidates(
        setting.process,
        setting.state,
        setting.batch_size,
        setting.weighted,
        setting.clients,
        setting.trials,
        setting.shape,
        setting.dtype,
        selection_fraction,
        setting.rng,
        fresh_state=setting.initial_state is None,
    )
  return candidates, choose, held, vectorized


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
  """Lower-bounds the eps of one round of `factory`, checked against its claim.

  The factory's own process runs `trials` times on each of two neighbouring
  client sets (`_client_sets`: with and without one canary client),
  vectorised or per run; a `selection_fraction` of each set's runs choose an
  (eps, delta) and a Gaussian-DP (mu) threshold test of what it releases, the
  other N runs bound them (`tradeoff.decide`, Clopper-Pearson, each with
  probability >= 1 - alpha / 2; eps_lb is at most about log(N) - 2).

  The claim is `claimed_dp_event`, else the event in the state `next`
  returns (`_read_claim`); the audit fails when eps_lb exceeds the claimed
  eps or the mu point lies below the claimed trade-off curve (`_refuted_by`).
  The neighbouring sets, the adversary and the verdict: docs/auditing.md.

  Args:
    factory: a `tff.aggregators.UnweightedAggregationFactory` or
      `WeightedAggregationFactory` (weighted ones get weight 1 per client).
    value_type: a `tff.TensorType` of floats with a fully defined shape.
    num_clients: clients in the set without the canary, >= 1.
    trials: runs per set, >= 4 (10^5: the power in docs/auditing.md).
    delta: in (0, 1).
    claimed_dp_event: the claim to audit; default: the factory's own event.
    canary: the canary client's value (the shape of value_type, or flat).
    seed: seeds the canary direction, the other clients and the split.
    replaced_value: replace-one only: the value the canary replaces; default
      the reflection of the canary through the domain center.
    neighboring_relation: 'add_or_remove_one', 'replace_one' or
      'replace_special' (the canary against a client whose update is 0), for
      a factory whose relation is not known.
    alpha: a true claim fails with probability <= alpha (each bound at
      alpha / 2).
    batch_size: runs of `next` per TFF call (>= 1).
    initial_state: the state every run starts from (e.g. a top_k state with
      its mask set); default: each run its own `process.initialize()`.
    warn: warn and log a failed audit.
    vectorized: None (vectorise when the factory is known coordinatewise and
      no `initial_state` is given), True (require it) or False (per run).
    selection_fraction: the share of each set's runs that choose the tests.
    values_per_call: vectorised: most values over one call's clients.

  Returns:
    An `AuditResult`.
  """
  started = time.monotonic()
  setting = _set_up(
      factory,
      value_type=value_type,
      num_clients=num_clients,
      trials=trials,
      batch_size=batch_size,
      delta=delta,
      alpha=alpha,
      seed=seed,
      initial_state=initial_state,
      neighboring_relation=neighboring_relation,
      canary=canary,
      replaced_value=replaced_value,
      claimed_dp_event=claimed_dp_event,
  )
  candidates, choose, held, vectorized = _trial_candidates(
      factory, setting, vectorized, selection_fraction, values_per_call
  )
  decision = tradeoff.decide(
      candidates, choose, held, setting.delta, setting.alpha
  )
  result = _audit_result(factory, decision, setting, vectorized, started)
  if not result.passed and warn:
    logging.error('%s', result.summary())
    warnings.warn(result.summary(), AuditFailedWarning, stacklevel=2)
  return result
