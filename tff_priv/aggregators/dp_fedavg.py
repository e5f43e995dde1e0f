"""TFF's DP-FedAvg factory calibrated to a target eps over a plan of rounds.

`calibrated` is `tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed`
with z calibrated for T Poisson-sampled rounds, and its record sum carrying the
plan (`tff_priv.aggregators.plan`): round T+1 is refused. Its state is TFF's
`DPAggregatorState`, read by TFF's own `extract_dp_event_from_state`.
"""

import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_priv import validation
from tff_priv.accounting import calibration
from tff_priv.aggregators import plan as plan_lib


def calibrated(
    epsilon: float,
    *,
    total_rounds: int,
    population: int,
    clients_per_round: int,
    clip: float = 1.0,
    delta: float = 1e-5,
    spent=None,
) -> tff.aggregators.DifferentiallyPrivateFactory:
  """DP-FedAvg's factory whose run of `total_rounds` rounds meets (eps, delta).

  For a loop that Poisson-samples each of the N clients with q = K / N every
  round and charges each round with `PrivacyLedger.record_round(state,
  sampling_probability=q)`. Round T+1 is refused (`plan`). `spent`: a
  `PrivacyLedger` of earlier rounds, met together with the `total_rounds`
  rounds added (a plan extended).
  """
  population, k = validation.population_and_k(population, clients_per_round)
  clip = validation.positive('clip', clip)
  z = calibration.calibrate_noise_multiplier(
      epsilon,
      delta,
      total_rounds,
      sampling_probability=k / population,
      spent=calibration.Spent.of(spent),
  )
  # gaussian_fixed's query, built here to give it a record sum of our own.
  query = tfp.NormalizedQuery(
      tfp.GaussianSumQuery(l2_norm_clip=clip, stddev=clip * z),
      denominator=float(k),
  )
  return tff.aggregators.DifferentiallyPrivateFactory(
      query,
      plan_lib.planned_factory(
          tff.aggregators.SumFactory(), total_rounds, 'dp_fedavg'
      ),
  )
