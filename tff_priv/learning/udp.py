"""UDP's CRD schedule (Wei et al.): the `BudgetSchedule` of the accounting's CRD budget."""

from typing import Optional

from tff_priv.accounting import sampling as sampling_lib
from tff_priv.accounting import udp as udp_accounting
from tff_priv.mechanisms import noise_schedule


def crd_schedule(
    epsilon: float,
    delta: float,
    sensitivity: float,
    initial_rounds: int,
    *,
    sampling: Optional[sampling_lib.Sampling] = None,
    sampling_probability: Optional[float] = None,
    population: Optional[int] = None,
    sample_size: Optional[int] = None,
    calibration: str = 'tight',
    table_size: int = 256,
) -> noise_schedule.BudgetSchedule:
  """The CRD schedule (Algorithm 2) for a client's (eps, delta) target.

  Its budget (B, and for 'tight' with q < 1 the tabulated costs at the order
  alpha*) is `tff_priv.accounting.udp.crd_budget`'s; the guarantees every
  path keeps are `tff_priv.accounting.udp.crd_bounds`'s.

  Args:
    epsilon: target eps_i > 0.
    delta: target delta_i in (0, 1).
    sensitivity: Delta > 0 of a client's update (absolute units of the noise).
    initial_rounds: T_0 >= 1, the initial plan.
    sampling: the rounds' client `Sampling` (instead of the three below).
    sampling_probability: Poisson client sampling rate q.
    population: U, for fixed-size sampling of `sample_size` clients.
    sample_size: K, for fixed-size sampling.
    calibration: 'tight' (accountant, default) or 'paper' (Theorem 4's B).
    table_size: grid size of the tabulated cost for 'tight' with q < 1.

  Returns:
    A `noise_schedule.BudgetSchedule` in absolute sigma units.
  """
  budget = udp_accounting.crd_budget(
      epsilon,
      delta,
      sensitivity,
      initial_rounds,
      sampling_lib.Sampling.of(
          sampling,
          sampling_probability=sampling_probability,
          population=population,
          sample_size=sample_size,
      ),
      calibration=calibration,
      table_size=table_size,
  )
  return noise_schedule.BudgetSchedule(
      budget.total_budget,
      budget.initial_rounds,
      sigma_table=budget.sigma_table,
      cost_table=budget.cost_table,
      order=budget.order,
  )
