"""Factory for LDP-FL's locally private mean (Sun, Qian, Chen 2021).

`LDPEncodeFactory` is an unweighted aggregation factory: every client encodes
each scalar of its value with the eps-LDP two-point encoder of
`tff_priv.mechanisms.ldp`, within a per-tensor range, and the server
returns the per-coordinate mean of the reports (`ReportMeanFactory`), an
unbiased estimate of the clients' mean of the clipped values. As in TFF's
`DifferentiallyPrivateFactory`, the process's state carries the
`dp_accounting.DpEvent` of the release its last `next` made (read it with
`tff_priv.accounting.guarantees.extract_dp_event`), and the factory's
`guarantee` says whom that event protects.
"""

import collections
import math
import numbers
from typing import Any, NamedTuple, Optional, Sequence, Union

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_priv.accounting import events
from tff_priv.accounting import guarantees
from tff_priv.mechanisms import ldp as ldp_mechanisms

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
        'value_type must be a structure of float tensors, got ' f'{value_type}'
    )
  if not _tensor_types(value_type):
    raise TypeError('value_type must contain at least one tensor')


def _client_encode(value_type, vector, epsilon, range_mode):
  """The client's encoded reports, and what its range mode sends."""

  @tff.tensorflow.computation(value_type, vector, vector)
  def client_encode(value, center, radius):
    """The client's reports, plus what its range mode sends (nothing else)."""
    reports, lows, highs, deviations = [], [], [], []
    for l, x in enumerate(_flatten(value, value_type)):
      c, r = center[l], radius[l]
      # A non-finite scalar is encoded as the center: every scalar is
      # reported, so which were non-finite is not revealed.
      x = tf.where(tf.math.is_finite(x), x, tf.cast(c, x.dtype))
      result = ldp_mechanisms.encode(
          x, c, r, epsilon, ldp_mechanisms.fresh_seed()
      )
      reports.append(result.encoded)
      lo = tf.cast(result.finite_min, tf.float32)
      hi = tf.cast(result.finite_max, tf.float32)
      lows.append(lo)
      highs.append(hi)
      # max |w - c| over finite w (0 if there are none).
      deviations.append(tf.maximum(tf.maximum(hi - c, c - lo), 0.0))
    reports = _pack(reports, value_type)
    if range_mode == 'minmax':
      return reports, (tf.stack(lows), tf.stack(highs))
    if range_mode == 'quantile':
      return reports, tf.stack(deviations)
    return reports

  return client_encode


def _minmax_range(vector, min_radius):
  """The next range from the clients' global min and max ('minmax')."""

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

  return minmax_range


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
  The counts n_j are exact client statistics used inside the released mean;
  they are not released on their own. State: (). Measurements: an empty
  OrderedDict.
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
      means = []
      for s, m in zip(
          _flatten(sums, value_type), _flatten(missing, value_type)
      ):
        reports = tf.cast(num_clients - m, s.dtype)
        means.append(tf.math.divide_no_nan(s, reports))
      return _pack(means, value_type)

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
      mean = tff.federated_map(
          mean_of_reports,
          (
              tff.federated_sum(summand),
              tff.federated_sum(missing),
              num_clients,
          ),
      )
      return tff.templates.MeasuredProcessOutput(
          state=state,
          result=mean,
          measurements=tff.federated_value(
              collections.OrderedDict(), tff.SERVER
          ),
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


# Under replace-one adjacency a client's record in each tensor's quantile
# estimate flips from -0.5 to +0.5: the noised count has sensitivity 1.
# (tensorflow_privacy's QuantileEstimatorQuery reports stddev / 0.5, the
# multiplier under add-or-remove-one, where a record of +-0.5 appears or not.)
_QUANTILE_COUNT_REPLACE_ONE_SENSITIVITY = 1.0


class LDPState(NamedTuple):
  """State of an `LDPEncodeFactory` process (at SERVER).

  Attributes:
    center: float32[L], the range centers c_l the next round encodes with
      (L = number of tensors of value_type, in tff.structure.flatten order).
    radius: float32[L], the range radii r_l the next round encodes with.
    range_estimator: () or, for 'quantile', a tuple of L
      `tff.aggregators.PrivateQuantileEstimationProcess` states.
    report_mean: the `ReportMeanFactory` process state (()).
    dp_event: the `to_named_tuple()` form of the round's
      `dp_accounting.DpEvent` (see `LDPEncodeFactory`); a placeholder of the
      same structure in the state `initialize` returns.
    is_init_state: True in the state `initialize` returns.
  """

  center: Any
  radius: Any
  range_estimator: Any
  report_mean: Any
  dp_event: Any
  is_init_state: Any

  # Replace-one: each value's two-point report is eps-LDP on the client.
  accounting = guarantees.StateAccounting(
      factory='LDPEncodeFactory', relation='replace_one', noise='local'
  )


class LDPEncodeFactory(tff.aggregators.UnweightedAggregationFactory):
  """Mean of the clients' values, each scalar encoded with eps-LDP (LDP-FL).

  UNWEIGHTED: every client's value counts once (as in
  `tff.learning.algorithms.build_unweighted_fed_avg`; a weighted process can
  wrap it with `tff.aggregators.as_weighted_aggregator`, which ignores the
  weights).

  Each client encodes every scalar w of its value (a model delta as
  tff.learning passes it, or any structure of float tensors) with the
  two-point encoder of `tff_priv.mechanisms.ldp`: tensor l uses its own
  range (c_l, r_l), w is clipped to [c_l - r_l, c_l + r_l] and reported as
  c_l - r_l q or c_l + r_l q, eps-LDP (Theorem 1). The process's
  `next(state, value)` returns the per-coordinate mean of the reports
  (`ReportMeanFactory`): an unbiased estimate of the clients' mean of the
  clipped values (Lemma 2), with the variance of Lemma 4.

  Range modes (per tensor l):

  * 'fixed': (c_l, r_l) given at construction, public; nothing is released.
  * 'minmax': the paper's adaptive range. Clients also send the min and max
    of their finite values of each tensor to the server in the clear; the
    server sets (c_l, r_l) = ((min + max) / 2, (max - min) / 2) over all
    clients (tff.federated_min / tff.federated_max) for the next round. NOT
    private (`range_release_is_private` is False): the range gives away the
    extreme clients' values.
  * 'quantile': c_l fixed; r_l is a differentially private estimate of the
    `quantile_target` quantile, over clients, of each client's max |w - c_l|
    over tensor l (Andrew et al. 2021 geometric estimator, TFF's
    `tff.aggregators.PrivateQuantileEstimationProcess`, one per tensor),
    wired as tff.aggregators' adaptive clipping is: this round's estimate
    encodes, the clients' values update it for the next round. Each client
    sends, per tensor, whether its max |w - c_l| is below the estimate (a
    record of -0.5 or +0.5); the server sums the records IN THE CLEAR and then
    adds Gaussian noise of stddev `quantile_noise_stddev`. This release is
    DP against an analyst who sees only the released range (and the models),
    not against that server.

  Privacy (the state's `dp_event`, one round, one client's value, replace-one
  adjacency, client sampling not included):

      ComposedDpEvent([
          SelfComposedDpEvent(PureEpsilonDpEvent(eps), d),  # the reports
          range_event,
      ])

  d = `num_scalars(value_type)`, every reported scalar being eps-LDP against
  the server that sees each upload; range_event is NoOpDpEvent ('fixed'),
  NonPrivateDpEvent ('minmax') or a ComposedDpEvent of one
  GaussianDpEvent(quantile_noise_stddev / 1) per tensor ('quantile': a
  client's record flips from -0.5 to +0.5, sensitivity 1). The 'quantile'
  part is central DP: it does not hold against the server, which sees the
  exact sum of the records (`guarantee`).

  Non-finite values: a client's non-finite scalar is encoded as if it were
  the center c_l, so every client reports every scalar and the report of any
  input, finite or not, is one of the two-point distributions: the eps-LDP
  guarantee covers all inputs, and which scalars were non-finite is not
  revealed. (The report mean's missing-report channel then carries zeros
  only.)

  State: an `LDPState` at SERVER. Measurements (an OrderedDict at SERVER):
  `center`, `radius`, float32[L], the range used in this round (public for
  'fixed', the DP estimate for 'quantile', the non-private min/max release
  for 'minmax', charged as NonPrivateDpEvent). No other client statistic is
  measured.
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
      range_mode: 'fixed', 'minmax' or 'quantile' (see the class docstring).
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
        expected_clients_per_round / 20 (Andrew et al.). Under replace-one
        adjacency each count has sensitivity 1, so the noise multiplier of
        each release is quantile_noise_stddev (tensorflow_privacy's
        QuantileEstimatorQuery reports quantile_noise_stddev / 0.5, its
        multiplier under add-or-remove-one).

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

  def audit_spec(self) -> guarantees.AuditSpec:
    """A fixed range: coordinatewise, each value encoded on its own.

    Its `value_range` is the range of a factory of one center and radius.
    """
    if self._range_mode != 'fixed':
      return guarantees.AuditSpec()
    value_range = None
    center, radius = np.ravel(self._center), np.ravel(self._radius)
    if center.size == 1 and radius.size == 1:
      value_range = (float(center[0]), float(radius[0]))
    return guarantees.AuditSpec(
        coordinatewise='single_client', value_range=value_range
    )

  @property
  def range_release_is_private(self) -> bool:
    """False for 'minmax': clients send their min/max to the server in clear."""
    return self._range_mode != 'minmax'

  @property
  def guarantee(self) -> guarantees.Guarantee:
    """Whom the state's `dp_event` protects: a client's value, replace-one."""
    return self.guarantee_of(self._epsilon, self._range_mode)

  @staticmethod
  def guarantee_of(epsilon: float, range_mode: str) -> guarantees.Guarantee:
    """The guarantee of a factory of per-value `epsilon` and `range_mode`."""
    reports = (
        f'LDP-FL: each of the d scalars a client reports per round is '
        f'eps={epsilon:g}-LDP against the server that sees every upload '
        '(a non-finite scalar is encoded as the center)'
    )
    if range_mode == 'fixed':
      range_part = 'the range is fixed and public, nothing else is released'
    elif range_mode == 'minmax':
      range_part = (
          "the range is each tensor's min/max over the clients, sent to the "
          'server in the clear: not private (NonPrivateDpEvent)'
      )
    else:
      range_part = (
          'the range is a DP quantile estimate, one Gaussian-noised count per '
          'tensor that the server sums in the clear before adding the noise: '
          'private against an analyst who sees only the released range, not '
          'against that server'
      )
    # The event composes the d reports of a client (and the range release), so
    # it protects the client's whole value. 'quantile': the server sees the
    # exact count before the noise, so nothing holds against it ('central').
    return guarantees.Guarantee(
        unit='client',
        noise='central' if range_mode == 'quantile' else 'local',
        neighboring_relation='replace_one',
        description=f'{reports}; {range_part}.',
    )

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

  def _quantile_query(self, initial_estimate: float):
    return tfp.QuantileEstimatorQuery(
        initial_estimate=initial_estimate,
        target_quantile=self._quantile_target,
        learning_rate=self._quantile_learning_rate,
        below_estimate_stddev=self._quantile_noise_stddev,
        expected_num_records=self._expected_clients,
        geometric_update=True,
    )

  def _round_event(self, num_scalars: int, num_tensors: int):
    """The round's DpEvent; call inside a tf computation (tensor fields)."""
    reports = dp_accounting.SelfComposedDpEvent(
        events.PureEpsilonDpEvent(tf.constant(self._epsilon, tf.float64)),
        tf.constant(num_scalars, tf.int64),
    )
    if self._range_mode == 'fixed':
      range_event = dp_accounting.NoOpDpEvent()
    elif self._range_mode == 'minmax':
      range_event = dp_accounting.NonPrivateDpEvent()
    else:
      noise_multiplier = (
          self._quantile_noise_stddev / _QUANTILE_COUNT_REPLACE_ONE_SENSITIVITY
      )
      range_event = dp_accounting.ComposedDpEvent(
          [
              dp_accounting.GaussianDpEvent(
                  tf.constant(noise_multiplier, tf.float64)
              )
              for _ in range(num_tensors)
          ]
      )
    return dp_accounting.ComposedDpEvent([reports, range_event])

  def create(self, value_type) -> tff.templates.AggregationProcess:
    _check_value_type(value_type)
    num_scalars = self.num_scalars(value_type)
    tensor_types = _tensor_types(value_type)
    num_tensors = len(tensor_types)
    centers = _broadcast(self._center, num_tensors, 'center')
    radii = _broadcast(self._radius, num_tensors, 'radius')
    epsilon = self._epsilon
    min_radius = self._min_radius
    range_mode = self._range_mode
    vector = tff.TensorType(np.float32, [num_tensors])
    report_mean = ReportMeanFactory().create(value_type)
    estimators = ()
    if range_mode == 'quantile':
      estimators = tuple(
          tff.aggregators.PrivateQuantileEstimationProcess(
              self._quantile_query(float(r))
          )
          for r in radii
      )

    @tff.tensorflow.computation
    def initial_range():
      return tf.constant(centers), tf.constant(radii)

    @tff.tensorflow.computation
    def round_event():
      return self._round_event(num_scalars, num_tensors).to_named_tuple()

    client_encode = _client_encode(value_type, vector, epsilon, range_mode)
    minmax_range = _minmax_range(vector, min_radius)

    @tff.federated_computation()
    def init_fn():
      center, radius = tff.federated_eval(initial_range, tff.SERVER)
      return tff.federated_zip(
          LDPState(
              center=center,
              radius=radius,
              range_estimator=tff.federated_zip(
                  tuple(e.initialize() for e in estimators)
              )
              if estimators
              else tff.federated_value((), tff.SERVER),
              report_mean=report_mean.initialize(),
              dp_event=tff.federated_eval(round_event, tff.SERVER),
              is_init_state=tff.federated_value(True, tff.SERVER),
          )
      )

    @tff.federated_computation(
        init_fn.type_signature.result,
        tff.FederatedType(value_type, tff.CLIENTS),
    )
    def next_fn(state, value):
      center, radius = state.center, state.radius
      encoded = tff.federated_map(
          client_encode,
          (
              value,
              tff.federated_broadcast(center),
              tff.federated_broadcast(radius),
          ),
      )
      if range_mode == 'fixed':
        report, sent = encoded, None
      else:
        report, sent = encoded
      mean_output = report_mean.next(state.report_mean, report)

      new_center, new_radius, range_estimator = _next_range(
          range_mode,
          minmax_range,
          estimators,
          vector,
          min_radius,
          (center, radius, state.range_estimator),
          sent,
      )

      new_state = LDPState(
          center=new_center,
          radius=new_radius,
          range_estimator=range_estimator,
          report_mean=mean_output.state,
          dp_event=tff.federated_eval(round_event, tff.SERVER),
          is_init_state=tff.federated_value(False, tff.SERVER),
      )
      measurements = collections.OrderedDict(center=center, radius=radius)
      return tff.templates.MeasuredProcessOutput(
          state=tff.federated_zip(new_state),
          result=mean_output.result,
          measurements=tff.federated_zip(measurements),
      )

    return tff.templates.AggregationProcess(init_fn, next_fn)


def _next_range(
    range_mode, minmax_range, estimators, vector, min_radius, current, sent
):
  """(center, radius, range_estimator)@SERVER of the next round, in `next`.

  `current`: this round's (center, radius, range_estimator)@SERVER; `sent`:
  what the clients' range mode sent (None for 'fixed').
  """
  center, radius, range_estimator = current
  new_center, new_radius = center, radius

  def select(l):
    return tff.tensorflow.computation(lambda v: v[l], vector)

  if range_mode == 'minmax':
    new_center, new_radius = tff.federated_map(
        minmax_range,
        (
            center,
            radius,
            tff.federated_min(sent[0]),
            tff.federated_max(sent[1]),
        ),
    )
  elif range_mode == 'quantile':
    new_states = tuple(
        e.next(range_estimator[l], tff.federated_map(select(l), sent))
        for l, e in enumerate(estimators)
    )
    range_estimator = tff.federated_zip(new_states)
    estimates = tff.federated_zip(
        tuple(e.report(s) for e, s in zip(estimators, new_states))
    )
    estimates_type = estimates.type_signature.member
    stack = tff.tensorflow.computation(
        lambda r: tf.maximum(tf.stack(_flatten(r, estimates_type)), min_radius),
        estimates_type,
    )
    new_radius = tff.federated_map(stack, estimates)
  return new_center, new_radius, range_estimator
