"""UDP: record-level DP, client-side Gaussian on one clipped full-batch step."""

import dataclasses
from typing import Any, Optional, Union

import tensorflow as tf

from tff_priv import validation
from tff_priv.accounting import target_noise
from tff_priv.accounting import udp as udp_accounting
from tff_priv.aggregators import udp as udp_aggregators
from tff_priv.learning import udp as udp_learning
from tff_priv.learning import udp_client_work
from tff_priv.mechanisms import noise_schedule
from tff_priv.program.registry import base

DEFAULT_CRD_ZETA = 0.001


def _check_context(context: base.BuildContext) -> None:
  """Raises ValueError unless UDP can run in the training program's `context`.

  UDP's clients take one plain SGD step of rate client_learning_rate on their
  whole data, the new model is the mean of their models (server SGD at rate
  1), its sensitivity needs the smallest |D_i|, and its per-example loss one
  label per example.
  """
  if context.client_optimizer != 'sgd' or context.client_momentum:
    raise ValueError(
        "client_optimizer must be plain 'sgd' for mechanism 'udp': its client "
        'step is one clipped full-batch gradient step of rate '
        'client_learning_rate'
    )
  if context.server_optimizer != 'sgd' or context.server_learning_rate != 1.0:
    raise ValueError(
        "server_optimizer='sgd' with server_learning_rate=1 is the only "
        "server update of mechanism 'udp' (the new model is the weighted "
        'mean of the noisy client models)'
    )
  if context.local_epochs != 1:
    raise ValueError(
        "num_epochs must be 1 for mechanism 'udp' (one full-batch step)"
    )
  if context.min_client_examples is None:
    raise ValueError('udp needs min_client_examples (the smallest |D_i|)')
  with tf.Graph().as_default():
    label_spec = context.model_fn().input_spec[1]
  shape = list(label_spec.shape)
  if not (len(shape) == 1 or (len(shape) == 2 and shape[1] == 1)):
    raise ValueError(
        "mechanism 'udp' needs a softmax classifier with one label per "
        'example (its per-example loss is the sparse categorical '
        f"cross-entropy); this task's labels have shape {label_spec.shape}"
    )


@dataclasses.dataclass(frozen=True)
class ReportInputs:
  """What UDP's privacy report reads beyond `Config`: what a run resolves."""

  sensitivity: Optional[float] = base.param(
      None,
      "Delta, the L2 sensitivity of a client's update to one example, "
      '2 eta C / min_i |D_i| (needed with noise_stddev).',
  )


@dataclasses.dataclass(frozen=True)
class Config(base.MechanismConfig):
  """UDP (Wei et al.): one of epsilon, noise_multiplier, noise_stddev.

  `tff_priv.learning.udp.build_udp_process` ("User-Level Privacy-Preserving
  Federated Learning: Analysis and Performance Optimization"): each client
  takes one full-batch step, per-example gradients clipped to C, and uploads
  it with N(0, sigma^2 I) added; the server's model is their mean. One
  example moves an update by Delta = 2 eta C / min_i |D_i| (replace-one),
  local noise, fixed-size sampling of K of N clients. With `crd_beta`: CRD
  (Algorithm 2, `build_crd_process`), the target's budget over a plan of
  `total_rounds` rounds that shrinks when the validation loss on server-side
  data stalls; the run ends when the plan is done.
  """

  NAME = 'udp'
  SAMPLING = 'fixed'
  # Each client noises its own upload; one example of its data is the unit.
  GUARANTEE = udp_aggregators.UDP_GUARANTEE
  REPORT_PARAMETERS = ('epsilon', 'noise_multiplier', 'noise_stddev', 'delta')
  REPORT_INPUTS = ReportInputs
  # audit_canaries inserts canary examples: the guarantee is record-level.
  CANARY_EXAMPLES = True

  epsilon: Optional[float] = base.epsilon_param()
  noise_multiplier: Optional[float] = base.param(None, 'sigma / Delta.')
  noise_stddev: Optional[float] = base.param(None, 'sigma.')
  delta: float = base.delta_param()
  clip: float = base.param(base.DEFAULT_CLIP, 'per-example gradient clip C.')
  udp_calibration: Optional[str] = base.param(
      None,
      "with epsilon: 'tight' (the accountant, default) or 'paper' (eq. 10, a "
      'claim the ledger then checks).',
  )
  crd_beta: Optional[float] = base.param(
      None,
      "CRD's discount factor in (0, 1) (the paper: 0.9); None: a fixed sigma "
      'over `total_rounds` rounds.',
  )
  crd_zeta: Optional[float] = base.param(
      None,
      "CRD's improvement threshold >= 0 (default 0.001 with crd_beta).",
  )

  def validate(self) -> None:
    base.check_fields(
        self,
        {
            'crd_beta': validation.open_unit,
            'crd_zeta': validation.non_negative,
        },
    )
    base.fill_noise_target(
        self, self.NAME, ('epsilon', 'noise_multiplier', 'noise_stddev')
    )
    if self.epsilon is None:
      if self.udp_calibration is not None:
        raise ValueError('udp_calibration applies only with epsilon')
    else:
      if self.udp_calibration is None:
        object.__setattr__(self, 'udp_calibration', 'tight')
      validation.one_of(
          'udp_calibration', self.udp_calibration, target_noise.CALIBRATIONS
      )
    if self.crd_beta is None:
      if self.crd_zeta is not None:
        raise ValueError('crd_zeta applies only with crd_beta (CRD)')
    else:
      if self.epsilon is None:
        raise ValueError(
            'CRD (crd_beta) spreads a target epsilon: give epsilon'
        )
      if self.crd_zeta is None:
        object.__setattr__(self, 'crd_zeta', DEFAULT_CRD_ZETA)

  @property
  def adaptive_noise(self) -> bool:
    """Whether a round's noise depends on earlier releases (CRD)."""
    return self.crd_beta is not None

  @classmethod
  def report(
      cls, params: dict[str, Any], rounds: int, sampling: Any
  ) -> dict[str, Any]:
    """Every accountant's eps, UDP Theorem 1 beside (`privacy_report`)."""
    return udp_aggregators.privacy_report(params, rounds, sampling)

  def calibrate(
      self, context: base.BuildContext
  ) -> tuple[int, float, Union[float, noise_schedule.BudgetSchedule]]:
    """(min_i |D_i|, Delta, sigma); with `crd_beta` CRD's schedule for sigma.

    In a context `make` has checked (`_check_context`); it reads
    every client (`context.min_client_examples`).
    """
    min_examples = context.min_client_examples()
    sensitivity = udp_client_work.udp_sensitivity(
        context.client_learning_rate, self.clip, min_examples
    )
    if self.crd_beta is not None:
      sigma = udp_learning.crd_schedule(
          self.epsilon,
          self.delta,
          sensitivity,
          context.total_rounds,
          sampling=context.sampling.ledger_sampling(),
          calibration=self.udp_calibration,
      )
    elif self.noise_stddev is not None:
      sigma = self.noise_stddev
    elif self.noise_multiplier is not None:
      sigma = self.noise_multiplier * sensitivity
    else:
      tight = self.udp_calibration == 'tight'
      sigma = target_noise.noise_for_target(
          self.epsilon,
          self.delta,
          # The paper's closed form has no room for what is spent: a resumed
          # run keeps the planned sigma, of all T rounds (its target is a
          # claim the ledger checks anyway).
          context.rounds_left if tight else context.total_rounds,
          context.sampling.ledger_sampling(),
          sensitivity=sensitivity,
          calibration=self.udp_calibration,
          min_with_unsampled=True,
          spent=context.resumed.spent if tight else None,
      )
    return min_examples, sensitivity, sigma

  def make(self, context: base.BuildContext) -> base.Mechanism:
    """UDP's process at the calibrated sigma; with `crd_beta`, CRD's."""
    _check_context(context)
    min_examples, sensitivity, sigma = self.calibrate(context)
    if self.crd_beta is not None:
      return self._make_crd(context, sigma, sensitivity, min_examples)
    process = udp_learning.build_udp_process(
        context.model_fn,
        learning_rate=context.client_learning_rate,
        clip_norm=self.clip,
        per_example_loss=udp_client_work.sparse_categorical_crossentropy(),
        sensitivity=sensitivity,
        noise_stddev=sigma,
    )
    return base.Mechanism(
        self.NAME,
        self,
        context.sampling,
        process,
        base.count_parameters(context.model_fn),
        udp_aggregators.GaussianUDPFactory(
            sigma, sensitivity=sensitivity
        ).guarantee,
        resolved={
            'noise_stddev': sigma,
            'sensitivity': sensitivity,
            'noise_multiplier': sigma / sensitivity,
            'min_client_examples': min_examples,
        },
        closed_form=self.report(
            {
                'noise_stddev': sigma,
                'sensitivity': sensitivity,
                'delta': self.delta,
            },
            context.total_rounds,
            context.sampling.ledger_sampling(),
        ),
        caveats=udp_learning.caveats(self.udp_calibration, crd=False),
    )

  def _make_crd(self, context, schedule, sensitivity, min_examples):
    """CRD: the target's budget over a shrinking plan, steered by validation."""
    if context.validation_data is None:
      raise ValueError(
          'CRD needs server-side validation data: set holdout_validation'
      )
    process = udp_learning.build_crd_process(
        context.model_fn,
        learning_rate=context.client_learning_rate,
        clip_norm=self.clip,
        per_example_loss=udp_client_work.sparse_categorical_crossentropy(),
        schedule=schedule,
        sensitivity=sensitivity,
        validation_data=context.validation_data(),
        beta=self.crd_beta,
        zeta=self.crd_zeta,
    )
    # At most: what the ledger charged, and the rounds left of the plan.
    max_rounds = (
        None
        if context.resumed.spent is None
        else context.resumed.spent.releases + context.rounds_left
    )
    return base.Mechanism(
        self.NAME,
        self,
        context.sampling,
        process,
        base.count_parameters(context.model_fn),
        udp_aggregators.GaussianUDPFactory(
            schedule=schedule, sensitivity=sensitivity
        ).guarantee,
        resolved={
            'sensitivity': sensitivity,
            'min_client_examples': min_examples,
            'initial_rounds': context.total_rounds,
        },
        caveats=udp_learning.caveats(self.udp_calibration, crd=True),
        adaptive_bounds=udp_accounting.crd_bounds(
            schedule, sensitivity, max_rounds
        ),
        loop=base.Loop(
            aggregator_state=lambda state: state.learning.aggregator,
            is_done=udp_learning.is_done,
            adopt_state=udp_learning.crd_adopt(
                schedule, sensitivity, context.resumed.spent
            ),
        ),
    )
