"""LDP-FL: every uploaded scalar eps0-LDP over a per-layer range.

`tff_priv.aggregators.LDPEncodeFactory` (two-point encoding) through
`tff_priv.learning.ldp` (Sun, Qian, Chen, "LDP-FL: Practical Private
Aggregation in Federated Learning with Local Differential Privacy", IJCAI
2021): in 'deltas' mode in unweighted FedAvg, in 'weights' mode (the paper's
Algorithm 1) the server's model is the mean of the encoded local weights.
Local DP of each value, d values per client per round, under fixed-size
sampling of K of N clients (the shuffle bound needs n = K).
"""

import dataclasses
from typing import Any, Optional

from tff_priv import validation
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.aggregators import ldp as ldp_aggregators
from tff_priv.learning import client_metrics
from tff_priv.learning import ldp as ldp_learning
from tff_priv.program.registry import base

NAME = 'ldp'
# The `Config` fields `privacy_report` reads (and `ReportInputs`).
REPORT_PARAMETERS = ('ldp_epsilon', 'delta')
DEFAULT_LDP_EPSILON = 1.0


@dataclasses.dataclass(frozen=True)
class Config:
  """LDP-FL's parameters.

  Attributes:
    delta: the delta at which the accountants' eps is reported.
    ldp_epsilon: eps0 of every reported value (the paper's parameter, not a
      run target).
    ldp_mode: 'deltas' (FedAvg on encoded deltas) or 'weights' (the paper).
    ldp_range_mode: 'fixed', 'minmax' (a non-private release of each
      tensor's min/max) or 'quantile' (noised, charged).
    ldp_center: the range center c (None: the mode's default).
    ldp_radius: the range radius r, initial when adaptive (None: the mode's
      default, `tff_priv.learning.ldp.DEFAULT_DELTAS_RADIUS` /
      `DEFAULT_WEIGHTS_RADIUS`).
  """

  delta: float = base.DEFAULT_DELTA
  ldp_epsilon: float = DEFAULT_LDP_EPSILON
  ldp_mode: str = 'deltas'
  ldp_range_mode: str = 'fixed'
  ldp_center: Optional[float] = None
  ldp_radius: Optional[float] = None

  def __post_init__(self):
    self.validate()

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
    weights = self.ldp_mode == 'weights'
    if self.ldp_center is None:
      object.__setattr__(
          self,
          'ldp_center',
          (
              ldp_learning.DEFAULT_WEIGHTS_CENTER
              if weights
              else ldp_learning.DEFAULT_DELTAS_CENTER
          ),
      )
    if self.ldp_radius is None:
      object.__setattr__(
          self,
          'ldp_radius',
          (
              ldp_learning.DEFAULT_WEIGHTS_RADIUS
              if weights
              else ldp_learning.DEFAULT_DELTAS_RADIUS
          ),
      )


@dataclasses.dataclass(frozen=True)
class ReportInputs:
  """What LDP-FL's privacy report reads beyond `Config`: what a run resolves.

  Attributes:
    num_values: d, the values a client sends per round (the model size).
    num_clients: n, the clients whose reports are shuffled together (K).
  """

  num_values: Optional[int] = None
  num_clients: Optional[int] = None


def privacy_report(
    params: dict[str, Any], rounds: int, sampling: sampling_lib.Sampling
) -> dict:
  """A client's local DP: the paper's claim, its composition, the shuffle bound.

  `tff_priv.learning.ldp.ldp_report` for `rounds` rounds of d eps0-LDP values;
  client sampling is not credited (every report is local DP).

  Args:
    params: `REPORT_PARAMETERS` and `ReportInputs` fields by name (absent:
      not given; `delta` given; `ldp_epsilon` and `num_values` required).
    rounds: T >= 1.
    sampling: ignored.
  """
  del sampling
  return {
      'mechanism': NAME,
      **ldp_learning.ldp_report(
          params.get('ldp_epsilon'),
          num_values=params.get('num_values'),
          rounds=rounds,
          delta=params['delta'],
          num_clients=params.get('num_clients'),
      ),
  }


def canary_refusal(config: Config) -> Optional[str]:
  """LDP-FL takes no canary clients: it has no clip to scale one to."""
  del config
  return (
      "audit_canaries does not apply to mechanism 'ldp': its eps is local, "
      'per uploaded value over a range, with no clip to scale a canary to; a '
      'unit-direction canary sits near the range center, where the encoding '
      'tells least, so its estimate would not test that eps'
  )


def build(config: Config, context: base.BuildContext) -> base.Mechanism:
  """The LDP encoder in the process of `config.ldp_mode`."""
  quantile = config.ldp_range_mode == 'quantile'
  k = context.sampling.clients_per_round
  expected = float(k) if quantile else None
  factory = ldp_learning.ldp_factory(
      config.ldp_epsilon,
      mode=config.ldp_mode,
      range_mode=config.ldp_range_mode,
      center=config.ldp_center,
      radius=config.ldp_radius,
      expected_clients_per_round=expected,
  )
  if config.ldp_mode == 'deltas':
    process = context.fed_avg(factory)
  else:
    if (context.server_optimizer, context.server_learning_rate) != ('sgd', 1.0):
      raise ValueError(
          "ldp_mode='weights' replaces the server's model by the mean of the "
          "encoded weights: server_optimizer must be 'sgd' with "
          'server_learning_rate=1'
      )
    # The same factory, built again inside from the same arguments.
    process = ldp_learning.build_ldp_fl_process(
        context.model_fn,
        client_optimizer_fn=context.client_optimizer_fn(),
        epsilon=config.ldp_epsilon,
        mode='weights',
        range_mode=config.ldp_range_mode,
        center=config.ldp_center,
        radius=config.ldp_radius,
        expected_clients_per_round=expected,
        metrics_aggregator=client_metrics.no_client_metrics,
    )
  update_type = process.initialize.type_signature.result.member
  update_type = update_type.global_model_weights.trainable
  d = base.count_parameters(context.model_fn)
  mech = base.Mechanism(
      NAME,
      config,
      context.sampling,
      process,
      d,
      factory.guarantee,
      resolved={
          'values_per_client_per_round': factory.num_scalars(update_type),
          'range_release_is_private': factory.range_release_is_private,
      },
      closed_form=privacy_report(
          {
              'ldp_epsilon': config.ldp_epsilon,
              'delta': config.delta,
              'num_values': d,
              'num_clients': k,
          },
          context.total_rounds,
          context.sampling.ledger_sampling(),
      ),
      caveats=[
          'local DP: each client is charged d values of eps0 for every round '
          'it takes part in (plain composition through the accountant); the '
          'shuffle-model bound is in the closed-form report'
      ],
  )
  if not factory.range_release_is_private:
    mech.caveats.append(
        "ldp_range_mode='minmax' sends the clients' min/max in the clear: "
        'a non-private release (eps = inf)'
    )
  return mech


def _guarantee(config: Optional[Config]):
  """The guarantee: each value is encoded on its client.

  With ldp_range_mode='quantile' the range release is noised by the server
  ('central').
  """
  config = config or Config()
  return ldp_aggregators.LDPEncodeFactory.guarantee_of(
      config.ldp_epsilon, config.ldp_range_mode
  )


DEFINITION = base.Definition(
    name=NAME,
    config=Config,
    build=build,
    sampling='fixed',
    guarantee=_guarantee,
    report=base.Report(privacy_report, REPORT_PARAMETERS, ReportInputs),
    canary_refusal=canary_refusal,
)
