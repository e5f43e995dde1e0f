"""Mechanism builders: a mechanism name + parameters -> learning process + charge.

Flags-free: `scripts/train.py` parses flags into `MechanismParams`, and
`build(name, params, ...)` returns a `Mechanism`: the
`tff.learning.templates.LearningProcess` to run, the client sampling the
ledger must be told about, and the factory's `Guarantee`. A round is charged
from the DpEvent the factory keeps in its state (`tff_priv.program.privacy`),
never from a measurement.

| name | process | sampling | event of a round (in the factory's state) |
|---|---|---|---|
| none | `tff.learning.algorithms.build_weighted_fed_avg` | poisson | none (`NonPrivateDpEvent`, eps = inf) |
| dp_fedavg | `build_unweighted_fed_avg` + TFF's DP aggregator: `tff.learning.dp_aggregator` (adaptive clip) or `DifferentiallyPrivateFactory.gaussian_fixed` (with `clip`) | poisson | Gaussian(z), central noise |
| smp | rand_k: `build_unweighted_fed_avg` + `SparsifiedSecureSumFactory`; top_k: `tff_priv.learning.fedsmp.build_fedsmp_process` (mask from public data) | poisson | Gaussian(z), noise shared by the clients, secure sum |
| distortion | `build_unweighted_fed_avg` + `DistortionFactory` (with `clip`) | fixed | Gaussian(sigma_e / 2C) per upload, local noise |
| udp | `tff_priv.learning.crd.build_udp_process` (fixed sigma) | fixed | Gaussian(sigma / Delta) per upload, local noise |
| ldp | `build_unweighted_fed_avg` + `LDPEncodeFactory` | fixed | d x PureEpsilon(eps0) + the range release, local |

Noise levels: `epsilon` is a target (eps, delta) for the whole run of
`total_rounds` rounds; the noise that meets it is calibrated with the ledger's
own events (`tff_priv.accounting.calibration`, `tff_priv.learning.udp`) under
the sampling of the table. With none of `epsilon`, `noise_multiplier`,
`noise_stddev`, `target_tv` given, a Gaussian mechanism targets
`DEFAULT_EPSILON`. LDP takes `ldp_epsilon`, the eps of every reported value (the
paper's parameter), not a run target.

A round in which Poisson sampling drew no client runs nothing and releases
nothing; the analyst ledger still charges it the factory's event, which
over-counts and never under-counts.

Sensitivities: dp_fedavg and smp bound one client's contribution to the sum by
the clip C (client-level DP, add-or-remove-one client); udp bounds one
example's effect on a client's update by Delta = 2 eta C / min_i |D_i| (the
smallest client dataset binds, record-level DP); distortion reads the clipped
upload's Gaussian noise as a mechanism of sensitivity 2C per client.
"""

import dataclasses
import math
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.accounting import calibration
from tff_priv.accounting import guarantees
from tff_priv.accounting import reports
from tff_priv.aggregators import distortion
from tff_priv.aggregators import gaussian_udp
from tff_priv.aggregators import ldp_encode
from tff_priv.aggregators import sparsified_secure_sum
from tff_priv.learning import client_metrics
from tff_priv.learning import crd
from tff_priv.learning import fedsmp
from tff_priv.learning import udp
from tff_priv.learning import udp_client_work
from tff_priv.mechanisms import bernoulli_sampling
from tff_priv.mechanisms import sparsify
from tff_priv.program import sampling as sampling_lib

MECHANISMS = ('none', 'dp_fedavg', 'ldp', 'udp', 'smp', 'distortion')
# Local noise (udp, distortion, ldp) is amplified against the analyst under
# fixed-size sampling and replace-one adjacency, the relation of its events.
SAMPLING_KIND = {
    'none': 'poisson',
    'dp_fedavg': 'poisson',
    'smp': 'poisson',
    'distortion': 'fixed',
    'udp': 'fixed',
    'ldp': 'fixed',
}
DEFAULT_EPSILON = 8.0
DEFAULT_DELTA = 1e-5
DEFAULT_CLIP = 1.0
DEFAULT_COMPRESSION = 0.1
DEFAULT_MASK = 'rand_k'
DEFAULT_PUBLIC_CLIENTS = 20
DEFAULT_LDP_EPSILON = 1.0
DEFAULT_LDP_RADIUS = 0.05
BYTES_PER_FLOAT32 = 4
MASKS = sparsified_secure_sum.MASKS



# The parameters each mechanism takes; any other one given is an error, so a
# flag never silently does nothing.
_NOISE_SPECS = {
    'dp_fedavg': ('epsilon', 'noise_multiplier'),
    'smp': ('epsilon', 'noise_multiplier'),
    'udp': ('epsilon', 'noise_multiplier', 'noise_stddev'),
    'distortion': ('epsilon', 'noise_multiplier', 'noise_stddev', 'target_tv'),
}
ACCEPTS = {
    'none': ('delta',),
    'dp_fedavg': ('delta', 'clip') + _NOISE_SPECS['dp_fedavg'],
    'smp': ('delta', 'clip', 'compression', 'mask', 'public_clients')
    + _NOISE_SPECS['smp'],
    'udp': ('delta', 'clip', 'udp_calibration') + _NOISE_SPECS['udp'],
    'distortion': ('delta', 'clip', 'parameter_variance', 'rho')
    + _NOISE_SPECS['distortion'],
    'ldp': (
        'delta', 'ldp_epsilon', 'ldp_range_mode', 'ldp_center', 'ldp_radius'
    ),
}


@dataclasses.dataclass(frozen=True)
class MechanismParams:
  """A mechanism's parameters; None means "not given" (see `resolve`).

  Attributes:
    epsilon: target eps of the whole run at `delta` (Gaussian mechanisms).
    delta: the delta at which eps is calibrated and reported.
    noise_multiplier: z, noise std / sensitivity (dp_fedavg, smp: of the sum;
      udp: sigma / Delta; distortion: sigma_e / 2C).
    noise_stddev: absolute client noise std (udp sigma, distortion sigma_e).
    clip: dp_fedavg: fixed L2 clip of an update (None: TFF's adaptive
      clipping); smp: L2 clip of the k kept values; udp: per-example gradient
      clip; distortion: L2 clip of the upload.
    compression: smp: p = k / d in (0, 1].
    mask: smp: 'rand_k' (a public seed) or 'top_k' (the server trains on public
      data each round and keeps the k largest coordinates of its update).
    public_clients: smp with mask 'top_k': this many clients of the task's
      split (the first ones) form the public set D_pub; they are never
      sampled, and the sampling rate is K over the remaining clients.
    ldp_epsilon: ldp: eps0 of every reported value.
    ldp_range_mode: ldp: 'fixed', 'minmax' or 'quantile'.
    ldp_center: ldp: the range center c.
    ldp_radius: ldp: the range radius r (initial radius when adaptive).
    target_tv: distortion: calibrate sigma_e to this total variation.
    parameter_variance: distortion: sigma^2 per coordinate for the TV
      calibration and bounds (None with target_tv: estimated each round).
    rho: distortion: Bernoulli(rho) mini-batches of each client's data.
    udp_calibration: udp with epsilon: 'tight' (accountant) or 'paper' (eq. 10).
  """

  epsilon: Optional[float] = None
  delta: Optional[float] = None
  noise_multiplier: Optional[float] = None
  noise_stddev: Optional[float] = None
  clip: Optional[float] = None
  compression: Optional[float] = None
  mask: Optional[str] = None
  public_clients: Optional[int] = None
  ldp_epsilon: Optional[float] = None
  ldp_range_mode: Optional[str] = None
  ldp_center: Optional[float] = None
  ldp_radius: Optional[float] = None
  target_tv: Optional[float] = None
  parameter_variance: Optional[float] = None
  rho: Optional[float] = None
  udp_calibration: Optional[str] = None

  def given(self) -> dict[str, Any]:
    """The parameters that are not None."""
    return {
        k: v for k, v in dataclasses.asdict(self).items() if v is not None
    }


def resolve(name: str, params: MechanismParams) -> MechanismParams:
  """Checks `params` for mechanism `name` and fills in the defaults.

  Args:
    name: one of MECHANISMS.
    params: the given parameters.

  Returns:
    The parameters with defaults filled in.

  Raises:
    ValueError: unknown mechanism, a parameter that does not apply to it, a
      value out of range, or conflicting noise specifications (the message
      names the parameter).
  """
  validation.one_of('mechanism', name, MECHANISMS)
  given = params.given()
  for key in given:
    if key not in ACCEPTS[name]:
      raise ValueError(f'{key} does not apply to mechanism {name!r}')
  checks = {
      'epsilon': validation.positive,
      'delta': validation.open_unit,
      'noise_multiplier': validation.non_negative,
      'noise_stddev': validation.non_negative,
      'clip': validation.positive,
      'compression': validation.half_open_unit,
      'ldp_epsilon': validation.positive,
      'ldp_radius': validation.positive,
      'target_tv': validation.open_unit,
      'parameter_variance': validation.positive,
      'rho': validation.half_open_unit,
  }
  for key, check in checks.items():
    if key in given:
      given[key] = check(key, given[key])
  if 'ldp_center' in given:
    given['ldp_center'] = float(given['ldp_center'])
    if not math.isfinite(given['ldp_center']):
      raise ValueError(f'ldp_center must be finite, got {given["ldp_center"]}')
  if 'ldp_range_mode' in given:
    validation.one_of(
        'ldp_range_mode', given['ldp_range_mode'], ldp_encode.RANGE_MODES
    )
  if 'udp_calibration' in given:
    validation.one_of(
        'udp_calibration', given['udp_calibration'], udp.CALIBRATIONS
    )
  if 'mask' in given:
    validation.one_of('mask', given['mask'], MASKS)
  if 'public_clients' in given:
    validation.int_at_least('public_clients', given['public_clients'], 1)

  given.setdefault('delta', DEFAULT_DELTA)
  noise_specs = _NOISE_SPECS.get(name, ())
  chosen = [k for k in noise_specs if k in given]
  if len(chosen) > 1:
    raise ValueError(
        f'give at most one of {", ".join(noise_specs)} for mechanism '
        f'{name!r}, got {", ".join(chosen)}'
    )
  if noise_specs and not chosen:
    given['epsilon'] = DEFAULT_EPSILON
  if name == 'udp':
    if 'udp_calibration' in given and 'epsilon' not in given:
      raise ValueError('udp_calibration applies only with epsilon')
    if 'epsilon' in given:
      given.setdefault('udp_calibration', 'tight')
  if name in ('smp', 'udp', 'distortion'):
    given.setdefault('clip', DEFAULT_CLIP)
  if name == 'smp':
    given.setdefault('compression', DEFAULT_COMPRESSION)
    given.setdefault('mask', DEFAULT_MASK)
    if given['mask'] == 'top_k':
      given.setdefault('public_clients', DEFAULT_PUBLIC_CLIENTS)
    elif 'public_clients' in given:
      raise ValueError(
          "public_clients applies only with mask='top_k' (rand_k draws its "
          'mask from a public seed)'
      )
  if name == 'distortion':
    noise_free = 0 in (given.get('noise_stddev'), given.get('noise_multiplier'))
    if 'parameter_variance' not in given and not noise_free:
      raise ValueError(
          'parameter_variance is required for mechanism distortion (target_tv, '
          'epsilon, noise_multiplier or noise_stddev > 0): the TV calibration '
          'and bounds need it, and estimating it from the clients would '
          'release an exact client statistic'
      )
  if name == 'ldp':
    given.setdefault('ldp_epsilon', DEFAULT_LDP_EPSILON)
    given.setdefault('ldp_range_mode', 'fixed')
    given.setdefault('ldp_center', 0.0)
    given.setdefault('ldp_radius', DEFAULT_LDP_RADIUS)
  return MechanismParams(**given)


def _get(metrics, *path):
  for key in path:
    metrics = metrics[key]
  return metrics


def train_metrics(metrics) -> dict[str, float]:
  """The clients' training metrics of a round (loss, accuracy if measured)."""
  return {
      k: float(v) for k, v in _get(metrics, 'client_work', 'train').items()
  }


def count_parameters(model_fn) -> int:
  """d: the number of trainable scalars of the model (what a client uploads)."""
  with tf.Graph().as_default():
    model = model_fn()
    return int(
        sum(np.prod(v.shape, dtype=np.int64) for v in model.trainable_variables)
    )


class Mechanism:
  """A built mechanism: the process to run and whom its rounds protect.

  Attributes:
    name: the mechanism name.
    params: the resolved `MechanismParams`.
    sampling: the `ClientSampling` the loop must use.
    process: the `tff.learning.templates.LearningProcess`; its state's
      `aggregator` carries the DpEvent of each round.
    num_parameters: d, trainable scalars of the model.
    guarantee: the aggregation factory's `Guarantee` (None: not private).
    resolved: JSON-ready values the run actually uses (calibrated noise,
      sensitivity, k, ...).
    caveats: what the reported eps does not cover, in words.
  """

  def __init__(self, name, params, sampling, process, num_parameters,
               guarantee=None):
    self.name = name
    self.params = params
    self.sampling = sampling
    self.process = process
    self.num_parameters = num_parameters
    self.guarantee = guarantee
    self.resolved: dict[str, Any] = {}
    self.caveats: list[str] = []

  def upload_bytes_per_client(self, metrics) -> int:
    """Bytes one client uploads in a round (dense float32 by default).

    Args:
      metrics: the round's metrics, or None for the nominal size.
    """
    del metrics
    return BYTES_PER_FLOAT32 * self.num_parameters

  def preprocess(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
    """Applied to each client's preprocessed training dataset."""
    return dataset

  def closed_form_report(self, rounds: int) -> Optional[dict]:
    """The paper's own reading of the run at its nominal parameters, if any.

    `reports.mechanism_report` for smp, udp and ldp (the paper's closed forms
    beside the accountants); the TV bounds for distortion; None otherwise.
    Never instead of the ledger, which charges the factory's events.
    """
    del rounds
    return None


class _SMP(Mechanism):

  def upload_bytes_per_client(self, metrics):
    if metrics is None:
      # What the factory measures with secure=True: every kept value is
      # quantized to 32 bits by tff.aggregators.SecureSumFactory.
      return BYTES_PER_FLOAT32 * self.resolved['kept_coordinates']
    bits = int(_get(metrics, 'aggregator', 'uploaded_bits_per_client'))
    return bits // 8

  def closed_form_report(self, rounds):
    return reports.mechanism_report(
        'smp',
        delta=self.params.delta,
        rounds=rounds,
        noise_multiplier=self.resolved['noise_multiplier'],
        **self.sampling.ledger_kwargs(),
    )


class _Distortion(Mechanism):

  def __init__(self, *args, transform=None, **kwargs):
    super().__init__(*args, **kwargs)
    self._transform = transform

  def preprocess(self, dataset):
    return dataset if self._transform is None else self._transform(dataset)

  def closed_form_report(self, rounds):
    # The paper bounds utility and leakage by the total variation, not eps.
    del rounds
    if self.params.target_tv is not None:
      return {
          'formula': 'Gaussian TV bounds (Devroye, Mehrabian, Reddad 2018; '
                     'rebuilt), sigma_e calibrated to target_tv',
          'target_tv': self.params.target_tv,
      }
    return {
        'formula': 'Gaussian TV bounds (Devroye, Mehrabian, Reddad 2018; '
                   'rebuilt) at parameter_variance',
        'tv_lower': self.resolved['tv_lower'],
        'tv_upper': self.resolved['tv_upper'],
    }


class _UDP(Mechanism):

  def closed_form_report(self, rounds):
    return reports.mechanism_report(
        'udp',
        delta=self.params.delta,
        rounds=rounds,
        noise_stddev=self.resolved['noise_stddev'],
        sensitivity=self.resolved['sensitivity'],
        **self.sampling.ledger_kwargs(),
    )


class _LDP(Mechanism):

  def closed_form_report(self, rounds):
    return reports.mechanism_report(
        'ldp',
        delta=self.params.delta,
        rounds=rounds,
        ldp_epsilon=self.params.ldp_epsilon,
        num_values=self.num_parameters,
        num_clients=self.sampling.clients_per_round,
    )


def build(
    name: str,
    params: MechanismParams,
    *,
    model_fn: Callable[[], tff.learning.models.VariableModel],
    sampling: sampling_lib.ClientSampling,
    total_rounds: int,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_learning_rate: float,
    min_client_examples: Optional[int] = None,
    seed: int = 0,
    public_data: Optional[tf.data.Dataset] = None,
) -> Mechanism:
  """Builds mechanism `name`: its learning process and its ledger charge.

  Args:
    name: one of MECHANISMS.
    params: the parameters (resolved here with `resolve`).
    model_fn: the task's model function.
    sampling: the run's client sampling; its kind must be
      `SAMPLING_KIND[name]`.
    total_rounds: T, for calibrating a target epsilon.
    client_optimizer_fn: the clients' optimizer (FedAvg-based mechanisms).
    server_optimizer_fn: the server's optimizer (FedAvg-based mechanisms).
    client_learning_rate: eta of UDP's clipped full-batch step.
    min_client_examples: udp: the smallest |D_i| of the population.
    seed: seeds the smp mask sequence and the rho mini-batches.
    public_data: smp with mask 'top_k' only, and required then: D_pub, the
      `public_clients` held-out clients' training data, each preprocessed
      (batched, epochs repeated) as a client's data is, concatenated
      (`tasks.hold_out_public_clients`). The `sampling` population must
      exclude those clients.

  Returns:
    A `Mechanism`.

  Raises:
    ValueError: bad parameters, or a sampling of the wrong kind.
  """
  return _build(
      name,
      params,
      model_fn=model_fn,
      sampling=sampling,
      total_rounds=total_rounds,
      client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn,
      client_learning_rate=client_learning_rate,
      min_client_examples=min_client_examples,
      seed=seed,
      public_data=public_data,
  )


def _build(
    name,
    params,
    *,
    model_fn,
    sampling,
    total_rounds,
    client_optimizer_fn,
    server_optimizer_fn,
    client_learning_rate,
    min_client_examples,
    seed,
    public_data,
):
  """`build` without the caveats common to every private mechanism."""
  params = resolve(name, params)
  total_rounds = validation.int_at_least('total_rounds', total_rounds, 1)
  if public_data is not None and params.mask != 'top_k':
    raise ValueError("public_data applies only to smp with mask='top_k'")
  if sampling.kind != SAMPLING_KIND[name]:
    raise ValueError(
        f'mechanism {name!r} is accounted under {SAMPLING_KIND[name]} '
        f'sampling, got {sampling.kind}'
    )
  d = count_parameters(model_fn)
  k_expected = float(sampling.clients_per_round)
  sampling_kwargs = sampling.ledger_kwargs()

  def calibrated_z(local_noise=False):
    if params.noise_multiplier is not None:
      return params.noise_multiplier
    return calibration.calibrate_noise_multiplier(
        params.epsilon, params.delta, total_rounds, **sampling_kwargs,
        min_with_unsampled=local_noise,
    )

  def unweighted(aggregator):
    return tff.learning.algorithms.build_unweighted_fed_avg(
        model_fn,
        client_optimizer_fn=client_optimizer_fn,
        server_optimizer_fn=server_optimizer_fn,
        model_aggregator=aggregator,
        metrics_aggregator=client_metrics.no_client_metrics,
    )

  if name == 'none':
    process = tff.learning.algorithms.build_weighted_fed_avg(
        model_fn,
        client_optimizer_fn=client_optimizer_fn,
        server_optimizer_fn=server_optimizer_fn,
    )
    mech = Mechanism(name, params, sampling, process, d)
    mech.caveats.append('no privacy mechanism: every round is a non-private '
                        'release (eps = inf)')
    return mech

  if name == 'dp_fedavg':
    z = calibrated_z()
    if params.clip is None:
      try:
        factory = tff.learning.dp_aggregator(z, k_expected, zeroing=False)
      except ValueError as e:
        raise ValueError(
            f'adaptive clipping cannot reach noise_multiplier={z:.4g} with '
            f'{sampling.clients_per_round} clients per round ({e}); give a '
            'fixed clip or more clients per round'
        ) from e
      clipping = 'adaptive (tff.learning.dp_aggregator, zeroing off)'
    else:
      factory = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
          z, k_expected, params.clip
      )
      clipping = 'fixed'
    mech = Mechanism(
        name, params, sampling, unweighted(factory), d,
        guarantees.guarantee_of(factory),
    )
    mech.resolved.update(noise_multiplier=z, clipping=clipping)
    if params.clip is None:
      mech.caveats.append(
          'adaptive clipping: noise_multiplier is TFF\'s effective total one, '
          'covering the noised clipped-count release of the quantile estimate'
      )
    return mech

  if name == 'smp':
    z = calibrated_z()
    top_k = params.mask == 'top_k'
    if top_k and public_data is None:
      raise ValueError(
          "mechanism 'smp' with mask='top_k' needs public_data (D_pub)"
      )
    factory = sparsified_secure_sum.SparsifiedSecureSumFactory(
        z,
        params.clip,
        params.compression,
        k_expected,
        mask=params.mask,
        secure=True,
        mask_seed=None if top_k else seed,
    )
    if top_k:
      # The server's public training uses the clients' optimizer; the
      # client datasets (and D_pub) already repeat the local epochs.
      process = fedsmp.build_fedsmp_process(
          model_fn,
          client_optimizer_fn=client_optimizer_fn,
          aggregator_factory=factory,
          server_optimizer_fn=server_optimizer_fn,
          public_data=public_data,
          metrics_aggregator=client_metrics.no_client_metrics,
      )
    else:
      process = unweighted(factory)
    mech = _SMP(name, params, sampling, process, d, factory.guarantee)
    mech.resolved.update(
        noise_multiplier=z,
        mask=params.mask,
        kept_coordinates=int(sparsify.num_kept(d, params.compression)),
    )
    if top_k:
      mech.caveats.append(
          f'top_k: the mask comes from the server\'s training on the '
          f'{params.public_clients} public clients (held out, never sampled), '
          'whose data are public and get no protection: eps covers the other '
          'clients; the mask releases nothing about them'
      )
    return mech

  if name == 'distortion':
    noise_stddev = params.noise_stddev
    if params.noise_multiplier is not None or params.epsilon is not None:
      noise_stddev = calibrated_z(local_noise=True) * 2.0 * params.clip
    if noise_stddev is not None:
      factory = distortion.DistortionFactory(
          noise_stddev=noise_stddev,
          parameter_variance=params.parameter_variance,
          clip=params.clip,
      )
    else:
      factory = distortion.DistortionFactory(
          target_tv=params.target_tv,
          parameter_variance=params.parameter_variance,
          clip=params.clip,
      )
    transform = None
    if params.rho is not None:
      batches = bernoulli_sampling.bernoulli_batches(params.rho)

      def transform(dataset):
        # Bernoulli(rho) batches of the client's examples (unbatched first).
        return batches(dataset.unbatch())

    mech = _Distortion(
        name, params, sampling, unweighted(factory), d, factory.guarantee,
        transform=transform,
    )
    mech.resolved.update(noise_stddev=noise_stddev)
    if noise_stddev is not None:
      mech.resolved['noise_multiplier'] = noise_stddev / (2.0 * params.clip)
      source = factory.noise_source(d)
      mech.resolved.update(tv_lower=source.tv_lower, tv_upper=source.tv_upper)
    mech.caveats.append(
        'eps reads the distortion as a Gaussian mechanism on each clipped '
        'upload (sensitivity 2C, replace one client); against the server per '
        'client over the rounds it took part in, against an analyst with '
        'the amplification of sampling K of N'
    )
    if params.rho is not None:
      mech.caveats.append(
          'Bernoulli(rho) mini-batches are not credited in the accounting'
      )
    return mech

  if name == 'udp':
    if min_client_examples is None:
      raise ValueError('udp needs min_client_examples (the smallest |D_i|)')
    sensitivity = udp_client_work.udp_sensitivity(
        client_learning_rate, params.clip, min_client_examples
    )
    if params.noise_stddev is not None:
      sigma = params.noise_stddev
    elif params.noise_multiplier is not None:
      sigma = params.noise_multiplier * sensitivity
    else:
      sigma = udp.udp_noise_stddev(
          params.epsilon,
          params.delta,
          sensitivity,
          total_rounds,
          calibration=params.udp_calibration,
          min_with_unsampled=True,
          **sampling_kwargs,
      )
    process = crd.build_udp_process(
        model_fn,
        learning_rate=client_learning_rate,
        clip_norm=params.clip,
        per_example_loss=udp_client_work.sparse_categorical_crossentropy(),
        sensitivity=sensitivity,
        noise_stddev=sigma,
    )
    mech = _UDP(
        name, params, sampling, process, d,
        gaussian_udp.GaussianUDPFactory(sigma, sensitivity=sensitivity).guarantee,
    )
    mech.resolved.update(
        noise_stddev=sigma,
        sensitivity=sensitivity,
        noise_multiplier=sigma / sensitivity,
        min_client_examples=min_client_examples,
    )
    mech.caveats.append(
        'record-level DP of each client\'s data (replace one example); '
        'sensitivity 2 eta C / min_i |D_i| of one clipped full-batch step'
    )
    if params.udp_calibration == 'paper':
      mech.caveats.append(
          'noise from the paper\'s Theorem 1: the target epsilon is a claim; '
          'the ledger\'s eps is what it spends'
      )
    return mech

  # ldp
  factory = ldp_encode.LDPEncodeFactory(
      params.ldp_epsilon,
      params.ldp_range_mode,
      params.ldp_center,
      params.ldp_radius,
      expected_clients_per_round=(
          k_expected if params.ldp_range_mode == 'quantile' else None
      ),
  )
  process = unweighted(factory)
  update_type = process.initialize.type_signature.result.member
  update_type = update_type.global_model_weights.trainable
  mech = _LDP(name, params, sampling, process, d, factory.guarantee)
  mech.resolved.update(
      values_per_client_per_round=factory.num_scalars(update_type),
      range_release_is_private=factory.range_release_is_private,
  )
  mech.caveats.append(
      'local DP: each client is charged d values of eps0 for every round it '
      'takes part in (plain composition through the accountant); the '
      'shuffle-model bound is in the closed-form report'
  )
  if not factory.range_release_is_private:
    mech.caveats.append(
        "ldp_range_mode='minmax' sends the clients' min/max in the clear: "
        'a non-private release (eps = inf)'
    )
  return mech
