"""UDP's (Wei et al.) CRD budget, what every CRD path keeps, a run's ledger."""

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np

from tff_priv import validation
from tff_priv.accounting import accountants
from tff_priv.accounting import calibration
from tff_priv.accounting import closed_forms
from tff_priv.accounting import events
from tff_priv.accounting import filters
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.accounting import target_noise


@dataclasses.dataclass(frozen=True)
class CrdBudget:
  """The numbers of a CRD schedule: `noise_schedule.BudgetSchedule`'s arguments.

  Attributes:
    total_budget: B > 0, in the units of the cost.
    initial_rounds: T_0 >= 1, the planned number of rounds.
    sigma_table: None for the cost 1 / sigma^2; else the tabulated noise
      levels (absolute sigma), increasing.
    cost_table: with sigma_table: the RDP at `order` of one round at each
      sigma, decreasing.
    order: with the tables: the RDP order alpha* the costs are at.
  """

  total_budget: float
  initial_rounds: int
  sigma_table: Optional[np.ndarray] = None
  cost_table: Optional[np.ndarray] = None
  order: Optional[float] = None


def crd_budget(
    epsilon: float,
    delta: float,
    sensitivity: float,
    initial_rounds: int,
    sampling: Optional[sampling_lib.Sampling] = None,
    *,
    calibration: str = 'tight',
    table_size: int = 256,
) -> CrdBudget:
  """The budget CRD (Algorithm 2) spends for a client's (eps, delta) target.

  * 'paper': B = eps^2 / (2 q Delta^2 ln(1/delta)) (Theorem 4), cost
    1 / sigma^2.
  * 'tight' with q = 1 (every client every round): B = T_0 / sigma_0^2 for
    the tight sigma_0 of T_0 rounds (`target_noise.noise_for_target`), cost
    1 / sigma^2. Exact: the Gaussian's RDP at every order is linear in
    1 / sigma^2, so any schedule with sum 1 / sigma_t^2 <= B has RDP (hence
    eps) at most that of T_0 rounds at sigma_0.
  * 'tight' with q < 1: the sampled Gaussian's RDP is not linear in
    1 / sigma^2 (spending the same 1 / sigma^2 in fewer, less noisy rounds
    costs more), so the budget is the RDP itself at the order alpha* that
    gives eps for T_0 rounds at sigma_0: B = T_0 * RDP_alpha*(sigma_0), and a
    round at sigma costs RDP_alpha*(sigma), tabulated by dp_accounting on a
    grid of sigma. Since the eps of any run is at most its conversion at
    alpha*, a run that spends at most B at alpha* has eps <= the target.

  Args:
    epsilon: target eps_i > 0.
    delta: target delta_i in (0, 1).
    sensitivity: Delta > 0 of a client's update (absolute units of the noise).
    initial_rounds: T_0 >= 1, the initial plan.
    sampling: the rounds' client `Sampling` (None: every client every round).
    calibration: 'tight' (accountant, default) or 'paper' (Theorem 4's B).
    table_size: grid size of the tabulated cost for 'tight' with q < 1.

  Returns:
    A `CrdBudget` in absolute sigma units.
  """
  validation.one_of('calibration', calibration, target_noise.CALIBRATIONS)
  sensitivity = validation.positive('sensitivity', sensitivity)
  initial_rounds = validation.int_at_least('initial_rounds', initial_rounds, 1)
  sampling = sampling or sampling_lib.Sampling.none()
  if calibration == 'paper':
    budget = closed_forms.crd_total_budget(
        epsilon, delta, sampling.rate, sensitivity
    )
    return CrdBudget(budget, initial_rounds)
  sigma0 = target_noise.noise_for_target(
      epsilon, delta, initial_rounds, sampling, sensitivity=sensitivity
  )
  if sampling.rate == 1:
    return CrdBudget(initial_rounds / sigma0**2, initial_rounds)
  return _rdp_table_budget(
      sigma0, delta, sensitivity, initial_rounds, sampling, table_size
  )


def _rdp_table_budget(
    sigma0, delta, sensitivity, initial_rounds, sampling, table_size
):
  """'tight' CRD for q < 1: the budget is the RDP at the binding order."""
  table_size = validation.int_at_least('table_size', table_size, 2)
  one_round = lambda sigma: events.sampled_gaussian_event(  # pylint: disable=g-long-lambda
      sigma / sensitivity, sampling=sampling
  )
  relation = accountants.RELATIONS[
      accountants.relation_for(one_round(sigma0)) or 'add_or_remove_one'
  ]
  planned = accountants.RdpAccountant(neighboring_relation=relation)
  _, alpha = planned.compose(
      one_round(sigma0), initial_rounds
  ).get_epsilon_and_optimal_order(delta)

  def cost(sigma):
    acc = accountants.RdpAccountant(
        orders=[alpha], neighboring_relation=relation
    )
    return float(acc.compose(one_round(sigma)).rdp[0])

  budget = initial_rounds * cost(sigma0)
  # The least sigma any plan can need: one round spending the whole budget.
  sigma_low = sigma0 / 2
  while cost(sigma_low) < budget:
    sigma_low /= 2
  planned = np.geomspace(sigma_low, sigma0, table_size)
  # Above sigma0: the plan never needs it (its share of the budget only
  # grows), a resumed run whose budget left must also cover the rounds it
  # runs again may (up to MAX_NOISE_INCREASE x sigma0).
  above = np.geomspace(
      sigma0, calibration.MAX_NOISE_INCREASE * sigma0, table_size // 8 + 2
  )[1:]
  sigmas = np.concatenate([planned, above])
  costs = np.array([cost(s) for s in sigmas])
  costs[table_size - 1] = budget / initial_rounds  # Exactly sigma0's share.
  return CrdBudget(
      budget,
      initial_rounds,
      sigma_table=sigmas,
      cost_table=costs,
      order=alpha,
  )


def crd_bounds(
    schedule, sensitivity: float, max_rounds: Optional[int] = None
) -> tuple[filters.RdpBound, filters.RdpBound]:
  """What every path of a CRD schedule guarantees: (analyst, server).

  CRD picks each round's sigma from earlier releases (the validation loss),
  so the realised composition of its rounds is not a guarantee
  (`tff_priv.accounting.filters`). The schedule is a Renyi filter, which is:

  * analyst: with the tabulated cost (q < 1), the RDP at the order alpha*
    fixed before training is at most B on every path; with the cost
    1 / sigma^2 ('tight' at q = 1, or 'paper'), sum_t Delta^2 / sigma_t^2 <=
    Delta^2 B bounds the RDP of the unsampled Gaussians at every order (and a
    sampled release is no less private than an unsampled one).
  * server (each client over the rounds it took part in, no amplification):
    with the cost 1 / sigma^2 the same sum bounds it; with the table, a client
    in every round gets at most min(R / sigma_min^2, max_k (1 / sigma_k^2) /
    cost_k * B) of 1 / sigma^2 over R released rounds: the worst case the
    plan allows.

  Args:
    schedule: the run's `noise_schedule.BudgetSchedule` (read: `max_spent`,
      the most any path spends, and the `CrdBudget` fields).
    sensitivity: Delta of a client's update, in the units of sigma.
    max_rounds: R, the most rounds the run releases (None: the plan's T_0; a
      resumed run that runs rounds again releases more).

  Returns:
    (analyst bound, server-view bound), `filters.RdpBound`s.
  """
  sensitivity = validation.positive('sensitivity', sensitivity)
  spent = schedule.max_spent
  if schedule.sigma_table is None:
    bound = filters.gaussian(
        sensitivity**2 * spent,
        "Renyi filter: on every path the rounds' sum of Delta^2 / sigma_t^2 "
        'is at most the budget, which bounds the RDP at every order',
    )
    return bound, bound
  analyst = filters.at_order(
      schedule.order,
      spent,
      f'Renyi filter at order {schedule.order:g} (fixed before training): on '
      "every path the rounds' RDP at that order sums to at most the budget",
  )
  sigmas, costs = schedule.sigma_table, schedule.cost_table
  inverse_variance = min(
      (max_rounds or schedule.initial_rounds) / sigmas[0] ** 2,
      float(np.max(1.0 / (sigmas**2 * costs))) * spent,
  )
  server = filters.gaussian(
      sensitivity**2 * inverse_variance,
      'the worst case the schedule allows for a client in every round: at '
      'most the planned rounds, each at a tabulated sigma within the budget',
  )
  return analyst, server


def noise_ledger(
    noise_stddevs: Sequence[float],
    sensitivity: float,
    sampling: Optional[sampling_lib.Sampling] = None,
) -> ledger_lib.PrivacyLedger:
  """A ledger charged with the rounds a run actually ran (sigma_t per round).

  Per client: round t releases the client's update plus N(0, sigma_t^2 I),
  with L2 sensitivity Delta under replace-one-example, when the client is
  sampled. Valid for a sigma sequence fixed in advance; for CRD's, chosen
  from earlier releases, it is an odometer reading (`crd_bounds` is the
  guarantee).

  Args:
    noise_stddevs: sigma_t of each round, finite and >= 0.
    sensitivity: Delta > 0.
    sampling: the rounds' client `Sampling` (None: every client every round).
  """
  sensitivity = validation.positive('sensitivity', sensitivity)
  sampling = sampling or sampling_lib.Sampling.none()
  ledger = ledger_lib.PrivacyLedger()
  for sigma in noise_stddevs:
    if not math.isfinite(sigma) or sigma < 0:
      raise ValueError(f'noise_stddevs must be finite and >= 0, got {sigma}')
    ledger.record_gaussian(sigma / sensitivity, sampling=sampling)
  return ledger
