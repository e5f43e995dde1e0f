"""The accountants behind the ledger: dp_accounting's RDP and PLD accountants.

They are dp_accounting's own (`RdpAccountant`, `PLDAccountant`), extended by
one event type that dp_accounting 0.4.3 lacks, `PureEpsilonDpEvent`. The
neighbouring relation follows the sampling: Poisson sampling is accounted
under add-or-remove-one, fixed-size sampling without replacement under
replace-one. A pure eps-DP event holds under either.
"""

import functools
from typing import Optional

import attr
from dp_accounting import dp_event
from dp_accounting import privacy_accountant
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution
from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np

from tff_priv import validation
from tff_priv.accounting import events

NeighboringRelation = privacy_accountant.NeighboringRelation

ACCOUNTANTS = ('rdp', 'pld')
RELATIONS = {
    'add_or_remove_one': NeighboringRelation.ADD_OR_REMOVE_ONE,
    'replace_one': NeighboringRelation.REPLACE_ONE,
    # A unit replaced by a special element (a client's update by zero):
    # dp_accounting counts tree aggregation (DP-FTRL) only under it.
    'replace_special': NeighboringRelation.REPLACE_SPECIAL,
}
PLD_DISCRETIZATION = (
    1e-4  # dp_accounting's default value_discretization_interval.
)
# The privacy loss of k compositions of a pure eps release spans k * eps; on a
# grid of PLD_DISCRETIZATION that is k * eps / 1e-4 points, and the FFT of a
# larger span needs more memory than a machine has (1.66M values x 10 rounds at
# eps 1 would need ~480 GB). Beyond this span the PLD accountant declines.
PLD_MAX_SPAN = 2e6
# A Gaussian's privacy loss spans about 1/z^2 + 2c/z (c ~ 10 standard
# deviations of tail) for noise multiplier z, so its PLD grid grows as 1/z^2:
# measured with dp_accounting 0.4.3, 20 compositions, replace-one: z = 0.5
# takes 10 s and 0.45 GB, z = 0.2 37 s and 1.5 GB, z = 0.1 more than 4 GB.
# Below this z (and above 0) the PLD accountant declines; the RDP figure
# stands (eps is in the hundreds or more there anyway).
PLD_MIN_NOISE_MULTIPLIER = 0.5


def _noise_free(event: dp_event.DpEvent) -> bool:
  """A Gaussian of noise multiplier 0, possibly sampled: a non-private release.

  dp_accounting's RDP accountant divides by z for a sampled-without-
  replacement Gaussian; counted as `NonPrivateDpEvent` (eps = inf), which
  is what it is whatever the sampling (a sampled client's data is released
  exactly).
  """
  inner = getattr(event, 'event', None)
  if isinstance(
      event,
      (
          dp_event.PoissonSampledDpEvent,
          dp_event.SampledWithReplacementDpEvent,
          dp_event.SampledWithoutReplacementDpEvent,
      ),
  ):
    event = inner
  return (
      isinstance(event, dp_event.GaussianDpEvent)
      and event.noise_multiplier == 0
  )


# The Gaussian events whose RDP curve `RdpAccountant` keeps once computed.
_CACHED_EVENTS = (
    dp_event.GaussianDpEvent,
    dp_event.PoissonSampledDpEvent,
    dp_event.SampledWithoutReplacementDpEvent,
)


def _key(value):
  """`value` as a hashable key that equals another's iff the values are equal.

  A `ComposedDpEvent` holds a list, so it (and an event around it, such as
  adaptive DP-FedAvg's `PoissonSampledDpEvent(q, ComposedDpEvent([sum,
  quantile]))`) is unhashable; its key holds the same fields as tuples.
  Not `ledger.encode_event`: that serialises only the whitelisted event
  types and refuses non-finite fields, and a cache key must take any event.
  """
  if isinstance(value, dp_event.DpEvent):
    return (type(value),) + tuple(
        _key(getattr(value, f.name)) for f in attr.fields(type(value))
    )
  if isinstance(value, (list, tuple)):
    return (type(value),) + tuple(_key(v) for v in value)
  hash(value)  # A TypeError for a field of another unhashable type.
  return value


class _Keyed:
  """An event that hashes and compares by its `_key` (for `lru_cache`)."""

  __slots__ = ('event', 'key')

  def __init__(self, event):
    self.event, self.key = event, _key(event)

  def __hash__(self):
    return hash(self.key)

  def __eq__(self, other):
    return isinstance(other, _Keyed) and self.key == other.key


def _one_release_rdp(event, orders: tuple, relation) -> Optional[np.ndarray]:
  """dp_accounting's RDP curve of one `event` (None: it cannot count it)."""
  return _one_release_rdp_keyed(_Keyed(event), orders, relation)


@functools.lru_cache(maxsize=1024)
def _one_release_rdp_keyed(keyed: _Keyed, orders: tuple, relation):
  """`_one_release_rdp`, cached: once per process for each event's value."""
  event = keyed.event
  accountant = rdp_privacy_accountant.RdpAccountant(list(orders), relation)
  if accountant._maybe_compose(event, 1, True) is not None:  # pylint: disable=protected-access
    return None
  rdp = accountant._rdp  # pylint: disable=protected-access
  rdp.setflags(write=False)
  return rdp


class RdpAccountant(rdp_privacy_accountant.RdpAccountant):
  """dp_accounting's RDP accountant, plus `PureEpsilonDpEvent` and a cache.

  For a `PureEpsilonDpEvent` it adds `events.pure_epsilon_rdp(orders, eps)`
  per release (the RDP of randomized response, which dominates every eps-DP
  mechanism). The RDP curve of a (sampled) Gaussian event is computed once per
  process and reused: dp_accounting computes it afresh at every `compose`
  (0.4 s for a Poisson-sampled Gaussian at its default orders), and a ledger
  composes its whole history at each `epsilon`. RDP composes additively, so
  `count` releases add `count` times the curve of one, as dp_accounting does.
  """

  def _maybe_compose(
      self, event: dp_event.DpEvent, count: int, do_compose: bool
  ) -> Optional[privacy_accountant.PrivacyAccountant.CompositionErrorDetails]:
    if _noise_free(event):
      event = dp_event.NonPrivateDpEvent()
    if isinstance(event, events.PureEpsilonDpEvent):
      if do_compose:
        self._rdp += count * events.pure_epsilon_rdp(
            self._orders, event.epsilon
        )
      return None
    if do_compose and count > 0 and isinstance(event, _CACHED_EVENTS):
      try:
        rdp = _one_release_rdp(
            event, tuple(self._orders.tolist()), self._neighboring_relation
        )
      except TypeError:  # An unhashable field: computed as dp_accounting does.
        rdp = None
      if rdp is not None:
        self._rdp += count * rdp
        return None
    return super()._maybe_compose(event, count, do_compose)


@functools.lru_cache(maxsize=16)  # About 1.5 MB each.
def _one_release_pld(
    sampling_probability: float, noise_multiplier: float, interval: float
) -> privacy_loss_distribution.PrivacyLossDistribution:
  """dp_accounting's PLD of one Poisson-sampled Gaussian release."""
  return privacy_loss_distribution.from_gaussian_mechanism(
      standard_deviation=noise_multiplier,
      value_discretization_interval=interval,
      sampling_prob=sampling_probability,
  )


class PLDAccountant(pld_privacy_accountant.PLDAccountant):
  """dp_accounting's PLD accountant, plus `PureEpsilonDpEvent` and a cache.

  For a `PureEpsilonDpEvent` it composes the PLD of a generic (eps, 0)-DP
  mechanism (`privacy_loss_distribution.from_privacy_parameters`), which is
  the PLD of randomized response and hence tight for the worst case. The PLD
  of one Poisson-sampled Gaussian release (1.2 s to build at dp_accounting's
  default discretization) is built once per process and self-composed as
  dp_accounting does.
  """

  def _maybe_compose(
      self, event: dp_event.DpEvent, count: int, do_compose: bool
  ) -> Optional[privacy_accountant.PrivacyAccountant.CompositionErrorDetails]:
    if do_compose and count == 0:
      # Composed zero times: nothing (dp_accounting's PLD would divide by
      # the count for a Gaussian; a stream's later rounds record count 0).
      # `supports` asks with count 0 and do_compose False: not here.
      return None
    if _noise_free(event):
      event = dp_event.NonPrivateDpEvent()
    if isinstance(event, events.PureEpsilonDpEvent):
      if do_compose:
        pld = privacy_loss_distribution.from_privacy_parameters(
            pld_common.DifferentialPrivacyParameters(event.epsilon, 0.0),
            value_discretization_interval=self._value_discretization_interval,
        )
        self._pld = self._pld.compose(pld.self_compose(count))
      return None
    if (
        do_compose
        and isinstance(event, dp_event.PoissonSampledDpEvent)
        and isinstance(event.event, dp_event.GaussianDpEvent)
        and self.neighboring_relation == NeighboringRelation.ADD_OR_REMOVE_ONE
        and event.sampling_probability > 0
        and event.event.noise_multiplier > 0
    ):
      pld = _one_release_pld(
          float(event.sampling_probability),
          float(event.event.noise_multiplier),
          self._value_discretization_interval,
      )
      self._pld = self._pld.compose(pld.self_compose(count))
      return None
    return super()._maybe_compose(event, count, do_compose)


def make_accountant(
    name: str, neighboring_relation: str
) -> privacy_accountant.PrivacyAccountant:
  """A fresh accountant: `name` in ('rdp', 'pld'), relation by its name."""
  validation.one_of('accountant', name, ACCOUNTANTS)
  relation = RELATIONS[
      validation.one_of('neighboring_relation', neighboring_relation, RELATIONS)
  ]
  if name == 'rdp':
    return RdpAccountant(neighboring_relation=relation)
  return PLDAccountant(
      neighboring_relation=relation,
      value_discretization_interval=PLD_DISCRETIZATION,
  )


def pure_epsilon_span(event: dp_event.DpEvent, count: int = 1) -> float:
  """Sum of count * eps over the pure-eps releases in `event` (its PLD span)."""
  if isinstance(event, events.PureEpsilonDpEvent):
    return count * event.epsilon
  if isinstance(event, dp_event.SelfComposedDpEvent):
    return pure_epsilon_span(event.event, count * event.count)
  if isinstance(event, dp_event.ComposedDpEvent):
    return sum(pure_epsilon_span(e, count) for e in event.events)
  return 0.0


def smallest_noise_multiplier(event: dp_event.DpEvent) -> float:
  """The smallest positive Gaussian noise multiplier in `event`, or inf."""
  if isinstance(event, dp_event.GaussianDpEvent):
    z = event.noise_multiplier
    return z if z > 0 else float('inf')
  if isinstance(event, dp_event.SelfComposedDpEvent):
    return smallest_noise_multiplier(event.event)
  if isinstance(event, dp_event.ComposedDpEvent):
    return min(
        [smallest_noise_multiplier(e) for e in event.events],
        default=float('inf'),
    )
  inner = getattr(event, 'event', None)  # Sampled events.
  if isinstance(inner, dp_event.DpEvent):
    return smallest_noise_multiplier(inner)
  return float('inf')


def can_count(
    name: str, event: dp_event.DpEvent, relation: str
) -> Optional[str]:
  """None if accountant `name` can count `event`, else the reason it cannot.

  dp_accounting's `supports` looks at event types only; the PLD accountant also
  declines pure-eps compositions whose span exceeds its grid and Gaussians of
  noise multiplier below `PLD_MIN_NOISE_MULTIPLIER` (see above).
  """
  acc = make_accountant(name, relation)
  if not acc.supports(event):
    return f'dp_accounting {name.upper()} accountant does not support {event}'
  if name == 'pld':
    span = pure_epsilon_span(event) / PLD_DISCRETIZATION
    if span > PLD_MAX_SPAN:
      return (
          f'the pure-eps releases span {span:.3g} PLD grid points (limit '
          f'{PLD_MAX_SPAN:.0g}): too large for the PLD accountant'
      )
    z = smallest_noise_multiplier(event)
    if z < PLD_MIN_NOISE_MULTIPLIER:
      return (
          f'a Gaussian of noise multiplier {z:.3g} < '
          f'{PLD_MIN_NOISE_MULTIPLIER:g}: its PLD grid is too large for the '
          'PLD accountant'
      )
  return None


def relation_for(event: dp_event.DpEvent) -> Optional[str]:
  """The neighbouring relation an event's sampling needs, None if any works."""
  if isinstance(event, dp_event.PoissonSampledDpEvent):
    return 'add_or_remove_one'
  if isinstance(event, dp_event.SampledWithoutReplacementDpEvent):
    return 'replace_one'
  if isinstance(event, dp_event.SelfComposedDpEvent):
    return relation_for(event.event)
  if isinstance(event, dp_event.ComposedDpEvent):
    needs = {relation_for(e) for e in event.events} - {None}
    if len(needs) > 1:
      raise ValueError(
          'the event mixes Poisson sampling (add-or-remove-one) with '
          'fixed-size sampling (replace-one); no accountant counts both'
      )
    return needs.pop() if needs else None
  return None
