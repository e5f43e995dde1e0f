"""Guarantees of runs whose noise is chosen adaptively: Renyi filters.

When a round's noise depends on earlier releases (UDP's CRD schedule lowers
sigma after the validation loss stalls), composing the events that happened
is a privacy odometer reading, not an (eps, delta) guarantee; a Renyi filter,
at orders fixed before the run, is one (`RdpBound`).
"""

import dataclasses
import math

from dp_accounting.rdp import rdp_privacy_accountant

from tff_priv import validation


@dataclasses.dataclass(frozen=True)
class RdpBound:
  """(alpha, rdp)-RDP at each of `orders`, on every path of the run.

  When a round's noise depends on earlier releases (UDP's CRD schedule lowers
  sigma after the validation loss stalls), composing the events that happened
  and converting at the best order after the fact is a privacy odometer reading,
  not an (eps, delta) guarantee (Rogers, Roth, Ullman, Vadhan, "Privacy
  odometers and filters", NeurIPS 2016). What is valid is a filter: if on every
  path the RDP costs of the rounds at an order alpha fixed before the run sum to
  at most B, the run is (alpha, B)-RDP (Feldman and Zrnic, "Individual privacy
  accounting via a Renyi filter", NeurIPS 2021, Theorem 3.1), hence
  (eps(alpha, B, delta), delta)-DP by the usual conversion.

  An `RdpBound` is such a statement, at one or more orders each of which holds
  on every path (a bound at every order is one for which the costs are bounded
  path by path at each of them, e.g. Gaussians with a bounded sum of 1 / z^2).
  Its eps is dp_accounting's RDP-to-(eps, delta) conversion, the one the
  `PrivacyLedger` uses.

  Attributes:
    orders: RDP orders > 1, fixed before the run.
    rdp: the bound at each order.
    description: what the bound is and why it holds (for reports).
  """

  orders: tuple[float, ...]
  rdp: tuple[float, ...]
  description: str

  def epsilon(self, delta: float) -> float:
    """The eps at `delta` of the best listed order (fixed in advance)."""
    delta = validation.open_unit('delta', delta)
    eps, _ = rdp_privacy_accountant.compute_epsilon(
        self.orders, self.rdp, delta
    )
    return float(eps)

  def to_dict(self) -> dict:
    return {
        'orders': list(self.orders),
        'rdp': list(self.rdp),
        'description': self.description,
    }


def at_order(order: float, budget: float, description: str) -> RdpBound:
  """A Renyi filter at one order: the run's RDP at `order` is <= `budget`."""
  order = validation.positive('order', order)
  if order <= 1:
    raise ValueError(f'order must be > 1, got {order}')
  return RdpBound(
      (order,), (validation.non_negative('budget', budget),), description
  )


def gaussian(inverse_variance_sum: float, description: str) -> RdpBound:
  """Gaussian releases whose sum of 1 / z_t^2 is <= `inverse_variance_sum`.

  A Gaussian of noise multiplier z has RDP alpha / (2 z^2) at every order, so
  a sum S of 1 / z_t^2 bounded on every path bounds the RDP at every order by
  alpha S / 2: the guarantee of one Gaussian of noise multiplier 1 / sqrt(S),
  at dp_accounting's default orders.
  """
  s = validation.non_negative('inverse_variance_sum', inverse_variance_sum)
  if not math.isfinite(s):
    raise ValueError(f'inverse_variance_sum must be finite, got {s}')
  orders = tuple(float(a) for a in rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
  return RdpBound(orders, tuple(a * s / 2 for a in orders), description)
