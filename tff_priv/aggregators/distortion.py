"""Parameter distortion (Zhang, Chen, Yang): W~ = W + N(0, sigma_e^2 I), then the mean.

Each client adds Gaussian distortion to its upload; the server averages. The
distortion is given (`noise_stddev`) or calibrated from a target total
variation between the distorted and the original parameter distribution
(`target_tv`), with the Gaussian TV bounds REBUILT from Devroye, Mehrabian,
Reddad 2018 (`tff_priv.mechanisms.total_variation`): with m coordinates and a
parameter variance sigma^2 per coordinate, sigma_e = sigma * c(target, m),
where c makes the chosen bound ('upper': TV <= target; 'lower':
TV >= target, only for targets <= 1/100) equal the target.

The parameter variance sigma^2 is

* given (`parameter_variance=...`): sigma_e is fixed for the run; or
* estimated each round across the round's clients: the mean over coordinates
  of the across-client variance of their uploads (E[W^2] - E[W]^2 from two
  federated means). That statistic is released to the server WITHOUT noise:
  the measurements say `variance_estimated=True`, and the DP reading below
  does not cover it.

Measurements (under `noise`): `noise_stddev` (sigma_e), `tv_lower`,
`tv_upper` (the DMR bounds sigma_e implies, which are fixed by the calibration),
`parameter_variance` (given or estimated) and `variance_estimated`.

A DP reading of the same noise: with `clip=C` the uploads are first clipped to
L2 norm C (`tff.aggregators.clipping_factory`), so any two uploads differ by
at most 2C and each distorted upload is a Gaussian mechanism with noise
multiplier sigma_e / (2C): `tff_priv.accounting.reports.mechanism_report(
'distortion', noise_stddev=sigma_e, clip=C, ...)` gives its (eps, delta).
"""

import collections
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.aggregators import gaussian_udp
from tff_priv.mechanisms import total_variation

# Floor of an estimated variance: identical uploads (one client, or a
# converged model) have variance 0, for which any sigma_e has TV 1.
_MIN_VARIANCE = 1e-12


class TVNoise(gaussian_udp.NoiseSource):
  """sigma_e from a TV target, or fixed, with the TV bounds it implies."""

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
    elif noise_stddev:
      raise ValueError(
          'with a fixed noise_stddev > 0 give parameter_variance: the TV '
          'bounds need it'
      )
    self.parameter_variance = parameter_variance
    self.uses_value_variance = parameter_variance is None
    if target_tv is not None:
      # sigma_e is proportional to sigma: calibrate once at unit variance.
      self._scale = total_variation.noise_for_tv(
          target_tv, 1.0, self.dimension, bound
      )
      self._fixed = None
      unit_scale = self._scale
    else:
      noise_stddev = validation.non_negative('noise_stddev', noise_stddev)
      self._scale = None
      self._fixed = noise_stddev
      # sigma_e = 0: TV = 0 whatever the variance, which may then be left to
      # the per-round estimate (a measurement, e.g. of a noise-free baseline).
      unit_scale = (
          noise_stddev / parameter_variance**0.5 if noise_stddev else 0.0
      )
    # The bounds depend on sigma_e / sigma only, fixed above.
    self.tv_lower, self.tv_upper = total_variation.tv_bounds(
        unit_scale, 1.0, self.dimension
    )

  def initial_state(self):
    return ()

  def round_noise(self, state, value_variance):
    if self.uses_value_variance:
      variance = tf.maximum(tf.cast(value_variance, tf.float32), _MIN_VARIANCE)
    else:
      variance = tf.constant(self.parameter_variance, tf.float32)
    if self._fixed is not None:
      sigma = tf.constant(self._fixed, tf.float32)
    else:
      sigma = tf.sqrt(variance) * self._scale
    return sigma, state, collections.OrderedDict(
        noise_stddev=sigma,
        tv_lower=tf.constant(self.tv_lower, tf.float32),
        tv_upper=tf.constant(self.tv_upper, tf.float32),
        parameter_variance=variance,
        variance_estimated=tf.constant(self.uses_value_variance),
    )


class DistortionFactory(tff.aggregators.UnweightedAggregationFactory):
  """Distortion N(0, sigma_e^2 I) on each client's upload, then the plain mean.

  Use it with `tff.learning.algorithms.build_unweighted_fed_avg`, or wrap it
  with `tff.aggregators.as_weighted_aggregator` for weighted builders.
  """

  def __init__(
      self,
      *,
      noise_stddev: Optional[float] = None,
      target_tv: Optional[float] = None,
      parameter_variance: Optional[float] = None,
      tv_bound: str = 'upper',
      clip: Optional[float] = None,
  ):
    """Validates the arguments (see the module docstring).

    Args:
      noise_stddev: sigma_e >= 0 (sigma_e > 0 needs parameter_variance for the
        TV bounds; sigma_e = 0 has TV 0 and may estimate the variance).
      target_tv: a TV target in (0, 1) to calibrate sigma_e.
      parameter_variance: sigma^2 > 0 per coordinate; None: estimated per
        round across the clients (released without noise).
      tv_bound: 'upper' (TV <= target) or 'lower' (TV >= target).
      clip: optional L2 clip C of each upload before distortion.
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
    if noise_stddev and parameter_variance is None:
      raise ValueError(
          'with a fixed noise_stddev > 0 give parameter_variance: the TV '
          'bounds need it'
      )
    self._kwargs = dict(
        noise_stddev=noise_stddev,
        target_tv=target_tv,
        parameter_variance=parameter_variance,
        bound=tv_bound,
    )
    self._clip = clip

  def noise_source(self, dimension: int) -> TVNoise:
    """The noise source for `dimension` coordinates (sigma_e, TV bounds)."""
    return TVNoise(dimension, **self._kwargs)

  def create(self, value_type):
    gaussian_udp.check_value_type(value_type)
    dimension = _num_elements(value_type)
    factory = gaussian_udp.client_noise_factory(
        self.noise_source(dimension), tff.aggregators.UnweightedMeanFactory()
    )
    if self._clip is not None:
      factory = tff.aggregators.clipping_factory(self._clip, factory)
    return factory.create(value_type)


def _num_elements(value_type) -> int:
  """Number of scalars in a structure of fully defined tensor types."""
  if isinstance(value_type, tff.TensorType):
    shape = value_type.shape
    if shape is None or any(dim is None for dim in shape):
      raise TypeError(f'value_type must have fully defined shapes: {value_type}')
    return int(np.prod(shape, dtype=np.int64))
  return sum(_num_elements(t) for t in value_type.children())
