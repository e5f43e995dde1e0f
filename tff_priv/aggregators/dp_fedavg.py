"""TFF's DP-FedAvg factory: a fixed or adaptive clip, or calibrated to a plan.

`factory` is `tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed` or
`gaussian_adaptive` at a noise multiplier (the training program's
`dp_fedavg`), and `adopt_state` carries a saved state over to another noise.
`calibrated` is `gaussian_fixed` with z calibrated for T Poisson-sampled
rounds, and its record sum carrying the plan (`tff_priv.aggregators.plan`):
round T+1 is refused. Their state is TFF's `DPAggregatorState`, read by TFF's
own `extract_dp_event_from_state`.
"""

from typing import Optional

import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_priv import validation
from tff_priv.accounting import calibration
from tff_priv.aggregators import plan as plan_lib

# Adaptive clipping's target quantile and first clip when none is given
# (TFF's defaults).
DEFAULT_QUANTILE = 0.5
DEFAULT_INITIAL_CLIP = 0.1


def factory(
    noise_multiplier: float,
    clients_per_round: int,
    clip: Optional[float] = None,
    quantile: Optional[float] = None,
    initial_clip: Optional[float] = None,
) -> tuple[tff.aggregators.DifferentiallyPrivateFactory, str]:
  """TFF's DP factory at z, with its clipping in words.

  `gaussian_fixed` at `clip`; None: adaptive clipping (Andrew et al.,
  "Differentially Private Learning with Adaptive Clipping", NeurIPS 2021),
  whose clip follows a target `quantile` of the clients' update norms,
  estimated from a noised count of the clients under it, from `initial_clip`
  (None: TFF's defaults). Its round's event is TFF's: the value's Gaussian
  composed with the clipped count's, whose RDP is that of one Gaussian of z
  (the effective noise multiplier), so a target epsilon covers the quantile
  estimate too.

  Raises:
    ValueError: adaptive clipping cannot reach z with these clients.
  """
  k = float(clients_per_round)
  if clip is not None:
    fixed = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        noise_multiplier, k, clip
    )
    return fixed, 'fixed'
  quantile = quantile or DEFAULT_QUANTILE
  # The clipped count's noise: TFF's default 0.05 K (Andrew et al.), at
  # least z, so that the value's noise grows by at most sqrt(4 / 3) for
  # the count's share of the budget (TFF refuses z >= 0.1 K otherwise).
  count_stddev = max(0.05 * k, noise_multiplier)
  try:
    # tff.learning.dp_aggregator's adaptive clip (its initial clip and
    # learning rate), without its zeroing, which tracks the clients'
    # norms unnoised.
    adaptive = tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
        noise_multiplier,
        k,
        target_unclipped_quantile=quantile,
        clipped_count_stddev=count_stddev,
        initial_l2_norm_clip=initial_clip or DEFAULT_INITIAL_CLIP,
    )
  except ValueError as e:
    raise ValueError(
        f'adaptive clipping cannot reach noise_multiplier='
        f'{noise_multiplier:.4g} with {clients_per_round} clients per round '
        f'({str(e).splitlines()[0]}); give a fixed clip or more clients per '
        'round'
    ) from None
  return adaptive, (
      f'adaptive (TFF gaussian_adaptive, target quantile '
      f'{quantile:g}, clipped count std {count_stddev:.4g})'
  )


def adopt_state(loaded, fresh):
  """A saved learning state carried over to `fresh`'s noise.

  For a process of `factory`'s (`Loop.adopt_state` of the training
  program). TFF's DP aggregator keeps its noise in its state (the query's
  global state): the aggregator becomes this process's, with the adaptive
  clip's current estimate (a noised state of the run) carried over.
  """
  aggregator = fresh.aggregator
  query = aggregator.query_state
  numerator = getattr(query, 'numerator_state', None)
  if numerator is not None and hasattr(numerator, 'quantile_estimator_state'):
    # TFF's gaussian_adaptive: NormalizedQuery(QuantileAdaptiveClipSumQuery).
    old = loaded.aggregator.query_state.numerator_state
    clip = old.sum_state.l2_norm_clip
    numerator = numerator._replace(
        sum_state=numerator.sum_state._replace(
            l2_norm_clip=clip,
            stddev=clip * numerator.noise_multiplier,
        ),
        quantile_estimator_state=numerator.quantile_estimator_state._replace(
            current_estimate=(old.quantile_estimator_state.current_estimate),
        ),
    )
    aggregator = aggregator._replace(
        query_state=query._replace(numerator_state=numerator)
    )
  return loaded._replace(aggregator=aggregator)


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
