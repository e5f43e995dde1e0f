"""DP-FedAvg: TFF's DP aggregator, central Gaussian noise on the clipped sum."""

import dataclasses
from typing import Any, Optional

from tff_priv import validation
from tff_priv.accounting import guarantees
from tff_priv.accounting import reports
from tff_priv.aggregators import dp_fedavg
from tff_priv.program.registry import base


@dataclasses.dataclass(frozen=True)
class Config(base.MechanismConfig):
  """DP-FedAvg (McMahan et al., ICLR 2018), TFF's DP aggregator.

  `tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive` (adaptive
  clipping) or `gaussian_fixed` (a fixed clip), built by
  `aggregators.dp_fedavg.factory`, in unweighted FedAvg: client-level DP
  under Poisson sampling, add-or-remove-one client. The server adds the
  noise: no guarantee against it.
  """

  NAME = 'dp_fedavg'
  SAMPLING = 'poisson'
  # TFF's server adds the noise: nothing against the server.
  GUARANTEE = guarantees.TFF_DP_FACTORY_GUARANTEE
  REPORT_PARAMETERS = ('epsilon', 'noise_multiplier', 'delta')
  # The server adds the model's noise: it may add the client metrics' too.
  DP_CLIENT_METRICS = True

  epsilon: Optional[float] = base.epsilon_param()
  noise_multiplier: Optional[float] = base.param(
      None, 'z, noise std of the sum / clip.'
  )
  delta: float = base.delta_param()
  clip: Optional[float] = base.param(
      None, 'fixed L2 clip of an update; None: adaptive clipping.'
  )
  adaptive_clip_quantile: Optional[float] = base.param(
      None,
      "adaptive clipping's target quantile of the clients' update norms (the "
      'fraction of clients left unclipped), in (0, 1); default 0.5 when clip '
      'is not given.',
  )
  adaptive_clip_initial: Optional[float] = base.param(
      None,
      "adaptive clipping's clip in round 1 (default TFF's 0.1; it then moves "
      'by at most a factor exp(0.2 / 2) a round).',
  )

  def validate(self) -> None:
    base.check_fields(
        self,
        {
            'adaptive_clip_quantile': validation.open_unit,
            'adaptive_clip_initial': validation.positive,
        },
    )
    base.fill_noise_target(self, self.NAME, ('epsilon', 'noise_multiplier'))
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

  def canary_refusal(self) -> Optional[str]:
    """Canary clients need a fixed clip (see `RunConfig.audit_canaries`)."""
    if self.clip is None:
      return (
          "audit_canaries with mechanism 'dp_fedavg' needs a fixed clip (give "
          'clip): a canary is scaled to the clip, and the adaptive clip is a '
          'noised state of the run that moves every round'
      )
    return None

  def make(self, context: base.BuildContext) -> base.Mechanism:
    """TFF's DP aggregator in unweighted FedAvg, z calibrated to the target."""
    z = self.calibrate(context)
    factory, clipping = dp_fedavg.factory(
        z,
        context.sampling.clients_per_round,
        self.clip,
        quantile=self.adaptive_clip_quantile,
        initial_clip=self.adaptive_clip_initial,
    )
    mech = base.Mechanism(
        self.NAME,
        self,
        context.sampling,
        context.fed_avg(factory),
        base.count_parameters(context.model_fn),
        guarantees.guarantee_of(factory),
        resolved={'noise_multiplier': z, 'clipping': clipping},
        loop=base.Loop(
            # At the clip: clipping leaves it whole, a worst-case client.
            canary_norm=self.clip if context.canary_clients else None,
            adopt_state=dp_fedavg.adopt_state,
        ),
    )
    if self.clip is None:
      mech.caveats.append(
          "adaptive clipping: noise_multiplier is TFF's effective total one, "
          'covering the noised clipped-count release of the quantile estimate'
      )
    return mech

  @classmethod
  def report(
      cls, params: dict[str, Any], rounds: int, sampling: Any
  ) -> dict[str, Any]:
    """The sampled Gaussian's eps by every accountant, or a target's noise."""
    return reports.gaussian_mechanism_report(
        cls.NAME, rounds=rounds, sampling=sampling, **params
    )
