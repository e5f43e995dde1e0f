"""UDP: record-level DP, client-side Gaussian on one clipped full-batch step.

`tff_priv.learning.udp.build_udp_process` at a fixed sigma (Wei et al., "User-
Level Privacy-Preserving Federated Learning: Analysis and Performance
Optimization"): each client takes one gradient step on its whole data with
per-example gradients clipped to C, adds N(0, sigma^2 I) and uploads; the
server's model is the mean of the noisy client models. One example's effect on
a client's update is Delta = 2 eta C / min_i |D_i| (replace-one example), local
noise, under fixed-size sampling of K of N clients; or CRD (`build`).
"""

import dataclasses
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from tff_priv import validation
from tff_priv.accounting import calibration
from tff_priv.accounting import closed_forms
from tff_priv.accounting import events
from tff_priv.accounting import reports
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.accounting import target_noise
from tff_priv.accounting import udp as udp_accounting
from tff_priv.aggregators import udp as udp_aggregators
from tff_priv.learning import udp as udp_learning
from tff_priv.learning import udp_client_work
from tff_priv.mechanisms import noise_schedule
from tff_priv.program.registry import base

NAME = 'udp'
# The `Config` fields `privacy_report` reads (and `ReportInputs`).
REPORT_PARAMETERS = ('epsilon', 'noise_multiplier', 'noise_stddev', 'delta')
DEFAULT_CRD_ZETA = 0.001


@dataclasses.dataclass(frozen=True)
class Config:
  """UDP's parameters: one of epsilon, noise_multiplier, noise_stddev.

  Attributes:
    epsilon: target eps of the whole run at `delta` (the default).
    noise_multiplier: sigma / Delta.
    noise_stddev: sigma.
    delta: the delta of the target and the report.
    clip: per-example gradient clip C.
    udp_calibration: with epsilon: 'tight' (the accountant, default) or
      'paper' (eq. 10, a claim the ledger then checks).
    crd_beta: CRD's discount factor in (0, 1) (the paper: 0.9); None: a
      fixed sigma over `total_rounds` rounds.
    crd_zeta: CRD's improvement threshold >= 0 (default 0.001 with
      crd_beta).
  """

  epsilon: Optional[float] = None
  noise_multiplier: Optional[float] = None
  noise_stddev: Optional[float] = None
  delta: float = base.DEFAULT_DELTA
  clip: float = base.DEFAULT_CLIP
  udp_calibration: Optional[str] = None
  crd_beta: Optional[float] = None
  crd_zeta: Optional[float] = None

  def __post_init__(self):
    self.validate()

  def validate(self) -> None:
    base.check_fields(
        self,
        {
            'crd_beta': validation.open_unit,
            'crd_zeta': validation.non_negative,
        },
    )
    base.fill_noise_target(
        self, NAME, ('epsilon', 'noise_multiplier', 'noise_stddev')
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


@dataclasses.dataclass(frozen=True)
class ReportInputs:
  """What UDP's privacy report reads beyond `Config`: what a run resolves.

  Attributes:
    sensitivity: Delta, the L2 sensitivity of a client's update to one
      example, 2 eta C / min_i |D_i| (needed with noise_stddev).
  """

  sensitivity: Optional[float] = None


def _theorem1_for_target(epsilon, delta, q, rounds) -> dict:
  z = closed_forms.udp_theorem1_sigma(epsilon, delta, q, rounds, 1.0)
  check = closed_forms.udp_theorem1_truth(epsilon, delta, q, rounds)
  return {
      'formula': 'UDP Theorem 1, eq. (10)',
      'paper_noise_multiplier': z,
      'paper_claimed_epsilon': epsilon,
      'true_rdp_epsilon': check.true_epsilon,
      'true_delta_at_claimed_epsilon': check.true_delta,
      'holds': check.holds,
  }


def _theorem1_for_noise(
    noise_multiplier, rdp_epsilon, delta, q, rounds
) -> dict:
  del rdp_epsilon  # The claim is the paper's own, beside the accountant's.
  # The eps eq. (10) claims for this noise: sigma is proportional to 1/eps,
  # so eps = sigma(eps=1) / z with Delta = 1.
  return {
      'formula': 'UDP Theorem 1, eq. (10) solved for eps',
      'paper_claimed_epsilon': (
          closed_forms.udp_theorem1_sigma(1.0, delta, q, rounds, 1.0)
          / noise_multiplier
      ),
  }


def privacy_report(
    params: dict[str, Any], rounds: int, sampling: sampling_lib.Sampling
) -> dict:
  """Each client's Gaussian by every accountant, UDP Theorem 1 (eq. 10) beside.

  z = sigma / Delta. For a target eps: the noise the accountants need (and
  sigma, given the sensitivity), and eq. (10)'s with what it really gives
  (`closed_forms.udp_theorem1_truth`); for a noise level: the eps eq. (10)
  claims for it.

  Args:
    params: `REPORT_PARAMETERS` and `ReportInputs` fields by name (absent:
      not given; `delta` given).
    rounds: T >= 1.
    sampling: the rounds' client `Sampling`.

  Raises:
    ValueError: noise_stddev without the sensitivity, or a bad value.
  """
  params = dict(params)
  sensitivity = params.pop('sensitivity', None)
  if sensitivity is not None:
    sensitivity = validation.positive('sensitivity', sensitivity)
  elif params.get('noise_stddev') is not None:
    raise ValueError(
        'noise_stddev needs sensitivity (of a client update) to give a noise '
        'multiplier'
    )
  return reports.gaussian_mechanism_report(
      NAME,
      rounds=rounds,
      scale=sensitivity,
      claim_for_target=_theorem1_for_target,
      claim_for_noise=_theorem1_for_noise,
      sampling=sampling,
      **params,
  )


def _check_context(context: base.BuildContext) -> None:
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


def build(config: Config, context: base.BuildContext) -> base.Mechanism:
  """UDP's process at the sigma of the given noise level.

  With `crd_beta` the run is CRD (Algorithm 2,
  `tff_priv.learning.udp.build_crd_process`): the budget of the target
  epsilon is spread over a plan of `total_rounds` rounds that shrinks when
  the validation loss of the released model on server-side data stalls, and
  the run ends when the plan is done.
  """
  _check_context(context)
  min_examples = context.min_client_examples()
  sensitivity = udp_client_work.udp_sensitivity(
      context.client_learning_rate, config.clip, min_examples
  )
  if config.crd_beta is not None:
    return _build_crd(config, context, sensitivity, min_examples)
  if config.noise_stddev is not None:
    sigma = config.noise_stddev
  elif config.noise_multiplier is not None:
    sigma = config.noise_multiplier * sensitivity
  else:
    tight = config.udp_calibration == 'tight'
    sigma = target_noise.noise_for_target(
        config.epsilon,
        config.delta,
        # The paper's closed form has no room for what is spent: a resumed
        # run keeps the planned sigma, of all T rounds (its target is a
        # claim the ledger checks anyway).
        context.rounds_left if tight else context.total_rounds,
        context.sampling.ledger_sampling(),
        sensitivity=sensitivity,
        calibration=config.udp_calibration,
        min_with_unsampled=True,
        spent=context.spent if tight else None,
    )
  process = udp_learning.build_udp_process(
      context.model_fn,
      learning_rate=context.client_learning_rate,
      clip_norm=config.clip,
      per_example_loss=udp_client_work.sparse_categorical_crossentropy(),
      sensitivity=sensitivity,
      noise_stddev=sigma,
  )
  mech = base.Mechanism(
      NAME,
      config,
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
      closed_form=privacy_report(
          {
              'noise_stddev': sigma,
              'sensitivity': sensitivity,
              'delta': config.delta,
          },
          context.total_rounds,
          context.sampling.ledger_sampling(),
      ),
      caveats=[
          "record-level DP of each client's data (replace one example); "
          'sensitivity 2 eta C / min_i |D_i| of one clipped full-batch step'
      ],
  )
  if config.udp_calibration == 'paper':
    mech.caveats.append(
        "noise from the paper's Theorem 1: the target epsilon is a claim; "
        "the ledger's eps is what it spends"
    )
  return mech


def _build_crd(config, context, sensitivity, min_examples):
  """CRD: the target's budget over a shrinking plan, steered by validation."""
  schedule = udp_learning.crd_schedule(
      config.epsilon,
      config.delta,
      sensitivity,
      context.total_rounds,
      sampling=context.sampling.ledger_sampling(),
      calibration=config.udp_calibration,
  )
  if context.validation_data is None:
    raise ValueError(
        'CRD needs server-side validation data: set holdout_validation'
    )
  process = udp_learning.build_crd_process(
      context.model_fn,
      learning_rate=context.client_learning_rate,
      clip_norm=config.clip,
      per_example_loss=udp_client_work.sparse_categorical_crossentropy(),
      schedule=schedule,
      sensitivity=sensitivity,
      validation_data=context.validation_data(),
      beta=config.crd_beta,
      zeta=config.crd_zeta,
  )
  # At most: what the ledger charged, and the rounds left of the plan.
  max_rounds = (
      None
      if context.spent is None
      else context.spent.releases + context.rounds_left
  )
  return base.Mechanism(
      NAME,
      config,
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
      caveats=[
          "record-level DP of each client's data (replace one example); "
          'sensitivity 2 eta C / min_i |D_i| of one clipped full-batch step',
          'CRD: sigma changes when the validation loss stalls, so the rounds '
          'are chosen adaptively: the reported eps are what the schedule '
          'guarantees on every path (a Renyi filter), not the composition of '
          'the sigma this run used (analyst_ledger, an ex-post diagnostic); '
          'the schedule is calibrated for the analyst, so the eps against '
          'the server is larger',
      ],
      aggregator_state=lambda state: state.learning.aggregator,
      is_done=udp_learning.is_done,
      adaptive_bounds=udp_accounting.crd_bounds(
          schedule, sensitivity, max_rounds
      ),
      adopt_state=_crd_adopt(schedule, sensitivity, context.spent),
  )


def _crd_adopt(schedule, sensitivity, spent):
  """A resumed CRD run's state, its budget charged for the rounds run again.

  The checkpoint's schedule state counts the cost of the rounds up to it;
  the ledger holds every round released, the ones after the checkpoint
  included, which run again. The schedule's `spent` becomes the ledger's
  whole cost, so the filter (every released round within the budget) still
  holds; the rounds left share what is left.
  """

  def adopt(loaded, fresh):
    del fresh  # The schedule is the same: only its spent budget moves.
    if spent is None or not spent.releases:
      return loaded
    charged = sum(
        count * schedule.cost_of(z * sensitivity)
        for z, count in events.gaussian_releases(spent.event)
    )
    aggregator = loaded.learning.aggregator
    noise = noise_schedule.ScheduleState(*aggregator.noise)
    if charged <= float(noise.spent):
      return loaded
    noise = noise._replace(spent=np.float64(charged))
    try:
      sigma, _ = schedule.round_noise(tf.nest.map_structure(tf.constant, noise))
    except tf.errors.InvalidArgumentError as e:
      raise ValueError(e.message.splitlines()[0]) from None
    planned = schedule.round_noise(schedule.initial_state())[0]
    if float(sigma) > calibration.MAX_NOISE_INCREASE * float(planned):
      raise ValueError(
          f'sigma {float(sigma):.4g} needed, {float(sigma / planned):.1f}x '
          f'the planned {float(planned):.4g}'
      )
    learning = loaded.learning._replace(
        aggregator=aggregator._replace(noise=noise)
    )
    return loaded._replace(learning=learning)

  return adopt


DEFINITION = base.Definition(
    name=NAME,
    config=Config,
    build=build,
    sampling='fixed',
    # Each client noises its own upload; one example of its data is the unit.
    guarantee=udp_aggregators.UDP_GUARANTEE,
    report=base.Report(privacy_report, REPORT_PARAMETERS, ReportInputs),
    # audit_canaries inserts canary examples: the guarantee is record-level.
    canary_examples=True,
)
