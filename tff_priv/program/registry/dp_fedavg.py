"""DP-FedAvg: TFF's DP aggregator, central Gaussian noise on the clipped sum.

`tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive` (adaptive
clipping, `build`) or `gaussian_fixed` (a fixed clip), in
`tff.learning.algorithms.build_unweighted_fed_avg`; client-level DP under
Poisson sampling, add-or-remove-one client (McMahan et al., "Learning
Differentially Private Recurrent Language Models", ICLR 2018). The server
adds the noise: no guarantee against it.
"""

import dataclasses
from typing import Any, Optional

import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.accounting import guarantees
from tff_priv.accounting import reports
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.program.registry import base

NAME = 'dp_fedavg'
# The `Config` fields `privacy_report` reads.
REPORT_PARAMETERS = ('epsilon', 'noise_multiplier', 'delta')
# Adaptive clipping's target quantile and first clip when none is given
# (TFF's defaults).
DEFAULT_QUANTILE = 0.5
DEFAULT_INITIAL_CLIP = 0.1


@dataclasses.dataclass(frozen=True)
class Config:
  """DP-FedAvg's parameters.

  Attributes:
    epsilon: target eps of the whole run at `delta` (the default when
      `noise_multiplier` is not given).
    noise_multiplier: z, noise std of the sum / clip.
    delta: the delta of the target and the report.
    clip: fixed L2 clip of an update; None: adaptive clipping.
    adaptive_clip_quantile: adaptive clipping's target quantile of the
      clients' update norms (the fraction of clients left unclipped), in
      (0, 1); default 0.5 when clip is not given.
    adaptive_clip_initial: adaptive clipping's clip in round 1 (default
      TFF's 0.1; it then moves by at most a factor exp(0.2 / 2) a round).
  """

  epsilon: Optional[float] = None
  noise_multiplier: Optional[float] = None
  delta: float = base.DEFAULT_DELTA
  clip: Optional[float] = None
  adaptive_clip_quantile: Optional[float] = None
  adaptive_clip_initial: Optional[float] = None

  def __post_init__(self):
    self.validate()

  def validate(self) -> None:
    base.check_fields(
        self,
        {
            'adaptive_clip_quantile': validation.open_unit,
            'adaptive_clip_initial': validation.positive,
        },
    )
    base.fill_noise_target(self, NAME, ('epsilon', 'noise_multiplier'))
    adaptive = [
        k
        for k in ('adaptive_clip_quantile', 'adaptive_clip_initial')
        if getattr(self, k) is not None
    ]
    if self.clip is not None and adaptive:
      raise ValueError(
          f'give clip (a fixed clip) or {adaptive[0]} (adaptive clipping) '
          "for mechanism 'dp_fedavg', not both"
      )


def privacy_report(
    params: dict[str, Any], rounds: int, sampling: sampling_lib.Sampling
) -> dict:
  """The sampled Gaussian's eps by every accountant, or the noise for a target.

  Args:
    params: `REPORT_PARAMETERS` by name (absent: not given; `delta` given).
    rounds: T >= 1.
    sampling: the rounds' client `Sampling`.
  """
  return reports.gaussian_mechanism_report(
      NAME, rounds=rounds, sampling=sampling, **params
  )


def canary_refusal(config: Config) -> Optional[str]:
  """Canary clients need a fixed clip (see `RunConfig.audit_canaries`)."""
  if config.clip is None:
    return (
        "audit_canaries with mechanism 'dp_fedavg' needs a fixed clip (give "
        'clip): a canary is scaled to the clip, and the adaptive clip is a '
        'noised state of the run that moves every round'
    )
  return None


def adopt_state(loaded, fresh):
  """A saved state carried over to this process's noise (see `base.Mechanism`).

  TFF's DP aggregator keeps its noise in its state (the query's global
  state): the aggregator becomes this process's, with the adaptive clip's
  current estimate (a noised state of the run) carried over.
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


def build(config: Config, context: base.BuildContext) -> base.Mechanism:
  """TFF's DP aggregator in unweighted FedAvg, z calibrated to the target.

  Adaptive clipping (Andrew et al., "Differentially Private Learning with
  Adaptive Clipping", NeurIPS 2021): the clip follows a target quantile of
  the clients' update norms, estimated from a noised count of the clients
  under it. With adaptive clipping the round's event is TFF's: the value's
  Gaussian composed with the clipped count's, whose RDP is that of one
  Gaussian of the calibrated (effective) noise multiplier, so a target
  epsilon covers the quantile estimate too.
  """
  z = context.noise_multiplier(config)
  k = float(context.sampling.clients_per_round)
  if config.clip is None:
    quantile = config.adaptive_clip_quantile or DEFAULT_QUANTILE
    # The clipped count's noise: TFF's default 0.05 K (Andrew et al.), at
    # least z, so that the value's noise grows by at most sqrt(4 / 3) for
    # the count's share of the budget (TFF refuses z >= 0.1 K otherwise).
    count_stddev = max(0.05 * k, z)
    try:
      # tff.learning.dp_aggregator's adaptive clip (its initial clip and
      # learning rate), without its zeroing, which tracks the clients'
      # norms unnoised.
      factory = tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
          z,
          k,
          target_unclipped_quantile=quantile,
          clipped_count_stddev=count_stddev,
          initial_l2_norm_clip=(
              config.adaptive_clip_initial or DEFAULT_INITIAL_CLIP
          ),
      )
    except ValueError as e:
      raise ValueError(
          f'adaptive clipping cannot reach noise_multiplier={z:.4g} with '
          f'{context.sampling.clients_per_round} clients per round ('
          f'{str(e).splitlines()[0]}); give a fixed clip or more clients per '
          'round'
      ) from None
    clipping = (
        f'adaptive (TFF gaussian_adaptive, target quantile '
        f'{quantile:g}, clipped count std {count_stddev:.4g})'
    )
  else:
    factory = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        z, k, config.clip
    )
    clipping = 'fixed'
  mech = base.Mechanism(
      NAME,
      config,
      context.sampling,
      context.fed_avg(factory),
      base.count_parameters(context.model_fn),
      guarantees.guarantee_of(factory),
      resolved={'noise_multiplier': z, 'clipping': clipping},
      # At the clip: clipping leaves it whole, a worst-case client.
      canary_norm=config.clip if context.canary_clients else None,
      adopt_state=adopt_state,
  )
  if config.clip is None:
    mech.caveats.append(
        "adaptive clipping: noise_multiplier is TFF's effective total one, "
        'covering the noised clipped-count release of the quantile estimate'
    )
  return mech


DEFINITION = base.Definition(
    name=NAME,
    config=Config,
    build=build,
    sampling='poisson',
    # TFF's server adds the noise: nothing against the server.
    guarantee=guarantees.TFF_DP_FACTORY_GUARANTEE,
    report=base.Report(privacy_report, REPORT_PARAMETERS),
    canary_refusal=canary_refusal,
    # The server adds the model's noise: it may add the client metrics' too.
    dp_client_metrics=True,
)
