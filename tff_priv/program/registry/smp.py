"""Fed-SMP: a shared rand_k / top_k mask, clip, client noise, secure sum."""

import dataclasses
from typing import Any, Optional

from tff_priv import validation
from tff_priv.aggregators import smp as smp_aggregators
from tff_priv.learning import canary_clients
from tff_priv.learning import client_metrics
from tff_priv.learning import smp as smp_learning
from tff_priv.mechanisms import smp as smp_mechanisms
from tff_priv.program.registry import base

DEFAULT_COMPRESSION = 0.1
DEFAULT_PUBLIC_CLIENTS = 20
MASKS = smp_aggregators.MASKS


@dataclasses.dataclass(frozen=True)
class Config(base.MechanismConfig):
  """Fed-SMP: sparsified model perturbation under secure aggregation.

  `tff_priv.learning.smp.build_fedsmp_process` with a
  `SparsifiedSecureSumFactory` (Hu, Guo, Gong, "Federated Learning with
  Sparsified Model Perturbation"): client-level DP under Poisson sampling,
  add-or-remove-one client. The clients' noise shares sum to sigma C
  whatever the number of clients, and the server sees only their secure sum.
  At compression 1 with rand_k every coordinate is kept: that is Fed-SMP at
  p = 1 (client-side noise under secure aggregation), not TFF's DP-FedAvg
  (`dp_fedavg`).
  """

  NAME = 'smp'
  SAMPLING = 'poisson'
  # The clients add shares of the noise before the secure sum.
  GUARANTEE = smp_aggregators.SparsifiedSecureSumFactory.guarantee_of(
      secure=True
  )
  REPORT_PARAMETERS = ('epsilon', 'noise_multiplier', 'delta')

  epsilon: Optional[float] = base.epsilon_param()
  noise_multiplier: Optional[float] = base.param(
      None, 'z, noise std of the sum / clip.'
  )
  delta: float = base.delta_param()
  clip: float = base.param(base.DEFAULT_CLIP, 'L2 clip C of the k kept values.')
  compression: float = base.param(DEFAULT_COMPRESSION, 'p = k / d in (0, 1].')
  mask: str = base.param(
      'rand_k',
      "'rand_k' (a public seed) or 'top_k' (the server trains on public data "
      'each round and keeps the k largest coordinates of its update).',
  )
  public_clients: Optional[int] = base.param(
      None,
      "top_k only: this many clients of the task's split (the first ones) "
      'form the public set D_pub; they are never sampled, and the sampling '
      'rate is K over the remaining clients.',
  )

  def validate(self) -> None:
    base.check_fields(
        self,
        {
            'compression': validation.half_open_unit,
        },
    )
    validation.one_of('mask', self.mask, MASKS)
    base.fill_noise_target(self, self.NAME, ('epsilon', 'noise_multiplier'))
    if self.mask == 'top_k':
      if self.public_clients is None:
        object.__setattr__(self, 'public_clients', DEFAULT_PUBLIC_CLIENTS)
      validation.int_at_least('public_clients', self.public_clients, 1)
    elif self.public_clients is not None:
      raise ValueError(
          "public_clients applies only with mask='top_k' (rand_k draws its "
          'mask from a public seed)'
      )

  def make(self, context: base.BuildContext) -> base.Mechanism:
    """Fed-SMP's process; with top_k, `context.public_data` is D_pub.

    D_pub: the `public_clients` held-out clients' training data, each
    preprocessed (batched, epochs repeated) as a client's data is,
    concatenated (`tasks.hold_out_public_clients`); the context's sampling
    population must exclude them.
    """
    top_k = self.mask == 'top_k'
    if top_k and context.public_data is None:
      raise ValueError(
          "mechanism 'smp' with mask='top_k' needs public_data (D_pub)"
      )
    z = self.calibrate(context)
    factory = smp_aggregators.SparsifiedSecureSumFactory(
        z,
        self.clip,
        self.compression,
        float(context.sampling.clients_per_round),
        mask=self.mask,
        secure=True,
        mask_seed=None if top_k else context.seed,
    )
    # The server's public training uses the clients' optimizer; the client
    # datasets (and D_pub) already repeat the local epochs.
    process = smp_learning.build_fedsmp_process(
        context.model_fn,
        client_optimizer_fn=context.client_optimizer_fn(),
        aggregator_factory=factory,
        server_optimizer_fn=context.server_optimizer_fn(),
        public_data=context.public_data,
        metrics_aggregator=client_metrics.no_client_metrics,
        client_work_wrapper=(
            canary_clients.wrap_client_work if context.canary_clients else None
        ),
    )
    d = base.count_parameters(context.model_fn)
    kept = int(smp_mechanisms.num_kept(d, self.compression))
    mech = base.Mechanism(
        self.NAME,
        self,
        context.sampling,
        process,
        d,
        factory.guarantee,
        # What the factory measures with secure=True: every kept value is
        # quantized to 32 bits by tff.aggregators.SecureSumFactory.
        upload_bytes_per_client=base.BYTES_PER_FLOAT32 * kept,
        resolved={
            'noise_multiplier': z,
            'mask': self.mask,
            'kept_coordinates': kept,
        },
        # C / p: the kept part of a random direction has norm about
        # C / sqrt(p) >= C whatever the mask, so the clip binds and the
        # canary uploads exactly C on the kept coordinates, as a worst-case
        # client does.
        loop=base.Loop(
            canary_norm=(
                self.clip / self.compression if context.canary_clients else None
            )
        ),
        closed_form=self.report(
            {'noise_multiplier': z, 'delta': self.delta},
            context.total_rounds,
            context.sampling.ledger_sampling(),
        ),
    )
    if top_k:
      mech.caveats.append(
          f"top_k: the mask comes from the server's training on the "
          f'{self.public_clients} public clients (held out, never sampled), '
          'whose data are public and get no protection: eps covers the other '
          'clients; the mask releases nothing about them'
      )
    return mech

  @classmethod
  def report(
      cls, params: dict[str, Any], rounds: int, sampling: Any
  ) -> dict[str, Any]:
    """Every accountant's eps, Fed-SMP Theorem 1 beside (`privacy_report`)."""
    return smp_aggregators.privacy_report(params, rounds, sampling)
