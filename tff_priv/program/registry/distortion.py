"""Distortion with data generation: client-side Gaussian on a clipped upload."""

import dataclasses
from typing import Any, Optional

from tff_priv import validation
from tff_priv.accounting import guarantees
from tff_priv.aggregators import distortion
from tff_priv.program.registry import base


@dataclasses.dataclass(frozen=True)
class Config(base.MechanismConfig):
  """Parameter distortion (Zhang, Chen, Yang, the "near-optimal utility" paper).

  `tff_priv.aggregators.DistortionFactory` in unweighted FedAvg, with
  optional Bernoulli(rho) mini-batches of each client's data. One of
  epsilon, noise_multiplier, noise_stddev, target_tv. The TV target is not
  DP; with the upload clipped to C the distortion is a Gaussian mechanism of
  sensitivity 2C per client (replace-one), local noise, under fixed-size
  sampling.
  """

  NAME = 'distortion'
  SAMPLING = 'fixed'
  # `guarantee()` at the default clip.
  GUARANTEE = distortion.DistortionFactory.guarantee_of(base.DEFAULT_CLIP)
  REPORT_PARAMETERS = (
      'epsilon',
      'noise_multiplier',
      'noise_stddev',
      'delta',
      'clip',
  )

  epsilon: Optional[float] = base.epsilon_param()
  noise_multiplier: Optional[float] = base.param(None, 'z = sigma_e / 2C.')
  noise_stddev: Optional[float] = base.param(None, 'sigma_e.')
  target_tv: Optional[float] = base.param(
      None, 'calibrate sigma_e to this total variation.'
  )
  delta: float = base.delta_param()
  clip: float = base.param(base.DEFAULT_CLIP, 'L2 clip C of the upload.')
  parameter_variance: Optional[float] = base.param(
      None,
      'sigma^2 per coordinate for the TV calibration and bounds; required '
      'unless the run is noise-free (estimating it from the clients would '
      'release an exact client statistic).',
  )
  rho: Optional[float] = base.param(
      None, "Bernoulli(rho) mini-batches of each client's data."
  )
  local_steps: Optional[int] = base.param(
      None,
      'with rho: this many Bernoulli(rho) batches (local steps) per round; '
      'None: ceil(1 / rho), one pass in expectation.',
  )
  batch_seed: Optional[int] = base.param(
      None,
      "with rho: seeds round t's batches of client i by (batch_seed, t, i), "
      'so runs that differ only in their noise see the same batches (common '
      'random numbers); None: fresh randomness. The batches are not credited '
      'in the accounting, so a known seed costs no privacy.',
  )

  def validate(self) -> None:
    base.check_fields(
        self,
        {
            'target_tv': validation.open_unit,
            'parameter_variance': validation.positive,
            'rho': validation.half_open_unit,
        },
    )
    base.fill_noise_target(
        self,
        self.NAME,
        ('epsilon', 'noise_multiplier', 'noise_stddev', 'target_tv'),
    )
    for name in ('local_steps', 'batch_seed'):
      value = getattr(self, name)
      if value is not None:
        if self.rho is None:
          raise ValueError(f'{name} applies only with rho')
        validation.int_at_least(name, value, 1 if name == 'local_steps' else 0)
    noise_free = 0 in (self.noise_stddev, self.noise_multiplier)
    if self.parameter_variance is None and not noise_free:
      raise ValueError(
          'parameter_variance is required for mechanism distortion (target_tv, '
          'epsilon, noise_multiplier or noise_stddev > 0): the TV calibration '
          'and bounds need it, and estimating it from the clients would '
          'release an exact client statistic'
      )

  def guarantee(self) -> guarantees.Guarantee:
    """Each upload is distorted on its client (at this config's clip)."""
    return distortion.DistortionFactory.guarantee_of(self.clip)

  def calibrate(self, context: base.BuildContext) -> Optional[float]:
    """sigma_e: given, or 2C z for z or a target eps; None: from target_tv.

    A target eps is met against the server's unamplified view too
    (`BuildContext.noise_multiplier`'s `local_noise`).
    """
    if self.noise_multiplier is None and self.epsilon is None:
      return self.noise_stddev
    return context.noise_multiplier(
        self, local_noise=True
    ) * distortion.sensitivity(self.clip)

  def make(self, context: base.BuildContext) -> base.Mechanism:
    """The distortion factory in FedAvg; sigma_e from the given noise level."""
    noise_stddev = self.calibrate(context)
    level = (
        {'noise_stddev': noise_stddev}
        if noise_stddev is not None
        else {'target_tv': self.target_tv}
    )
    factory = distortion.DistortionFactory(
        parameter_variance=self.parameter_variance, clip=self.clip, **level
    )
    loop = base.Loop(
        # At the clip: clipping leaves it whole, a worst-case client.
        canary_norm=self.clip
        if context.canary_clients
        else None
    )
    if self.rho is not None:
      loop = dataclasses.replace(
          loop,
          preprocess=distortion.bernoulli_preprocess(
              self.rho, self.local_steps, self.batch_seed
          ),
      )
    d = base.count_parameters(context.model_fn)
    process = context.fed_avg(factory)
    source = factory.noise_source(d)
    return base.Mechanism(
        self.NAME,
        self,
        context.sampling,
        process,
        d,
        factory.guarantee,
        resolved=distortion.tv_resolved(source, self.clip),
        closed_form=distortion.tv_closed_form(source, level.get('target_tv')),
        caveats=distortion.run_caveats(self.rho is not None),
        loop=loop,
    )

  @classmethod
  def report(
      cls, params: dict[str, Any], rounds: int, sampling: Any
  ) -> dict[str, Any]:
    """`tff_priv.aggregators.distortion.privacy_report`."""
    return distortion.privacy_report(params, rounds, sampling)
