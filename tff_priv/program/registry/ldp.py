"""LDP-FL: every uploaded scalar eps0-LDP over a per-layer range."""

import dataclasses
from typing import Any, Optional

from tff_priv import validation
from tff_priv.accounting import guarantees
from tff_priv.aggregators import ldp as ldp_aggregators
from tff_priv.learning import client_metrics
from tff_priv.learning import ldp as ldp_learning
from tff_priv.program.registry import base

DEFAULT_LDP_EPSILON = 1.0


@dataclasses.dataclass(frozen=True)
class ReportInputs:
  """What LDP-FL's privacy report reads beyond `Config`: what a run resolves."""

  num_values: Optional[int] = base.param(
      None, 'd, the values a client sends per round (the model size).'
  )
  num_clients: Optional[int] = base.param(
      None, 'n, the clients whose reports are shuffled together (K).'
  )


@dataclasses.dataclass(frozen=True)
class Config(base.MechanismConfig):
  """LDP-FL (Sun, Qian, Chen, IJCAI 2021): two-point encoding on the clients.

  `tff_priv.aggregators.LDPEncodeFactory` through `tff_priv.learning.ldp`:
  in 'deltas' mode in unweighted FedAvg, in 'weights' mode (the paper's
  Algorithm 1) the server's model is the mean of the encoded local weights.
  Local DP of each value, d values per client per round, under fixed-size
  sampling of K of N clients (the shuffle bound needs n = K).
  """

  NAME = 'ldp'
  SAMPLING = 'fixed'
  GUARANTEE = ldp_aggregators.LDPEncodeFactory.guarantee_of(
      DEFAULT_LDP_EPSILON, 'fixed'
  )
  REPORT_PARAMETERS = ('ldp_epsilon', 'delta')
  REPORT_INPUTS = ReportInputs

  delta: float = base.param(
      base.DEFAULT_DELTA, "the delta at which the accountants' eps is reported."
  )
  ldp_epsilon: float = base.param(
      DEFAULT_LDP_EPSILON,
      "eps0 of every reported value (the paper's parameter, not a run target).",
  )
  ldp_mode: str = base.param(
      'deltas', "'deltas' (FedAvg on encoded deltas) or 'weights' (the paper)."
  )
  ldp_range_mode: str = base.param(
      'fixed',
      "'fixed', 'minmax' (a non-private release of each tensor's min/max) or "
      "'quantile' (noised, charged).",
  )
  ldp_center: Optional[float] = base.param(
      None, "the range center c (None: the mode's default)."
  )
  ldp_radius: Optional[float] = base.param(
      None,
      "the range radius r, initial when adaptive (None: the mode's default, "
      '`tff_priv.learning.ldp.DEFAULT_DELTAS_RADIUS` / '
      '`DEFAULT_WEIGHTS_RADIUS`).',
  )

  def validate(self) -> None:
    base.check_fields(
        self,
        {
            'ldp_epsilon': validation.positive,
            'ldp_center': base.finite,
            'ldp_radius': validation.positive,
        },
    )
    validation.one_of('ldp_mode', self.ldp_mode, ldp_learning.MODES)
    validation.one_of(
        'ldp_range_mode', self.ldp_range_mode, ldp_aggregators.RANGE_MODES
    )
    center, radius = ldp_learning.default_range(self.ldp_mode)
    if self.ldp_center is None:
      object.__setattr__(self, 'ldp_center', center)
    if self.ldp_radius is None:
      object.__setattr__(self, 'ldp_radius', radius)

  def guarantee(self) -> guarantees.Guarantee:
    """Each value is encoded on its client.

    With ldp_range_mode='quantile' the range release is noised by the server
    ('central').
    """
    return ldp_aggregators.LDPEncodeFactory.guarantee_of(
        self.ldp_epsilon, self.ldp_range_mode
    )

  def canary_refusal(self) -> Optional[str]:
    """LDP-FL takes no canary clients: it has no clip to scale one to."""
    return (
        "audit_canaries does not apply to mechanism 'ldp': its eps is local, "
        'per uploaded value over a range, with no clip to scale a canary to; a '
        'unit-direction canary sits near the range center, where the encoding '
        'tells least, so its estimate would not test that eps'
    )

  def make(self, context: base.BuildContext) -> base.Mechanism:
    """The LDP encoder in the process of `ldp_mode`."""
    k = context.sampling.clients_per_round
    quantile = self.ldp_range_mode == 'quantile'
    encoding = dict(
        epsilon=self.ldp_epsilon,
        mode=self.ldp_mode,
        range_mode=self.ldp_range_mode,
        center=self.ldp_center,
        radius=self.ldp_radius,
        expected_clients_per_round=float(k) if quantile else None,
    )
    factory = ldp_learning.ldp_factory(**encoding)
    if self.ldp_mode == 'deltas':
      process = context.fed_avg(factory)
    else:
      server = (context.server_optimizer, context.server_learning_rate)
      if server != ('sgd', 1.0):
        raise ValueError(
            "ldp_mode='weights' replaces the server's model by the mean of "
            "the encoded weights: server_optimizer must be 'sgd' with "
            'server_learning_rate=1'
        )
      # The same factory, built again inside from the same arguments.
      process = ldp_learning.build_ldp_fl_process(
          context.model_fn,
          client_optimizer_fn=context.client_optimizer_fn(),
          metrics_aggregator=client_metrics.no_client_metrics,
          **encoding,
      )
    d = base.count_parameters(context.model_fn)
    return base.Mechanism(
        self.NAME,
        self,
        context.sampling,
        process,
        d,
        factory.guarantee,
        resolved=ldp_learning.resolved_values(factory, process),
        closed_form=self.report(
            {
                'ldp_epsilon': self.ldp_epsilon,
                'delta': self.delta,
                'num_values': d,
                'num_clients': k,
            },
            context.total_rounds,
            context.sampling.ledger_sampling(),
        ),
        caveats=ldp_learning.run_caveats(factory),
    )

  @classmethod
  def report(
      cls, params: dict[str, Any], rounds: int, sampling: Any
  ) -> dict[str, Any]:
    """`tff_priv.learning.ldp.privacy_report` (`ReportInputs` too)."""
    return ldp_learning.privacy_report(params, rounds, sampling)
