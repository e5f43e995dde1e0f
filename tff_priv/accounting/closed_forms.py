"""The papers' closed-form privacy claims and the accountant's reading of them.

Nothing here is a guarantee by itself. Each function states a paper's formula
(UDP, Fed-SMP, LDP-FL) with its equation number; tff_priv reports it next to
the accountant's answer (`ledger.py`) and never instead of it.
`udp_theorem1_truth` and `fedsmp_theorem1_truth` put the UDP and Fed-SMP
formulas back into the accountant to show what they really give
(`ClaimCheck`).
"""

import dataclasses
import math
from typing import Optional

from dp_accounting.pld import common as pld_common
from dp_accounting.pld import privacy_loss_distribution

from tff_priv import validation
from tff_priv.accounting import accountants
from tff_priv.accounting import calibration
from tff_priv.accounting import sampling as sampling_lib

# UDP (Wei et al.)


def udp_theorem1_sigma(
    epsilon: float,
    delta: float,
    sampling_probability: float,
    rounds: int,
    sensitivity: float,
) -> float:
  """UDP Theorem 1, eq. (10): sigma = Delta sqrt(2 q T ln(1/delta)) / eps.

  UDP (Wei et al., "User-Level Privacy-Preserving Federated Learning: Analysis
  and Performance Optimization"), Theorem 1, eq. (10):
  sigma = Delta * sqrt(2 q T ln(1/delta)) / eps, with Delta the L2 sensitivity
  of a client's upload (2 eta C / |D_i| for one clipped full-batch step,
  eq. (13)), q = K/U, T rounds. Derived from the moments accountant with the
  approximation lambda Delta^2 / (2 sigma^2) << 1, eq. (15); optimistic (see
  `udp_theorem1_truth`).

  Args:
    epsilon: the client's target eps_i > 0.
    delta: the client's target delta_i in (0, 1).
    sampling_probability: q = K/U in (0, 1].
    rounds: T >= 1.
    sensitivity: Delta > 0, the L2 sensitivity of the client's upload.

  Returns:
    The noise std sigma_i the paper prescribes (absolute, not a multiplier).
  """
  epsilon = validation.positive('epsilon', epsilon)
  delta = validation.open_unit('delta', delta)
  q = validation.half_open_unit('sampling_probability', sampling_probability)
  rounds = validation.int_at_least('rounds', rounds, 1)
  sensitivity = validation.positive('sensitivity', sensitivity)
  return sensitivity * math.sqrt(2 * q * rounds * math.log(1 / delta)) / epsilon


def crd_total_budget(
    epsilon: float,
    delta: float,
    sampling_probability: float,
    sensitivity: float,
) -> float:
  """UDP Theorem 4: B = eps^2 / (2 q Delta^2 ln(1/delta)), in 1/sigma^2 units.

  B = T / sigma^2 for eq. (10)'s sigma: the budget that T rounds at that sigma
  spend exactly.
  """
  epsilon = validation.positive('epsilon', epsilon)
  delta = validation.open_unit('delta', delta)
  q = validation.half_open_unit('sampling_probability', sampling_probability)
  sensitivity = validation.positive('sensitivity', sensitivity)
  return epsilon**2 / (2 * q * sensitivity**2 * math.log(1 / delta))


def crd_round_sigma(
    total_budget: float, spent_budget: float, rounds_left: int
) -> float:
  """UDP Theorem 4 / Algorithm 2: sigma_t = sqrt((T - t) / (B - spent)).

  Theorem 4 / Algorithm 2 (CRD): the total budget
  B = eps^2 / (2 q Delta^2 ln(1/delta)) = T / sigma^2 of eq. (10); round t
  (t = 0, 1, ...) with T rounds planned uses
  sigma_t = sqrt((T - t) / (B - sum_{tau < t} 1 / sigma_tau^2)),
  spreading what is left evenly over the rounds left. With T unchanged sigma_t
  stays at eq. (10)'s sigma; when T shrinks sigma_t shrinks, and
  sum_t 1 / sigma_t^2 never exceeds B.

  Args:
    total_budget: B from `crd_total_budget`.
    spent_budget: sum over past rounds of 1 / sigma_tau^2, < B.
    rounds_left: T - t >= 1, the rounds still planned including this one.

  Returns:
    This round's noise std: the remaining budget spread evenly over the rounds
    left, so that spending it every round until T ends exactly at B.
  """
  total_budget = validation.positive('total_budget', total_budget)
  spent_budget = validation.non_negative('spent_budget', spent_budget)
  rounds_left = validation.int_at_least('rounds_left', rounds_left, 1)
  remaining = total_budget - spent_budget
  if remaining <= 0:
    raise ValueError(
        f'spent_budget ({spent_budget}) must be below total_budget '
        f'({total_budget}): the budget is used up'
    )
  return math.sqrt(rounds_left / remaining)


# Fed-SMP (Hu, Guo, Gong)


def fedsmp_theorem1_noise_multiplier(
    epsilon: float, delta: float, sampling_probability: float, rounds: int
) -> float:
  """Fed-SMP Theorem 1: sigma = sqrt(7 q^2 T (eps + 2 log(1/delta)) / eps^2).

  The smallest noise multiplier the theorem's sufficient condition allows.
  Fed-SMP (Hu, Guo, Gong, "Federated Learning with Sparsified Model
  Perturbation"), Theorem 1: sigma^2 >= 7 q^2 T (eps + 2 log(1/delta)) / eps^2
  (noise multiplier sigma, sampling rate q = K/N, T rounds), about twice the
  sigma an RDP accountant needs.
  """
  epsilon = validation.positive('epsilon', epsilon)
  delta = validation.open_unit('delta', delta)
  q = validation.half_open_unit('sampling_probability', sampling_probability)
  rounds = validation.int_at_least('rounds', rounds, 1)
  return math.sqrt(
      7 * q**2 * rounds * (epsilon + 2 * math.log(1 / delta)) / epsilon**2
  )


# LDP-FL (Sun, Qian, Chen)


def ldp_per_value_epsilon(epsilon: float) -> float:
  """LDP-FL Theorem 1: each perturbed value is eps-LDP (the paper's claim).

  LDP-FL (Sun, Qian, Chen): each value is eps-LDP (Theorem 1). The paper claims
  no growth in d or T; no theorem supports that. Reported here:
  (a) eps per value (the paper's claim, this function);
  (b) plain composition d T eps over a client's d values and T rounds
      (`ldp_plain_composition_epsilon`);
  (c) the shuffle-model amplification of Feldman, McMillan, Talwar (2021,
      "Hiding Among the Clones", Theorem 3.1), per value, composed over the d T
      values with dp_accounting's PLD accountant (`ldp_shuffle_composed`).
      Valid only when eps0 <= log(n / (16 log(2 / delta))).
  """
  return validation.positive('epsilon', epsilon)


def ldp_plain_composition_epsilon(
    epsilon: float, num_values: int, rounds: int
) -> float:
  """Basic composition over a client's d values, T rounds: d T eps (pure DP)."""
  epsilon = validation.positive('epsilon', epsilon)
  num_values = validation.int_at_least('num_values', num_values, 1)
  rounds = validation.int_at_least('rounds', rounds, 1)
  return num_values * rounds * epsilon


@dataclasses.dataclass(frozen=True)
class ShuffleBound:
  """The shuffle-model (eps, delta) of an eps0-LDP report among n, or why not.

  Attributes:
    applicable: whether the theorem's condition holds.
    epsilon: the amplified eps (None when not applicable).
    delta: the delta the bound is for.
    reason: why it does not apply ('' when it does).
  """

  applicable: bool
  epsilon: Optional[float]
  delta: float
  reason: str = ''


def shuffle_max_local_epsilon(num_clients: int, delta: float) -> float:
  """FMT 2021 Theorem 3.1's condition: eps0 <= log(n / (16 log(2/delta)))."""
  n = validation.int_at_least('num_clients', num_clients, 1)
  delta = validation.open_unit('delta', delta)
  return math.log(n / (16 * math.log(2 / delta)))


def shuffle_epsilon(
    local_epsilon: float, num_clients: int, delta: float
) -> ShuffleBound:
  """Feldman, McMillan, Talwar 2021, Theorem 3.1 (one report per client).

  n clients each send one eps0-LDP report; after a uniformly random shuffle
  the collection is (eps, delta)-DP with

      eps <= log(1 + (e^eps0 - 1) / (e^eps0 + 1)
                     * (8 sqrt(e^eps0 log(4/delta)) / sqrt(n) + 8 e^eps0 / n)),

  provided eps0 <= log(n / (16 log(2/delta))).

  Returns:
    A `ShuffleBound`; `applicable` is False (and `epsilon` None) outside the
    condition. Never an extrapolated number.
  """
  eps0 = validation.positive('local_epsilon', local_epsilon)
  n = validation.int_at_least('num_clients', num_clients, 1)
  delta = validation.open_unit('delta', delta)
  limit = shuffle_max_local_epsilon(n, delta)
  if eps0 > limit:
    return ShuffleBound(
        applicable=False,
        epsilon=None,
        delta=delta,
        reason=(
            f'FMT21 Thm 3.1 needs eps0 <= log(n / (16 log(2/delta))) = '
            f'{limit:.4g} for n={n}, delta={delta:.3g}; eps0={eps0:.4g}'
        ),
    )
  e0 = math.exp(eps0)
  eps = math.log1p(
      (e0 - 1)
      / (e0 + 1)
      * (8 * math.sqrt(e0 * math.log(4 / delta)) / math.sqrt(n) + 8 * e0 / n)
  )
  return ShuffleBound(applicable=True, epsilon=eps, delta=delta)


def ldp_shuffle_composed(
    local_epsilon: float,
    num_clients: int,
    num_values: int,
    rounds: int,
    delta: float,
) -> ShuffleBound:
  """The shuffle bound per value, composed over d values and T rounds.

  Every one of a client's d values in each of T rounds is shuffled among the n
  clients' reports of the same coordinate (split and shuffle), so a client's
  total loss is the composition of k = d T shuffled releases. Half of `delta`
  goes to the k per-release bounds (delta / (2 k) each), half to the
  composition, which dp_accounting's PLD accountant does tightly for
  (eps, delta)-DP mechanisms (`from_privacy_parameters`, self-composed k
  times), or, when k releases are too many for the PLD grid, the advanced
  composition theorem (Dwork, Rothblum, Vadhan 2010): sqrt(2 k ln(2/delta)) eps
  + k eps (e^eps - 1), the `reason` field then says so.

  Returns:
    A `ShuffleBound` for the whole run at `delta`, not applicable when the
    per-release condition fails at delta / (2 k).
  """
  n = validation.int_at_least('num_clients', num_clients, 1)
  num_values = validation.int_at_least('num_values', num_values, 1)
  rounds = validation.int_at_least('rounds', rounds, 1)
  delta = validation.open_unit('delta', delta)
  k = num_values * rounds
  per_release = shuffle_epsilon(local_epsilon, n, delta / (2 * k))
  if not per_release.applicable:
    return ShuffleBound(
        applicable=False,
        epsilon=None,
        delta=delta,
        reason=f'per release at delta/(2dT): {per_release.reason}',
    )
  if k * per_release.epsilon / accountants.PLD_DISCRETIZATION > (
      accountants.PLD_MAX_SPAN
  ):
    # Too many releases for the PLD grid: the advanced composition theorem
    # (Dwork, Rothblum, Vadhan 2010, Thm III.3) with delta' = delta / 2.
    eps = per_release.epsilon
    total = math.sqrt(2 * k * math.log(2 / delta)) * eps + k * eps * math.expm1(
        eps
    )
    return ShuffleBound(
        applicable=True,
        epsilon=total,
        delta=delta,
        reason=(
            'composed by the advanced composition theorem (PLD grid too large)'
        ),
    )
  pld = privacy_loss_distribution.from_privacy_parameters(
      pld_common.DifferentialPrivacyParameters(
          per_release.epsilon, per_release.delta
      ),
      value_discretization_interval=accountants.PLD_DISCRETIZATION,
  )
  total = pld.self_compose(k).get_epsilon_for_delta(delta)
  return ShuffleBound(applicable=True, epsilon=total, delta=delta)


# A closed form read back by the accountant.


@dataclasses.dataclass(frozen=True)
class ClaimCheck:
  """A closed form's claim beside the accountant's truth.

  The closed form's noise goes back into dp_accounting's accountant with the
  paper's own sampling model, and both readings come out: the eps actually
  spent at the claimed delta, and the delta actually reached at the claimed
  eps. The claim holds when the true eps is <= the claimed one (equivalently
  the true delta <= the claimed one).

  Attributes:
    formula: which closed form.
    noise_multiplier: the noise it prescribes, over the sensitivity.
    claimed_epsilon: the target eps it claims to meet.
    claimed_delta: the target delta it claims to meet.
    true_epsilon: the accountant's eps at claimed_delta.
    true_delta: the accountant's delta at claimed_epsilon.
    accountant: which accountant gave the truth.
    holds: true_epsilon <= claimed_epsilon.
  """

  formula: str
  noise_multiplier: float
  claimed_epsilon: float
  claimed_delta: float
  true_epsilon: float
  true_delta: float
  accountant: str
  holds: bool


def _check(formula, z, epsilon, delta, q, rounds, accountant):
  event = calibration.gaussian_rounds_event(
      z, rounds, sampling_lib.Sampling.poisson(q)
  )
  composed = accountants.make_accountant(
      accountant, 'add_or_remove_one'
  ).compose(event)
  true_eps = composed.get_epsilon(delta)
  return ClaimCheck(
      formula=formula,
      noise_multiplier=z,
      claimed_epsilon=epsilon,
      claimed_delta=delta,
      true_epsilon=float(true_eps),
      true_delta=float(composed.get_delta(epsilon)),
      accountant=accountant,
      holds=bool(true_eps <= epsilon),
  )


def udp_theorem1_truth(
    epsilon: float,
    delta: float,
    sampling_probability: float,
    rounds: int,
    accountant: str = 'rdp',
) -> ClaimCheck:
  """UDP eq. (10)'s sigma/Delta for (eps, delta, q, T), read by the accountant.

  Eq. (10) is derived with the moments accountant of the Poisson-subsampled
  Gaussian (eq. 14, mixture 1 - q + q e^...), so it is checked against
  `PoissonSampledDpEvent(q, GaussianDpEvent(sigma/Delta))` over T rounds. It
  is optimistic: at delta = 1e-3, q = 1, T = 200 its sigma gives delta ~ 6.4e-3
  at eps 8 and ~ 0.035 at eps 12.
  """
  z = udp_theorem1_sigma(
      epsilon, delta, sampling_probability, rounds, sensitivity=1.0
  )
  return _check(
      'UDP Theorem 1 (eq. 10)',
      z,
      epsilon,
      delta,
      sampling_probability,
      rounds,
      accountant,
  )


def fedsmp_theorem1_truth(
    epsilon: float,
    delta: float,
    sampling_probability: float,
    rounds: int,
    accountant: str = 'rdp',
) -> ClaimCheck:
  """Fed-SMP Theorem 1's noise multiplier, read by the accountant.

  Checked against the same event as `udp_theorem1_truth` (the paper reports
  its eps from an RDP accountant with Poisson sampling); it is conservative.
  """
  z = fedsmp_theorem1_noise_multiplier(
      epsilon, delta, sampling_probability, rounds
  )
  return _check(
      'Fed-SMP Theorem 1',
      z,
      epsilon,
      delta,
      sampling_probability,
      rounds,
      accountant,
  )
