"""Distortion with data generation: client-side Gaussian on a clipped upload.

`tff_priv.aggregators.DistortionFactory` in unweighted FedAvg, with optional
Bernoulli(rho) mini-batches of each client's data (Zhang, Chen, Yang, the
"near-optimal utility" paper). The TV target is not DP; with the upload
clipped to C the distortion is a Gaussian mechanism of sensitivity 2C per
client (replace-one), local noise, under fixed-size sampling.
"""

import dataclasses
from typing import Any, Optional

import numpy as np

from tff_priv import validation
from tff_priv.accounting import reports
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.aggregators import distortion
from tff_priv.mechanisms import bernoulli_sampling
from tff_priv.program.registry import base

NAME = 'distortion'
# The `Config` fields `privacy_report` reads.
REPORT_PARAMETERS = (
    'epsilon',
    'noise_multiplier',
    'noise_stddev',
    'delta',
    'clip',
)


@dataclasses.dataclass(frozen=True)
class Config:
  """Distortion's parameters.

  One of epsilon, noise_multiplier, noise_stddev, target_tv.

  Attributes:
    epsilon: target eps of the whole run at `delta` (the default).
    noise_multiplier: z = sigma_e / 2C.
    noise_stddev: sigma_e.
    target_tv: calibrate sigma_e to this total variation.
    delta: the delta of the target and the report.
    clip: L2 clip C of the upload.
    parameter_variance: sigma^2 per coordinate for the TV calibration and
      bounds; required unless the run is noise-free (estimating it from the
      clients would release an exact client statistic).
    rho: Bernoulli(rho) mini-batches of each client's data.
    local_steps: with rho: this many Bernoulli(rho) batches (local steps) per
      round; None: ceil(1 / rho), one pass in expectation.
    batch_seed: with rho: seeds round t's batches of client i by
      (batch_seed, t, i), so runs that differ only in their noise see the
      same batches (common random numbers); None: fresh randomness. The
      batches are not credited in the accounting, so a known seed costs no
      privacy.
  """

  epsilon: Optional[float] = None
  noise_multiplier: Optional[float] = None
  noise_stddev: Optional[float] = None
  target_tv: Optional[float] = None
  delta: float = base.DEFAULT_DELTA
  clip: float = base.DEFAULT_CLIP
  parameter_variance: Optional[float] = None
  rho: Optional[float] = None
  local_steps: Optional[int] = None
  batch_seed: Optional[int] = None

  def __post_init__(self):
    self.validate()

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
        self, NAME, ('epsilon', 'noise_multiplier', 'noise_stddev', 'target_tv')
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


def privacy_report(
    params: dict[str, Any], rounds: int, sampling: sampling_lib.Sampling
) -> dict:
  """The distortion read as a Gaussian mechanism, by every accountant.

  Any two clipped uploads differ by at most Delta = 2C, so z = sigma_e / 2C;
  the paper's TV bounds are no DP claim and are not here (they depend on the
  model: `build`'s closed form).

  Args:
    params: `REPORT_PARAMETERS` by name (absent: not given; `delta` given;
      `clip` required).
    rounds: T >= 1.
    sampling: the rounds' client `Sampling`.
  """
  params = dict(params)
  clip = params.pop('clip', None)
  scale = distortion.sensitivity(
      validation.positive('clip', validation.required('clip', clip))
  )
  return reports.gaussian_mechanism_report(
      NAME, rounds=rounds, scale=scale, sampling=sampling, **params
  )


def build(config: Config, context: base.BuildContext) -> base.Mechanism:
  """The distortion factory in FedAvg; sigma_e from the given noise level."""
  noise_stddev = config.noise_stddev
  if config.noise_multiplier is not None or config.epsilon is not None:
    noise_stddev = context.noise_multiplier(
        config, local_noise=True
    ) * distortion.sensitivity(config.clip)
  level = (
      {'noise_stddev': noise_stddev}
      if noise_stddev is not None
      else {'target_tv': config.target_tv}
  )
  factory = distortion.DistortionFactory(
      parameter_variance=config.parameter_variance, clip=config.clip, **level
  )
  preprocess = None
  if config.rho is not None:

    def preprocess(dataset, round_num, client_index):
      seed = None
      if config.batch_seed is not None:
        seed = int(
            np.random.default_rng(
                [config.batch_seed, round_num, client_index]
            ).integers(2**31)
        )
      batches = bernoulli_sampling.bernoulli_batches(
          config.rho, num_batches=config.local_steps, seed=seed
      )
      # Bernoulli(rho) batches of the client's examples (unbatched first).
      return batches(dataset.unbatch())

  d = base.count_parameters(context.model_fn)
  mech = base.Mechanism(
      NAME,
      config,
      context.sampling,
      context.fed_avg(factory),
      d,
      factory.guarantee,
      preprocess=preprocess,
      resolved={'noise_stddev': noise_stddev},
      # At the clip: clipping leaves it whole, a worst-case client.
      canary_norm=config.clip if context.canary_clients else None,
  )
  formula = 'Gaussian TV bounds (Devroye, Mehrabian, Reddad 2018; rebuilt)'
  # sigma_e and its TV bounds are functions of the configuration and d (a
  # TV target is calibrated at the given parameter_variance): resolved here.
  source = factory.noise_source(d)
  mech.resolved.update(
      noise_stddev=source.noise_stddev,
      noise_multiplier=source.noise_stddev
      / distortion.sensitivity(config.clip),
      tv_lower=source.tv_lower,
      tv_upper=source.tv_upper,
  )
  mech.closed_form = {
      'formula': f'{formula} at parameter_variance',
      'tv_lower': source.tv_lower,
      'tv_upper': source.tv_upper,
  }
  if noise_stddev is None:
    mech.closed_form.update(
        formula=f'{formula}, sigma_e calibrated to target_tv',
        target_tv=config.target_tv,
    )
  mech.caveats.append(
      'eps reads the distortion as a Gaussian mechanism on each clipped '
      'upload (sensitivity 2C, replace one client); against the server per '
      'client over the rounds it took part in, against an analyst with '
      'the amplification of sampling K of N'
  )
  if config.rho is not None:
    mech.caveats.append(
        'Bernoulli(rho) mini-batches are not credited in the accounting'
    )
  return mech


def _guarantee(config: Optional[Config]):
  """Each upload is distorted on its client (at the default clip for None)."""
  return distortion.DistortionFactory.guarantee_of(
      config.clip if config else base.DEFAULT_CLIP
  )


DEFINITION = base.Definition(
    name=NAME,
    config=Config,
    build=build,
    sampling='fixed',
    guarantee=_guarantee,
    report=base.Report(privacy_report, REPORT_PARAMETERS),
)
