"""What a tff_priv mechanism releases, as dp_accounting `DpEvent`s.

tff_priv keeps dp_accounting's split between what happened (a `DpEvent`) and
how it is counted (an accountant, see `accountants.py`). Mechanisms describe a
release with the builders here (a Gaussian sum, its client sampling, a tree
of DP-FTRL, a pure eps-DP report); the ledger (`ledger.py`) collects them.
"""

import math
from typing import Optional

import attr
import dp_accounting
from dp_accounting import dp_event
import numpy as np

from tff_priv import validation
from tff_priv.accounting import sampling as sampling_lib


@attr.s(frozen=True, slots=True, auto_attribs=True)
class PureEpsilonDpEvent(dp_event.DpEvent):
  """A release that is epsilon-DP (delta = 0) for any two neighbouring inputs.

  For local DP, the "input" is one user's value and any two values are
  neighbours, so one eps-LDP report is this event. A pure eps-DP release, such
  as one eps-LDP report of one value (LDP-FL's two-point encoder):
  `PureEpsilonDpEvent(epsilon)`, defined here because dp_accounting 0.4.3 has
  no event for it. Its Renyi divergence is bounded by that of binary
  randomized response (see `pure_epsilon_rdp`).
  """

  epsilon: float


# The event classes tff_priv reads back from JSON or from a TFF state; nothing
# else is instantiated from data.
EVENT_CLASSES = {
    cls.__name__: cls
    for cls in (
        dp_event.NoOpDpEvent,
        dp_event.NonPrivateDpEvent,
        dp_event.GaussianDpEvent,
        dp_event.LaplaceDpEvent,
        dp_event.SelfComposedDpEvent,
        dp_event.ComposedDpEvent,
        dp_event.PoissonSampledDpEvent,
        dp_event.SampledWithReplacementDpEvent,
        dp_event.SampledWithoutReplacementDpEvent,
        dp_event.SingleEpochTreeAggregationDpEvent,
        PureEpsilonDpEvent,
    )
}


def pure_epsilon_rdp(orders, epsilon: float) -> np.ndarray:
  """Renyi DP of order `alpha` of any epsilon-DP mechanism, for each order.

  Every eps-DP mechanism's pair of output distributions on neighbouring inputs
  is a post-processing of binary randomized response with parameter eps
  (Kairouz, Oh, Viswanath 2015, "The composition theorem for differential
  privacy", Thm 2.2/2.3), so by the data-processing inequality its Renyi
  divergence is at most randomized response's. With p = e^eps / (1 + e^eps):

      RDP(alpha) = 1/(alpha - 1) * log(p^alpha (1-p)^(1-alpha)
                                       + (1-p)^alpha p^(1-alpha)),

  which never exceeds eps (Mironov 2017, Prop. 3: eps-DP is (alpha, eps)-RDP).

  Args:
    orders: RDP orders alpha > 1.
    epsilon: the pure DP parameter, >= 0.

  Returns:
    The RDP values, one per order.
  """
  epsilon = validation.non_negative('epsilon', epsilon)
  alpha = np.asarray(orders, dtype=np.float64)
  if np.any(alpha <= 1):
    raise ValueError('orders must all be > 1')
  if epsilon == 0:
    return np.zeros_like(alpha)
  log_p = -np.logaddexp(0.0, -epsilon)  # log(e^eps / (1 + e^eps))
  log_q = -np.logaddexp(0.0, epsilon)  # log(1 / (1 + e^eps))
  terms = np.logaddexp(
      alpha * log_p + (1 - alpha) * log_q, alpha * log_q + (1 - alpha) * log_p
  )
  return np.minimum(terms / (alpha - 1), epsilon)


def sampled_event(
    event: dp_event.DpEvent,
    sampling: Optional[sampling_lib.Sampling] = None,
) -> dp_event.DpEvent:
  """`event` (one round, one unit) under the round's client sampling.

  Client sampling, per round:

  - Poisson sampling with rate q (each client joins independently):
    `PoissonSampledDpEvent(q, ...)`, counted under add-or-remove-one adjacency;
  - fixed-size sampling of K of N clients without replacement:
    `SampledWithoutReplacementDpEvent(N, K, ...)`, counted under replace-one
    adjacency (Wang, Balle, Kasiviswanathan 2019).
  - no sampling (every client, every round): the bare event.

  Args:
    event: the event of one round for a unit that takes part.
    sampling: the round's `sampling.Sampling`: Poisson sampling with rate q,
      or fixed-size sampling of K of N clients without replacement. None:
      every client takes part.

  Returns:
    A `dp_accounting.DpEvent`.
  """
  if not isinstance(event, dp_event.DpEvent):
    raise TypeError(f'event must be a dp_accounting DpEvent, got {event!r}')
  sampling = sampling_lib.Sampling.of(sampling)
  if sampling.kind == 'poisson' and sampling.sampling_probability < 1:
    return dp_event.PoissonSampledDpEvent(sampling.sampling_probability, event)
  if sampling.kind == 'fixed' and sampling.sample_size < sampling.population:
    return dp_event.SampledWithoutReplacementDpEvent(
        sampling.population, sampling.sample_size, event
    )
  return event


def unsampled(event: dp_event.DpEvent) -> dp_event.DpEvent:
  """`event` without its client-sampling wrappers (a unit in every round)."""
  if isinstance(
      event,
      (
          dp_event.PoissonSampledDpEvent,
          dp_event.SampledWithoutReplacementDpEvent,
      ),
  ):
    return unsampled(event.event)
  if isinstance(event, dp_event.SelfComposedDpEvent):
    return dp_event.SelfComposedDpEvent(unsampled(event.event), event.count)
  if isinstance(event, dp_event.ComposedDpEvent):
    return dp_event.ComposedDpEvent([unsampled(e) for e in event.events])
  return event


def gaussian_releases(event: dp_event.DpEvent) -> list[tuple[float, int]]:
  """(noise multiplier, count) of each Gaussian release in `event`, in order.

  Client sampling is read through (a sampled Gaussian is its Gaussian).

  Raises:
    TypeError: `event` holds a release other than a Gaussian.
  """
  event = unsampled(event)
  if isinstance(event, dp_event.GaussianDpEvent):
    return [(float(event.noise_multiplier), 1)]
  if isinstance(event, dp_event.SelfComposedDpEvent):
    return [(z, n * event.count) for z, n in gaussian_releases(event.event)]
  if isinstance(event, dp_event.ComposedDpEvent):
    return [r for e in event.events for r in gaussian_releases(e)]
  if isinstance(event, dp_event.NoOpDpEvent):
    return []
  raise TypeError(f'not a composition of Gaussian releases: {event}')


def sampled_gaussian_event(
    noise_multiplier: float,
    sampling: Optional[sampling_lib.Sampling] = None,
) -> dp_event.DpEvent:
  """The event of one round of a Gaussian sum over sampled clients.

  Gaussian mechanism on a sum with L2 sensitivity S and noise std s:
  `GaussianDpEvent(noise_multiplier = s / S)`, under the sampling of
  `sampled_event` (no sampling: the bare Gaussian event).

  Args:
    noise_multiplier: noise std divided by the L2 sensitivity of the sum, >= 0
      (0 is a non-private release: the accountants then report infinite eps).
    sampling: as `sampled_event`.

  Returns:
    A `dp_accounting.DpEvent`.
  """
  noise_multiplier = validation.non_negative(
      'noise_multiplier', noise_multiplier
  )
  return sampled_event(
      dp_event.GaussianDpEvent(noise_multiplier), sampling=sampling
  )


def pure_epsilon_event(epsilon: float) -> PureEpsilonDpEvent:
  """The event of one eps-DP (or eps-LDP) release."""
  epsilon = validation.positive('epsilon', epsilon)
  if not math.isfinite(epsilon):
    raise ValueError(f'epsilon must be finite, got {epsilon}')
  return PureEpsilonDpEvent(epsilon)


def tree_sensitivity_squared(steps: int) -> float:
  """S of a tree of `steps` leaves, as dp_accounting's RDP accountant counts it.

  One tree of DP-FTRL's tree aggregation over `steps` rounds, each client in
  at most one: `SingleEpochTreeAggregationDpEvent(z, steps)`, counted by
  dp_accounting's RDP accountant under REPLACE_SPECIAL as a Gaussian of
  multiplier z / sqrt(S), S = `tree_sensitivity_squared(steps)`.

  `SingleEpochTreeAggregationDpEvent(z, steps)` has the Renyi divergence of
  a Gaussian of multiplier z / sqrt(S): S is read off the accountant (its RDP
  over a Gaussian's of the same z at one order), so that a calibration
  through it charges exactly what the ledger will. S is the number of
  complete tree nodes one leaf can lie in, ceil(log2(steps + 1)).
  """
  steps = validation.int_at_least('steps', steps, 1)
  relation = dp_accounting.NeighboringRelation
  orders = [2.0]

  def rdp(event, neighboring_relation):
    accountant = dp_accounting.rdp.RdpAccountant(orders, neighboring_relation)
    accountant.compose(event)
    return float(accountant._rdp[0])  # pylint: disable=protected-access

  tree = rdp(
      dp_accounting.SingleEpochTreeAggregationDpEvent(1.0, steps),
      relation.REPLACE_SPECIAL,
  )
  return tree / rdp(
      dp_accounting.GaussianDpEvent(1.0), relation.ADD_OR_REMOVE_ONE
  )
