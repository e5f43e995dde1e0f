"""LDP-FL aggregation (Sun, Qian, Chen 2021) as TFF aggregation factories.

`LDPEncodeFactory` is a `tff.aggregators.UnweightedAggregationFactory`. Each
client encodes every scalar of its value (a model delta as tff.learning passes
it, or any structure of float tensors) with the two-point encoder of
`tff_priv.mechanisms.ldp_encode`: tensor l uses its own range (c_l, r_l), and
every scalar is eps-LDP with respect to the client's value. The server averages
the reports per coordinate (`ReportMeanFactory`), an unbiased estimate of the
clients' mean of the clipped values (Lemma 2), with the variance of Lemma 4.

What is private: every reported scalar is eps-LDP. A client reports d scalars
per round (`num_scalars`); how eps composes over d and the rounds (d * T * eps,
or the shuffle-model bound when the split-and-shuffle transport of
`tff_priv.mechanisms.split_shuffle` hides who sent what) is the accounting's
business; this module exposes `epsilon`, `num_scalars` and the DpEvent of the
range release (`range_dp_event`).

Range modes (per tensor l):

* 'fixed': (c_l, r_l) given at construction; nothing is released.
* 'minmax': the paper's adaptive range. Clients also send the min and max of
  their finite values of each tensor; the server keeps (c_l, r_l) =
  ((min + max) / 2, (max - min) / 2) over all clients (tff.federated_min /
  tff.federated_max) and uses it in the next round. This release is NOT
  private (`range_release_is_private` is False; its DpEvent is
  `dp_accounting.NonPrivateDpEvent`).
* 'quantile': c_l fixed; r_l is a differentially private estimate of the
  `quantile_target` quantile, over clients, of each client's max |w - c_l| over
  tensor l (Andrew et al. 2021 geometric estimator,
  `tff.aggregators.PrivateQuantileEstimationProcess`, one per tensor), wired as
  tff.aggregators' adaptive clipping does: this round's estimate encodes, the
  clients' values update it for the next round. Each round releases one
  Gaussian-noised count per tensor: `range_dp_event`.

Non-finite values: a client's non-finite values are not encoded, not reported
and not averaged (the mean of coordinate j is over the clients that reported
j), and they are counted (`nonfinite_count`).
"""

import collections
import math
import numbers
from typing import Optional, Sequence, Union

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_priv.mechanisms import ldp_encode

RANGE_MODES = ('fixed', 'minmax', 'quantile')

PerTensor = Union[float, Sequence[float]]


def _flatten(value, value_type):
  """Tensors of `value` (inside a tf computation) in the order of value_type."""
  if isinstance(value_type, tff.TensorType):
    return [value]
  return tff.structure.flatten(
      tff.structure.from_container(value, recursive=True)
  )


def _pack(flat, value_type):
  """Inverse of `_flatten`: a value with value_type's Python containers."""
  if isinstance(value_type, tff.TensorType):
    return flat[0]
  return tff.types.type_to_py_container(
      tff.structure.pack_sequence_as(value_type, flat), value_type
  )


def _tensor_types(value_type) -> list[tff.TensorType]:
  if isinstance(value_type, tff.TensorType):
    return [value_type]
  return list(tff.structure.flatten(value_type))


def _check_value_type(value_type):
  if not isinstance(value_type, (tff.TensorType, tff.StructType)):
    raise TypeError(
        'value_type must be a tff.TensorType or tff.StructType, got '
        f'{value_type!r}'
    )
  if not tff.types.is_structure_of_floats(value_type):
    raise TypeError(
        'value_type must be a structure of float tensors, got '
        f'{value_type}'
    )
  if not _tensor_types(value_type):
    raise TypeError('value_type must contain at least one tensor')


class ReportMeanFactory(tff.aggregators.UnweightedAggregationFactory):
  """Per-coordinate mean of the clients' reports; non-finite = no report.

  The server side of LDP-FL. For every coordinate j,

      mean_j = (sum over clients u with a finite report at j of v_uj) / n_j,

  n_j = number of such clients (0 if there are none, mean_j = 0). This is what
  `tff_priv.mechanisms.split_shuffle.average_by_id` computes from the shuffled
  scalar messages (a non-finite report is a message never sent), and it is
  the mean `LDPEncodeFactory` returns.

  Clients send their reports with non-finite entries set to 0, plus a 0/1
  int32 structure marking them (skipped work when a tensor is all finite).
  State: (). Measurements: `missing_count`, int64[L], the number of non-finite
  entries per tensor (in the order of `tff.structure.flatten(value_type)`),
  summed over clients.
  """

  def create(self, value_type) -> tff.templates.AggregationProcess:
    _check_value_type(value_type)
    tensor_types = _tensor_types(value_type)
    missing_type = _pack(
        [tff.TensorType(np.int32, t.shape) for t in tensor_types], value_type
    )

    @tff.tensorflow.computation(value_type)
    def split_missing(report):
      summands, missing = [], []
      for x in _flatten(report, value_type):
        # The sum is finite iff every entry is (or the sum overflows, which
        # only sends a finite tensor down the exact path).
        all_finite = tf.math.is_finite(tf.reduce_sum(x))

        def fast(x=x):
          return x, tf.zeros(tf.shape(x), tf.int32)

        def exact(x=x):
          finite = tf.math.is_finite(x)
          return (
              tf.where(finite, x, tf.zeros_like(x)),
              tf.cast(tf.logical_not(finite), tf.int32),
          )

        s, m = tf.cond(all_finite, fast, exact)
        summands.append(s)
        missing.append(m)
      return _pack(summands, value_type), _pack(missing, value_type)

    @tff.tensorflow.computation(value_type, missing_type, np.int32)
    def mean_of_reports(sums, missing, num_clients):
      means, missing_count = [], []
      for s, m in zip(
          _flatten(sums, value_type), _flatten(missing, value_type)
      ):
        reports = tf.cast(num_clients - m, s.dtype)
        means.append(tf.math.divide_no_nan(s, reports))
        missing_count.append(tf.reduce_sum(tf.cast(m, tf.int64)))
      return _pack(means, value_type), tf.stack(missing_count)

    @tff.federated_computation()
    def init_fn():
      return tff.federated_value((), tff.SERVER)

    @tff.federated_computation(
        init_fn.type_signature.result,
        tff.FederatedType(value_type, tff.CLIENTS),
    )
    def next_fn(state, report):
      summand, missing = tff.federated_map(split_missing, report)
      num_clients = tff.federated_sum(tff.federated_value(1, tff.CLIENTS))
      mean, missing_count = tff.federated_map(
          mean_of_reports,
          (
              tff.federated_sum(summand),
              tff.federated_sum(missing),
              num_clients,
          ),
      )
      measurements = tff.federated_zip(
          collections.OrderedDict(missing_count=missing_count)
      )
      return tff.templates.MeasuredProcessOutput(
          state=state, result=mean, measurements=measurements
      )

    return tff.templates.AggregationProcess(init_fn, next_fn)


def _is_real(x) -> bool:
  return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _check_real(value, name, *, positive):
  if not _is_real(value):
    raise TypeError(f'{name} must be a real number, got {value!r}')
  if not math.isfinite(value):
    raise ValueError(f'{name} must be finite, got {value}')
  if positive and value <= 0:
    raise ValueError(f'{name} must be > 0, got {value}')
  return float(value)


def _check_per_tensor(value, name, *, positive):
  """A float, or a sequence of floats (one per tensor), validated."""
  if isinstance(value, (str, bytes)) or not (
      _is_real(value) or isinstance(value, (Sequence, np.ndarray))
  ):
    raise TypeError(
        f'{name} must be a number or a sequence of numbers (one per tensor), '
        f'got {value!r}'
    )
  if _is_real(value):
    return _check_real(value, name, positive=positive)
  values = [v.item() if isinstance(v, np.generic) else v for v in value]
  if not values:
    raise ValueError(f'{name} must not be empty')
  return tuple(
      _check_real(v, f'{name}[{i}]', positive=positive)
      for i, v in enumerate(values)
  )


def _broadcast(value, num_tensors, name) -> np.ndarray:
  if isinstance(value, float):
    return np.full([num_tensors], value, np.float32)
  if len(value) != num_tensors:
    raise ValueError(
        f'{name} has {len(value)} entries but value_type has {num_tensors} '
        'tensors (one entry per tensor, in the order of '
        'tff.structure.flatten(value_type))'
    )
  return np.asarray(value, np.float32)


class LDPEncodeFactory(tff.aggregators.UnweightedAggregationFactory):
  """Mean of the clients' values, each scalar encoded with eps-LDP (LDP-FL).

  The process's `next(state, value)` returns the per-coordinate mean of the
  clients' encoded values (`ReportMeanFactory`): an unbiased estimate of the
  mean of the clients' values clipped to each tensor's [c_l - r_l, c_l + r_l].

  State (an OrderedDict at SERVER):
    center, radius: float32[L], the range (c_l, r_l) used in the next round,
      L = number of tensors in value_type, in tff.structure.flatten order.
    range_estimator: () or, for 'quantile', a tuple of L
      PrivateQuantileEstimationProcess states.
    report_mean: the `ReportMeanFactory` process state (()).

  Measurements (an OrderedDict at SERVER):
    center, radius: float32[L], the range used in this round.
    clipped_fraction: float32[L], the fraction of the clients' finite values
      of each tensor that were outside the range and clipped.
    nonfinite_count: int64[L], the clients' non-finite values of each tensor,
      dropped (not reported, not averaged).
  """

  def __init__(
      self,
      epsilon: float,
      range_mode: str = 'fixed',
      center: PerTensor = 0.0,
      radius: Optional[PerTensor] = None,
      *,
      min_radius: float = 1e-9,
      quantile_target: float = 0.5,
      quantile_learning_rate: float = 0.2,
      expected_clients_per_round: Optional[float] = None,
      quantile_noise_stddev: Optional[float] = None,
  ):
    """Initializes the factory; every argument is validated here.

    Args:
      epsilon: eps > 0, finite: each reported scalar is eps-LDP.
      range_mode: 'fixed', 'minmax' or 'quantile' (see the module docstring).
      center: c, one float for all tensors or a sequence with one per tensor
        (in the order of tff.structure.flatten(value_type)). For 'minmax' it
        is the initial center; for 'fixed' and 'quantile' it stays fixed.
      radius: r > 0, one float or one per tensor; required. For 'fixed' it is
        the range; for 'minmax' the initial radius; for 'quantile' the
        quantile estimator's initial estimate.
      min_radius: lower bound on an adaptive radius (a tensor whose clients'
        values are all equal would otherwise get r = 0).
      quantile_target: 'quantile' mode: the quantile, over clients, of the
        clients' max |w - c| per tensor that the radius tracks.
      quantile_learning_rate: 'quantile' mode: the geometric update's learning
        rate (0.2 as recommended by Andrew et al.).
      expected_clients_per_round: 'quantile' mode (required): the expected
        number of clients per round; the estimator normalizes by it.
      quantile_noise_stddev: 'quantile' mode: stddev of the Gaussian noise on
        each tensor's count of clients below the estimate. Defaults to
        expected_clients_per_round / 20 (Andrew et al.). The noise multiplier
        of each release is quantile_noise_stddev / 0.5.

    Raises:
      TypeError: an argument has the wrong type.
      ValueError: an argument has a bad value.
    """
    self._epsilon = _check_real(epsilon, 'epsilon', positive=True)
    if not isinstance(range_mode, str) or range_mode not in RANGE_MODES:
      raise ValueError(
          f'range_mode must be one of {RANGE_MODES}, got {range_mode!r}'
      )
    self._range_mode = range_mode
    self._center = _check_per_tensor(center, 'center', positive=False)
    if radius is None:
      raise ValueError(
          'radius is required: the range for range_mode="fixed", the initial '
          'radius for "minmax", the initial estimate for "quantile"'
      )
    self._radius = _check_per_tensor(radius, 'radius', positive=True)
    self._min_radius = _check_real(min_radius, 'min_radius', positive=True)

    self._quantile_target = _check_real(
        quantile_target, 'quantile_target', positive=False
    )
    if not 0.0 <= self._quantile_target <= 1.0:
      raise ValueError(
          f'quantile_target must be in [0, 1], got {quantile_target}'
      )
    self._quantile_learning_rate = _check_real(
        quantile_learning_rate, 'quantile_learning_rate', positive=True
    )
    if expected_clients_per_round is not None:
      expected_clients_per_round = _check_real(
          expected_clients_per_round,
          'expected_clients_per_round',
          positive=True,
      )
    elif range_mode == 'quantile':
      raise ValueError(
          'expected_clients_per_round is required for range_mode="quantile"'
      )
    self._expected_clients = expected_clients_per_round
    if quantile_noise_stddev is not None:
      quantile_noise_stddev = _check_real(
          quantile_noise_stddev, 'quantile_noise_stddev', positive=True
      )
    elif expected_clients_per_round is not None:
      quantile_noise_stddev = expected_clients_per_round / 20.0
    self._quantile_noise_stddev = quantile_noise_stddev

  @property
  def epsilon(self) -> float:
    """The LDP parameter of every reported scalar."""
    return self._epsilon

  @property
  def range_mode(self) -> str:
    return self._range_mode

  @property
  def range_release_is_private(self) -> bool:
    """False for 'minmax': clients send their min/max to the server in clear."""
    return self._range_mode != 'minmax'

  def num_scalars(self, value_type) -> int:
    """d, the number of eps-LDP scalars one client reports per round."""
    _check_value_type(value_type)
    total = 0
    for t in _tensor_types(value_type):
      if not tff.types.is_shape_fully_defined(t.shape):
        raise ValueError(
            f'value_type has a tensor of unknown shape {t}; d is undefined'
        )
      total += tff.types.num_elements_in_shape(t.shape)
    return total

  def range_dp_event(self, value_type) -> dp_accounting.DpEvent:
    """The DpEvent of one round's range release, per client.

    'fixed': NoOpDpEvent (nothing released). 'minmax': NonPrivateDpEvent.
    'quantile': a ComposedDpEvent of one GaussianDpEvent per tensor, each
    obtained from the tfp.QuantileEstimatorQuery that the round runs (its
    get_noised_result). Client sampling is not included: the caller wraps the
    event in the sampling event of its round.

    Args:
      value_type: the value type the process is created for.
    """
    _check_value_type(value_type)
    if self._range_mode == 'fixed':
      return dp_accounting.NoOpDpEvent()
    if self._range_mode == 'minmax':
      return dp_accounting.NonPrivateDpEvent()
    num_tensors = len(_tensor_types(value_type))
    radii = _broadcast(self._radius, num_tensors, 'radius')
    return dp_accounting.ComposedDpEvent(
        [_query_dp_event(self._quantile_query(float(r))) for r in radii]
    )

  def _quantile_query(self, initial_estimate: float):
    return tfp.QuantileEstimatorQuery(
        initial_estimate=initial_estimate,
        target_quantile=self._quantile_target,
        learning_rate=self._quantile_learning_rate,
        below_estimate_stddev=self._quantile_noise_stddev,
        expected_num_records=self._expected_clients,
        geometric_update=True,
    )

  def create(self, value_type) -> tff.templates.AggregationProcess:
    _check_value_type(value_type)
    tensor_types = _tensor_types(value_type)
    num_tensors = len(tensor_types)
    centers = _broadcast(self._center, num_tensors, 'center')
    radii = _broadcast(self._radius, num_tensors, 'radius')
    epsilon = self._epsilon
    min_radius = self._min_radius
    vector = tff.TensorType(np.float32, [num_tensors])
    count_vector = tff.TensorType(np.int64, [num_tensors])
    report_mean = ReportMeanFactory().create(value_type)
    estimators = ()
    if self._range_mode == 'quantile':
      estimators = tuple(
          tff.aggregators.PrivateQuantileEstimationProcess(
              self._quantile_query(float(r))
          )
          for r in radii
      )

    @tff.tensorflow.computation
    def initial_range():
      return tf.constant(centers), tf.constant(radii)

    @tff.tensorflow.computation(value_type, vector, vector)
    def client_encode(value, center, radius):
      reports = []
      stats = collections.defaultdict(list)
      for l, x in enumerate(_flatten(value, value_type)):
        c, r = center[l], radius[l]
        result = ldp_encode.encode(x, c, r, epsilon, ldp_encode.fresh_seed())
        reports.append(result.encoded)
        stats['num_clipped'].append(result.num_clipped)
        stats['num_finite'].append(
            tf.size(x, out_type=tf.int64) - result.num_nonfinite
        )
        lo = tf.cast(result.finite_min, tf.float32)
        hi = tf.cast(result.finite_max, tf.float32)
        stats['finite_min'].append(lo)
        stats['finite_max'].append(hi)
        # max |w - c| over finite w (0 if there are none).
        stats['max_deviation'].append(
            tf.maximum(tf.maximum(hi - c, c - lo), 0.0)
        )
      stats = collections.OrderedDict(
          (k, tf.stack(v)) for k, v in stats.items()
      )
      return _pack(reports, value_type), stats

    @tff.tensorflow.computation(count_vector, count_vector)
    def fraction(part, whole):
      return tf.math.divide_no_nan(
          tf.cast(part, tf.float32), tf.cast(whole, tf.float32)
      )

    @tff.tensorflow.computation(vector, vector, vector, vector)
    def minmax_range(center, radius, global_min, global_max):
      new_center = global_min / 2.0 + global_max / 2.0
      new_radius = tf.maximum(global_max / 2.0 - global_min / 2.0, min_radius)
      # No finite value anywhere (min = +inf, max = -inf): keep the range.
      ok = tf.logical_and(
          tf.math.is_finite(new_center), tf.math.is_finite(new_radius)
      )
      ok = tf.logical_and(ok, global_min <= global_max)
      return (
          tf.where(ok, new_center, center),
          tf.where(ok, new_radius, radius),
      )

    def select(l):
      return tff.tensorflow.computation(lambda v: v[l], vector)

    @tff.federated_computation()
    def init_fn():
      center, radius = tff.federated_eval(initial_range, tff.SERVER)
      return tff.federated_zip(
          collections.OrderedDict(
              center=center,
              radius=radius,
              range_estimator=tff.federated_zip(
                  tuple(e.initialize() for e in estimators)
              )
              if estimators
              else tff.federated_value((), tff.SERVER),
              report_mean=report_mean.initialize(),
          )
      )

    @tff.federated_computation(
        init_fn.type_signature.result,
        tff.FederatedType(value_type, tff.CLIENTS),
    )
    def next_fn(state, value):
      center, radius = state['center'], state['radius']
      report, stats = tff.federated_map(
          client_encode,
          (
              value,
              tff.federated_broadcast(center),
              tff.federated_broadcast(radius),
          ),
      )
      mean_output = report_mean.next(state['report_mean'], report)

      new_center, new_radius = center, radius
      range_estimator = state['range_estimator']
      if self._range_mode == 'minmax':
        new_center, new_radius = tff.federated_map(
            minmax_range,
            (
                center,
                radius,
                tff.federated_min(stats['finite_min']),
                tff.federated_max(stats['finite_max']),
            ),
        )
      elif self._range_mode == 'quantile':
        new_states = tuple(
            e.next(
                range_estimator[l],
                tff.federated_map(select(l), stats['max_deviation']),
            )
            for l, e in enumerate(estimators)
        )
        range_estimator = tff.federated_zip(new_states)
        reports = tff.federated_zip(
            tuple(e.report(s) for e, s in zip(estimators, new_states))
        )
        reports_type = reports.type_signature.member
        stack = tff.tensorflow.computation(
            lambda r: tf.maximum(
                tf.stack(_flatten(r, reports_type)), min_radius
            ),
            reports_type,
        )
        new_radius = tff.federated_map(stack, reports)

      new_state = collections.OrderedDict(
          center=new_center,
          radius=new_radius,
          range_estimator=range_estimator,
          report_mean=mean_output.state,
      )
      measurements = collections.OrderedDict(
          center=center,
          radius=radius,
          clipped_fraction=tff.federated_map(
              fraction,
              (
                  tff.federated_sum(stats['num_clipped']),
                  tff.federated_sum(stats['num_finite']),
              ),
          ),
          nonfinite_count=mean_output.measurements['missing_count'],
      )
      return tff.templates.MeasuredProcessOutput(
          state=tff.federated_zip(new_state),
          result=mean_output.result,
          measurements=tff.federated_zip(measurements),
      )

    return tff.templates.AggregationProcess(init_fn, next_fn)


def _query_dp_event(query) -> dp_accounting.DpEvent:
  """The DpEvent that one get_noised_result of `query` reports.

  Runs the query's own methods eagerly on an empty sample: the event of a
  tensorflow_privacy query does not depend on the data.
  """
  global_state = query.initial_global_state()
  sample_state = query.initial_sample_state()
  _, _, event = query.get_noised_result(sample_state, global_state)
  if isinstance(event, dp_accounting.GaussianDpEvent):
    # tfp returns the noise multiplier as a tensor; accountants want a float.
    return dp_accounting.GaussianDpEvent(float(event.noise_multiplier))
  return event
