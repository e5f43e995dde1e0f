"""Factory for parameter distortion (Zhang, Chen, Yang): W + N(0, sigma_e^2 I).

`DistortionFactory` optionally clips each client's upload to an L2 norm C,
adds Gaussian distortion N(0, sigma_e^2 I) to it inside the client computation
and takes the unweighted mean of the distorted uploads. sigma_e is given or
calibrated from a target total variation (TV) between the distorted and the
original parameter distribution at a given parameter variance
(`tff_priv.mechanisms.total_variation`). Its state keeps the
`dp_accounting.DpEvent` of the round (`tff_priv.accounting.guarantees`): with
a clip, a Gaussian mechanism of noise multiplier sigma_e / (2C) for one
client; without, `NonPrivateDpEvent`.
"""

import collections
import math
from typing import Any, Callable, Optional

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.accounting import calibration
from tff_priv.accounting import guarantees
from tff_priv.accounting import reports
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.accounting import target_noise
from tff_priv.aggregators import plan as plan_lib
from tff_priv.aggregators import udp
from tff_priv.mechanisms import bernoulli_sampling
from tff_priv.mechanisms import total_variation


def sensitivity(clip: float) -> float:
  """An upload's L2 sensitivity under replace-one: 2C.

  Two clipped uploads differ by <= 2C.
  """
  return 2.0 * clip


_NO_CLIP_DESCRIPTION = (
    'parameter distortion without a clip: an upload has no bounded '
    'sensitivity, so a round has no DP bound (NonPrivateDpEvent); the TV '
    'target bounds a distance between parameter distributions, it is not a '
    'DP guarantee'
)


def _clip_description(clip):
  return (
      f'parameter distortion: each client clips its upload to L2 norm {clip} '
      'and adds N(0, sigma_e^2 I) before the upload; a round is a Gaussian '
      'mechanism of noise multiplier sigma_e / (2C) for one client (replace '
      'one client), against the server that sees the upload and anyone after'
  )


class TVNoise(udp.NoiseSource):
  """sigma_e, fixed or from a TV target, with the TV bounds it implies.

  Everything here is a function of the configuration: sigma_e, the bounds and
  the parameter variance are public values, the same every round.
  """

  def __init__(
      self,
      dimension: int,
      *,
      noise_stddev: Optional[float] = None,
      target_tv: Optional[float] = None,
      parameter_variance: Optional[float] = None,
      bound: str = 'upper',
  ):
    self.dimension = validation.int_at_least('dimension', dimension, 1)
    if (noise_stddev is None) == (target_tv is None):
      raise ValueError('give exactly one of noise_stddev and target_tv')
    if parameter_variance is not None:
      parameter_variance = validation.positive(
          'parameter_variance', parameter_variance
      )
    if target_tv is not None:
      if parameter_variance is None:
        raise ValueError(
            'target_tv needs parameter_variance: sigma_e = sigma * c(target, '
            'm) is calibrated at the given variance'
        )
      scale = total_variation.noise_for_tv(
          target_tv, 1.0, self.dimension, bound
      )  # sigma_e is proportional to sigma: calibrated at unit variance.
      noise_stddev = math.sqrt(parameter_variance) * scale
    else:
      noise_stddev = validation.non_negative('noise_stddev', noise_stddev)
      if noise_stddev and parameter_variance is None:
        raise ValueError(
            'with a fixed noise_stddev > 0 give parameter_variance: the TV '
            'bounds need it'
        )
    self.noise_stddev = noise_stddev
    self.parameter_variance = parameter_variance
    # The bounds depend on sigma_e / sigma only; sigma_e = 0 has TV 0 at any
    # variance.
    unit_scale = (
        noise_stddev / math.sqrt(parameter_variance) if noise_stddev else 0.0
    )
    self.tv_lower, self.tv_upper = total_variation.tv_bounds(
        unit_scale, 1.0, self.dimension
    )

  def initial_state(self):
    return ()

  def round_noise(self, state):
    sigma = tf.constant(self.noise_stddev, tf.float64)
    measurements = collections.OrderedDict(
        noise_stddev=tf.cast(sigma, tf.float32),
        tv_lower=tf.constant(self.tv_lower, tf.float32),
        tv_upper=tf.constant(self.tv_upper, tf.float32),
    )
    if self.parameter_variance is not None:
      measurements['parameter_variance'] = tf.constant(
          self.parameter_variance, tf.float32
      )
    return sigma, state, measurements


class DistortionFactory(
    plan_lib.Planned, tff.aggregators.UnweightedAggregationFactory
):
  """Clip (optional), distortion N(0, sigma_e^2 I) on each upload, plain mean.

  UNWEIGHTED: every client's distorted upload counts the same. Use it with
  `tff.learning.algorithms.build_unweighted_fed_avg`, or wrap it with
  `tff.aggregators.as_weighted_aggregator` for weighted builders (which then
  ignore the weights).

  Distortion: `noise_stddev=sigma_e` directly, or `target_tv`: with m
  coordinates and a parameter variance sigma^2 per coordinate,
  sigma_e = sigma * c(target, m), where c makes the chosen Gaussian TV bound
  of Devroye, Mehrabian, Reddad 2018 (rebuilt in
  `tff_priv.mechanisms.total_variation`; 'upper': TV <= target, 'lower':
  TV >= target, only for targets <= 1/100) equal the target. The variance
  sigma^2 is given (`parameter_variance`), never estimated from the clients'
  uploads (that would release an exact statistic of their data without
  noise); it is required whenever the TV bounds need it (a `target_tv`, or
  `noise_stddev > 0`).

  Clip: with `clip=C` each client clips its upload to L2 norm C
  (`tf.clip_by_global_norm`, inside the client computation, before the
  noise; an upload with a non-finite norm is sent as zeros).

  Guarantee (`guarantee` property; `dp_event` in the state after `next`):
  with `clip=C` any two uploads differ by at most 2C in L2 norm, so each
  distorted upload is a Gaussian mechanism of sensitivity 2C under
  replace-one-client adjacency: `GaussianDpEvent(sigma_e / (2C))` for one
  client in one round, without client sampling, with the noise added locally.
  Without a clip an upload's sensitivity is unbounded and the event is
  `NonPrivateDpEvent()`: the TV target is not a DP guarantee.

  Measurements (under `noise`), all public (fixed by the configuration):
  `noise_stddev` (sigma_e), `tv_lower`, `tv_upper` (the DMR bounds sigma_e
  implies) and `parameter_variance` (when given); `mean` holds
  `tff.aggregators.UnweightedMeanFactory`'s (empty) measurements.
  """

  def __init__(
      self,
      *,
      noise_stddev: Optional[float] = None,
      target_tv: Optional[float] = None,
      parameter_variance: Optional[float] = None,
      tv_bound: str = 'upper',
      clip: Optional[float] = None,
      planned_rounds: Optional[int] = None,
  ):
    """Validates the arguments (see the class docstring).

    Args:
      noise_stddev: sigma_e >= 0 (sigma_e > 0 needs parameter_variance for the
        TV bounds; sigma_e = 0 has TV 0).
      target_tv: a TV target in (0, 1) to calibrate sigma_e; needs
        parameter_variance.
      parameter_variance: sigma^2 > 0 per coordinate, a public value (e.g.
        from public or held-out data).
      tv_bound: 'upper' (TV <= target) or 'lower' (TV >= target).
      clip: optional L2 clip C of each upload before distortion; without it
        the rounds have no DP bound.
      planned_rounds: None, or T: the mean's state carries the plan and the
        T+1-th round is refused (`tff_priv.aggregators.plan`; `calibrated`
        sets it).
    """
    if (noise_stddev is None) == (target_tv is None):
      raise ValueError('give exactly one of noise_stddev and target_tv')
    if noise_stddev is not None:
      validation.non_negative('noise_stddev', noise_stddev)
    if target_tv is not None:
      validation.open_unit('target_tv', target_tv)
    if parameter_variance is not None:
      validation.positive('parameter_variance', parameter_variance)
    validation.one_of('tv_bound', tv_bound, total_variation.BOUNDS)
    if tv_bound == 'lower' and target_tv is not None:
      total_variation.noise_for_tv(target_tv, 1.0, 1, 'lower')  # Feasible?
    if clip is not None:
      clip = validation.positive('clip', clip)
    if parameter_variance is None and (target_tv is not None or noise_stddev):
      raise ValueError(
          'parameter_variance is required with a target_tv or a '
          'noise_stddev > 0: the TV calibration and bounds need it (it is '
          'not estimated from the clients)'
      )
    self._kwargs = dict(
        noise_stddev=noise_stddev,
        target_tv=target_tv,
        parameter_variance=parameter_variance,
        bound=tv_bound,
    )
    self._clip = clip
    self._guarantee = self.guarantee_of(clip)
    self._planned = plan_lib.planned(planned_rounds)

  @classmethod
  def calibrated(
      cls,
      epsilon: float,
      *,
      total_rounds: int,
      population: int,
      clients_per_round: int,
      parameter_variance: float,
      clip: float = 1.0,
      delta: float = 1e-5,
      spent=None,
  ) -> 'DistortionFactory':
    """A factory whose run of `total_rounds` rounds meets (eps, delta).

    sigma_e = 2C z (`sensitivity`), z calibrated as UDP's local noise
    (`GaussianUDPFactory.calibrated`): for a loop that draws K of the N
    clients uniformly each round and charges it with
    `PrivacyLedger.record_round(state, population=N, sample_size=K)`. Round
    T+1 is refused (`plan`). `spent`: a `PrivacyLedger` of earlier rounds,
    met together with the `total_rounds` rounds added (a plan extended).
    """
    clip = validation.positive('clip', clip)
    noise_stddev = target_noise.noise_for_target(
        epsilon,
        delta,
        validation.int_at_least('total_rounds', total_rounds, 1),
        sampling_lib.Sampling.fixed(population, clients_per_round),
        sensitivity=sensitivity(clip),
        min_with_unsampled=True,
        spent=calibration.Spent.of(spent),
    )
    return cls(
        noise_stddev=noise_stddev,
        parameter_variance=parameter_variance,
        clip=clip,
        planned_rounds=total_rounds,
    )

  @property
  def clip(self) -> Optional[float]:
    return self._clip

  def audit_spec(self) -> guarantees.AuditSpec:
    """Its public clip (one trial per call)."""
    return guarantees.AuditSpec(clip=self._clip)

  @property
  def guarantee(self) -> guarantees.Guarantee:
    """Whom the round's `dp_event` protects (one client, replace-one)."""
    return self._guarantee

  @staticmethod
  def guarantee_of(clip: Optional[float]) -> guarantees.Guarantee:
    """The guarantee of a factory with `clip` (None: no clip, no bound)."""
    return guarantees.Guarantee(
        unit='client',
        noise='local',
        neighboring_relation='replace_one',
        description=(
            _NO_CLIP_DESCRIPTION if clip is None else _clip_description(clip)
        ),
    )

  def noise_source(self, dimension: int) -> TVNoise:
    """The noise source for `dimension` coordinates (sigma_e, TV bounds)."""
    return TVNoise(dimension, **self._kwargs)

  def _dp_event(self, sigma):
    if self._clip is None:
      return dp_accounting.NonPrivateDpEvent()
    return dp_accounting.GaussianDpEvent(
        tf.cast(sigma, tf.float64)
        / tf.constant(sensitivity(self._clip), tf.float64)
    )

  def create(self, value_type):
    udp.check_value_type(value_type)
    dimension = _num_elements(value_type)
    factory = udp.client_noise_factory(
        self.noise_source(dimension),
        udp.planned_inner(
            tff.aggregators.UnweightedMeanFactory(),
            self._planned,
            'DistortionFactory',
        ),
        dp_event_fn=self._dp_event,
        guarantee=self.guarantee,
        clip=self._clip,
    )
    return factory.create(value_type)


def privacy_report(
    params: dict[str, Any], rounds: int, sampling: sampling_lib.Sampling
) -> dict:
  """The distortion read as a Gaussian mechanism, by every accountant.

  Any two clipped uploads differ by at most Delta = 2C, so z = sigma_e / 2C;
  the paper's TV bounds are no DP claim and are not here (they depend on the
  model: `tv_closed_form`). The report carries the training program's name
  'distortion'.

  Args:
    params: by name, `delta`, `clip` and any of `epsilon`,
      `noise_multiplier` and `noise_stddev` (absent: not given; `delta`
      given; `clip` required).
    rounds: T >= 1.
    sampling: the rounds' client `Sampling`.
  """
  params = dict(params)
  clip = params.pop('clip', None)
  scale = sensitivity(
      validation.positive('clip', validation.required('clip', clip))
  )
  return reports.gaussian_mechanism_report(
      'distortion', rounds=rounds, scale=scale, sampling=sampling, **params
  )


def bernoulli_preprocess(
    rho: float, local_steps: Optional[int], batch_seed: Optional[int]
) -> Callable[[tf.data.Dataset, int, int], tf.data.Dataset]:
  """A client's dataset in a round -> its Bernoulli(rho) mini-batches.

  `(dataset, round_num, client_index) -> dataset`: `local_steps` batches
  (None: ceil(1 / rho)) by `bernoulli_sampling.bernoulli_batches`. With a
  `batch_seed`, round t's batches of client i are seeded by
  (batch_seed, t, i); None: fresh randomness.
  """

  def preprocess(dataset, round_num, client_index):
    seed = None
    if batch_seed is not None:
      seed = int(
          np.random.default_rng([batch_seed, round_num, client_index]).integers(
              2**31
          )
      )
    batches = bernoulli_sampling.bernoulli_batches(
        rho, num_batches=local_steps, seed=seed
    )
    # Bernoulli(rho) batches of the client's examples (unbatched first).
    return batches(dataset.unbatch())

  return preprocess


_TV_FORMULA = 'Gaussian TV bounds (Devroye, Mehrabian, Reddad 2018; rebuilt)'


def tv_resolved(source: TVNoise, clip: float) -> dict[str, float]:
  """sigma_e, z = sigma_e / 2C and the TV bounds of `source` (JSON-ready).

  Functions of the configuration and d (a TV target is calibrated at the
  given parameter_variance).
  """
  return dict(
      noise_stddev=source.noise_stddev,
      noise_multiplier=source.noise_stddev / sensitivity(clip),
      tv_lower=source.tv_lower,
      tv_upper=source.tv_upper,
  )


def tv_closed_form(
    source: TVNoise, target_tv: Optional[float]
) -> dict[str, Any]:
  """The paper's TV bounds of `source` at parameter_variance (JSON-ready).

  `target_tv`: the target sigma_e was calibrated to; None: sigma_e given.
  """
  closed_form = {
      'formula': f'{_TV_FORMULA} at parameter_variance',
      'tv_lower': source.tv_lower,
      'tv_upper': source.tv_upper,
  }
  if target_tv is not None:
    closed_form.update(
        formula=f'{_TV_FORMULA}, sigma_e calibrated to target_tv',
        target_tv=target_tv,
    )
  return closed_form


def run_caveats(mini_batches: bool) -> list[str]:
  """What the eps of a distortion run does not cover, in words.

  `mini_batches`: the run trains on Bernoulli(rho) mini-batches.
  """
  caveats = [
      'eps reads the distortion as a Gaussian mechanism on each clipped '
      'upload (sensitivity 2C, replace one client); against the server per '
      'client over the rounds it took part in, against an analyst with '
      'the amplification of sampling K of N'
  ]
  if mini_batches:
    caveats.append(
        'Bernoulli(rho) mini-batches are not credited in the accounting'
    )
  return caveats


def _num_elements(value_type) -> int:
  """Number of scalars in a structure of fully defined tensor types."""
  if isinstance(value_type, tff.TensorType):
    shape = value_type.shape
    if shape is None or any(dim is None for dim in shape):
      raise TypeError(
          f'value_type must have fully defined shapes: {value_type}'
      )
    return int(np.prod(shape, dtype=np.int64))
  return sum(_num_elements(t) for t in value_type.children())
