"""Fed-SMP's sparsified, clipped, noised secure sum: a TFF aggregation factory.

`SparsifiedSecureSumFactory` is an unweighted factory for client updates (a
structure of float tensors, one flat vector of d values): each round one
shared mask of k = round(p d) coordinates (rand_k from a public seed, or top_k
from public data), each client's kept values scaled, clipped to L2 norm C and
noised on the client, the noisy values moved by a secure sum, the sum divided
by the fixed K (Hu, Guo, Gong, "Federated Learning with Sparsified Model
Perturbation"). The round releases a Gaussian mechanism of sensitivity C and
noise multiplier sigma whatever the number of clients, and keeps its
`dp_accounting.DpEvent` in its state (`tff_priv.accounting.guarantees`).
`privacy_report` reads a run of it by every accountant, the paper's Theorem 1
beside.
"""

import collections
import logging
import math
from typing import Any, NamedTuple, Optional

from dp_accounting import dp_event
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import runtime
from tff_priv import validation
from tff_priv.accounting import calibration
from tff_priv.accounting import closed_forms
from tff_priv.accounting import guarantees
from tff_priv.accounting import reports
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.aggregators import plan as plan_lib
from tff_priv.mechanisms import smp as smp_mechanisms

MASKS = ('rand_k', 'top_k')
DEFAULT_SECURE_BOUND_STDDEVS = 6.0


class _UnusedSecureSumBoundCheck(logging.Filter):
  """Drops TF's "Object was never used" error for TFF's secure-sum bound check.

  TFF 0.87's `primitives.secure_quantized_sum` (under SecureSumFactory)
  creates `tf.debugging.assert_less_equal(lower_bound, upper_bound)` while
  tracing in graph mode and never runs it, so TensorFlow logs two
  `ERROR:tensorflow: ... Object was never used ... assert_less_equal` blocks
  each time the factory is created. The bounds here are constants with
  lower < upper (-B, B), so the check is moot; the message is TFF's, not a
  failure. Only that record is dropped.
  """

  def filter(self, record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return not (
        'Object was never used' in message
        and 'assert_less_equal/Assert/AssertGuard' in message
    )


logging.getLogger('tensorflow').addFilter(_UnusedSecureSumBoundCheck())

# SecureSumFactory quantizes every float value to 32 bits.
_SECURE_BITS_PER_VALUE = 32


class RandKState(NamedTuple):
  """Server state with mask='rand_k'.

  Attributes:
    round_num: int64 scalar, rounds completed; the round's mask is
      `rand_k_indices(round_seed(mask_seed, round_num), d, k)`.
    mask_seed: int64 [2], the public seed of the mask sequence.
    sum_state: state of the inner sum (secure or plain).
    dp_event: the DpEvent of the last round (`guarantees.extract_dp_event`).
    is_init_state: True in `initialize()`'s state (placeholder event).
  """

  round_num: Any
  mask_seed: Any
  sum_state: Any
  dp_event: Any
  is_init_state: Any

  # Its guarantee says 'central' without a secure sum; 'secure_sum' admits
  # less (no TFF wrapper's noised norm around either).
  accounting = guarantees.StateAccounting(
      factory='SparsifiedSecureSumFactory',
      relation='add_or_remove_one',
      noise='secure_sum',
  )


class TopKState(NamedTuple):
  """Server state with mask='top_k'.

  Attributes:
    mask_indices: int32 [k], the next round's mask (sorted, distinct, < d).
    mask_is_fresh: bool scalar; `_with_top_k_mask` sets it, `next` clears it
      and fails when it is not set.
    sum_state: state of the inner sum (secure or plain).
    dp_event: the DpEvent of the last round (`guarantees.extract_dp_event`).
    is_init_state: True in `initialize()`'s state (placeholder event).
  """

  mask_indices: Any
  mask_is_fresh: Any
  sum_state: Any
  dp_event: Any
  is_init_state: Any

  # Its guarantee says 'central' without a secure sum; 'secure_sum' admits
  # less (no TFF wrapper's noised norm around either).
  accounting = guarantees.StateAccounting(
      factory='SparsifiedSecureSumFactory',
      relation='add_or_remove_one',
      noise='secure_sum',
  )


def _with_top_k_mask(state: TopKState, indices: Any) -> TopKState:
  """The top_k `state` with `indices` as the next round's mask (for tests).

  Not public API: `tff_priv.learning.smp.build_fedsmp_process` sets the
  mask inside TFF each round; this Python-side copy lets the factory's tests
  drive a top_k process directly.

  Args:
    state: a `TopKState` returned by `initialize` or `next` of a process made
      by a `SparsifiedSecureSumFactory(mask='top_k')`.
    indices: k distinct coordinates of the flattened value, chosen from public
      data only (e.g. `tff_priv.mechanisms.smp.top_k_mask_from_public_update`).

  Returns:
    A copy of `state` with the sorted indices and `mask_is_fresh` set.

  Raises:
    TypeError: `state` is not a `TopKState`.
    ValueError: `indices` is not k distinct non-negative integers (the bound
      d is checked by `next`).
  """
  if not isinstance(state, TopKState):
    raise TypeError(f'state must be a TopKState, got {type(state).__name__}')
  k = int(np.asarray(state.mask_indices).shape[0])
  return state._replace(
      mask_indices=smp_mechanisms.check_mask_indices(indices, k),
      mask_is_fresh=np.bool_(True),
  )


class SparsifiedSecureSumFactory(
    plan_lib.Planned, tff.aggregators.UnweightedAggregationFactory
):
  """Fed-SMP: shared rand_k/top_k mask, clip, client noise, secure sum.

  Unweighted: every client's clipped update counts alike and the sum is divided
  by the fixed K (`expected_clients_per_round`), never by the realised count.

  Each round of the created `tff.templates.AggregationProcess`:

  * Mask (server): `mask='rand_k'` draws k distinct coordinates uniformly from
    a public seed in the state (`RandKState.mask_seed` folded with
    `round_num`, `tff_priv.mechanisms.smp.rand_k_indices`), derived once at
    the server and broadcast; `mask='top_k'` uses the indices put in the
    state before the round (`tff_priv.learning.smp.build_fedsmp_process`
    trains on public data inside TFF and does it; a round whose mask was not
    refreshed fails).
    The mask depends on public inputs only.
  * Count: the server learns n, the number of clients of the round, by a
    secure sum of ones (a plain sum when `secure=False`), and broadcasts it.
  * Client: mask -> scale by d/k (rand_k only; unbiased) -> clip the L2 norm
    of the k values to C -> add N(0, sigma^2 C^2 / n) to each of the k values
    with the client's own fresh randomness (never the public mask seed) ->
    upload (`tff_priv.mechanisms.smp.sparsify_clip_noise`).
  * Movement: `secure=True` sums the k values with
    `tff.aggregators.SecureSumFactory` (values clipped to [-B, B] and
    quantized to 32 bits, B = C + z sigma C,
    `tff_priv.mechanisms.smp.secure_sum_bound`:
    a value is altered only when its noise exceeds z = `secure_bound_stddevs`
    of its std, probability about 2e-9 per value at z = 6); `secure=False`
    uses `tff.aggregators.SumFactory`.
  * Server: (sum) / K scattered back into the d coordinates, unflattened.

  Guarantee (`guarantee`, and `dp_event` in the state after `next`): the sum
  carries N(0, sigma^2 C^2) on every kept coordinate for every n >= 1, so the
  round is `GaussianDpEvent(sigma)`: sensitivity C under add-or-remove-one
  client, client-level. The caller wraps it in its client sampling. Against an
  analyst who sees the released models that is the whole story (with sampling
  amplification); against the server, which picks the clients and, with
  `secure=True`, sees only the noisy secure sum, a client is charged each
  round it takes part in, without amplification and under replace-one
  (`Guarantee.server_view_event`). With `secure=False` the server sees each
  upload, which carries only its 1/n share of the noise: no guarantee holds
  against it (`noise='central'`). n itself is never released: it sets the
  noise shares, not the noise of the sum.

  Two assumptions, stated rather than hidden: the server is honest but
  curious (it broadcasts the true n; one that inflated n would shrink every
  noise share), and the secure sum's bound B alters a value only when its
  noise exceeds z of its std, with probability at most 2 (1 - Phi(z)) per
  value (about 2e-9 at z = 6), which the event does not add to delta.

  With compression = 1 (k = d) this is DP-FedAvg with the noise added at the
  clients: the distribution `tff.aggregators.DifferentiallyPrivateFactory.
  gaussian_fixed(sigma, K, C)` produces with the noise added at the server.

  Measurements (public only): `uploaded_bits_per_client` (int64; 32 k with
  `secure=True`, k times the value bit width otherwise).
  """

  def __init__(
      self,
      noise_multiplier: float,
      clip: float,
      compression: float,
      expected_clients_per_round: float,
      mask: str = 'rand_k',
      secure: bool = True,
      *,
      secure_bound: Optional[float] = None,
      secure_bound_stddevs: float = DEFAULT_SECURE_BOUND_STDDEVS,
      mask_seed: Optional[int] = None,
      planned_rounds: Optional[int] = None,
  ):
    """Initializes the factory; every argument is validated here.

    Args:
      noise_multiplier: sigma >= 0; the clients' sum carries noise of std
        sigma * clip on every kept coordinate.
      clip: C > 0, L2 bound of each client's k (scaled) values.
      compression: p = k / d in (0, 1];
        k = `tff_priv.mechanisms.smp.num_kept(d, p)`.
      expected_clients_per_round: K >= 1, the divisor of the sum.
      mask: 'rand_k' (uniform, unbiased with the d/k scaling) or 'top_k'
        (indices put in the state before each round by the learning
        process, from public data: `tff_priv.learning.smp`).
      secure: True moves the values with `tff.aggregators.SecureSumFactory`,
        False with `tff.aggregators.SumFactory`.
      secure_bound: B, the secure sum clips every value to [-B, B]; must be
        >= clip (a clipped value can reach C). Default
        `tff_priv.mechanisms.smp.secure_sum_bound(clip, sigma,
        secure_bound_stddevs)`.
        Only with secure=True.
      secure_bound_stddevs: z > 0 of the default bound (ignored when
        `secure_bound` is given).
      mask_seed: rand_k only: an int makes the mask sequence reproducible;
        None draws a fresh seed at every `initialize()`.
      planned_rounds: None, or T: the inner sum's state carries the plan
        and the T+1-th round is refused (`tff_priv.aggregators.plan`;
        `calibrated` sets it).

    Raises:
      TypeError: an argument has the wrong type.
      ValueError: an argument is out of range (the message names it).
    """
    noise_multiplier = validation.non_negative(
        'noise_multiplier', noise_multiplier
    )
    clip = validation.positive('clip', clip)
    compression = validation.half_open_unit('compression', compression)
    expected_clients_per_round = validation.positive(
        'expected_clients_per_round', expected_clients_per_round
    )
    if expected_clients_per_round < 1:
      raise ValueError(
          'expected_clients_per_round must be >= 1, got '
          f'{expected_clients_per_round}'
      )
    if not isinstance(mask, str):
      raise TypeError(f'mask must be a str, got {type(mask).__name__}')
    validation.one_of('mask', mask, MASKS)
    if not isinstance(secure, bool):
      raise TypeError(f'secure must be a bool, got {type(secure).__name__}')
    secure_bound_stddevs = validation.positive(
        'secure_bound_stddevs', secure_bound_stddevs
    )
    if secure_bound is not None:
      if not secure:
        raise ValueError('secure_bound applies only with secure=True')
      secure_bound = validation.positive('secure_bound', secure_bound)
      if secure_bound < clip:
        raise ValueError(
            f'secure_bound must be >= clip ({clip}): a clipped value can reach '
            f'the clip, so a smaller bound alters signal; got {secure_bound}'
        )
    elif secure:
      secure_bound = smp_mechanisms.secure_sum_bound(
          clip, noise_multiplier, secure_bound_stddevs
      )
    if mask_seed is not None:
      if mask != 'rand_k':
        raise ValueError("mask_seed applies only with mask='rand_k'")
      mask_seed = validation.int_at_least('mask_seed', mask_seed, -(2**63))

    self._planned = plan_lib.planned(planned_rounds)
    self._noise_multiplier = noise_multiplier
    self._clip = clip
    self._compression = compression
    self._expected_clients = expected_clients_per_round
    self._mask = mask
    self._secure = secure
    self._secure_bound = secure_bound
    self._mask_seed = mask_seed

  @property
  def noise_multiplier(self) -> float:
    """sigma: the noise std of the clients' sum over the clip."""
    return self._noise_multiplier

  @property
  def guarantee(self) -> guarantees.Guarantee:
    """Client-level, add-or-remove-one; see the class docstring."""
    return self.guarantee_of(self._secure)

  @staticmethod
  def guarantee_of(secure: bool) -> guarantees.Guarantee:
    """The guarantee of a factory with or without secure aggregation."""
    if secure:
      return guarantees.Guarantee(
          unit='client',
          noise='secure_sum',
          neighboring_relation='add_or_remove_one',
          description=(
              'Fed-SMP: clipped sparsified updates, Gaussian noise shared '
              'among the clients, secure sum: an analyst sees a Gaussian '
              "mechanism of the clients' sum; the server (honest but "
              'curious: it broadcasts the true client count) sees only the '
              'noisy sum and is charged per participation'
          ),
      )
    return guarantees.Guarantee(
        unit='client',
        noise='central',
        neighboring_relation='add_or_remove_one',
        description=(
            'Fed-SMP without secure aggregation: an analyst sees a Gaussian '
            "mechanism of the clients' sum; the server sees each upload, "
            'whose 1/n share of the noise protects nothing against it'
        ),
    )

  @classmethod
  def calibrated(
      cls,
      epsilon: float,
      *,
      total_rounds: int,
      population: int,
      clients_per_round: int,
      compression: float,
      delta: float = 1e-5,
      clip: float = 1.0,
      spent=None,
      **kwargs,
  ) -> 'SparsifiedSecureSumFactory':
    """A factory whose run of `total_rounds` rounds meets (eps, delta).

    For a loop that Poisson-samples each of the N clients with q = K / N
    every round and charges each round with `PrivacyLedger.record_round(
    state, sampling_probability=q)`: sigma is calibrated for T sampled
    Gaussians. Round T+1 is refused (`plan`). `spent`: a `PrivacyLedger` of
    earlier rounds, met together with the `total_rounds` rounds added (a
    plan extended). `kwargs`: the constructor's other arguments (`mask`,
    `secure`, ...).
    """
    population, k = validation.population_and_k(population, clients_per_round)
    z = calibration.calibrate_noise_multiplier(
        epsilon,
        delta,
        total_rounds,
        sampling_probability=k / population,
        spent=calibration.Spent.of(spent),
    )
    return cls(z, clip, compression, k, planned_rounds=total_rounds, **kwargs)

  @property
  def clip(self) -> float:
    """C, the L2 sensitivity of the sum to one client."""
    return self._clip

  def audit_spec(self) -> guarantees.AuditSpec:
    """Its public clip (one trial per call)."""
    return guarantees.AuditSpec(clip=self._clip)

  @property
  def expected_clients_per_round(self) -> float:
    """K, the divisor of the sum."""
    return self._expected_clients

  @property
  def compression(self) -> float:
    return self._compression

  @property
  def mask(self) -> str:
    return self._mask

  @property
  def secure(self) -> bool:
    return self._secure

  @property
  def secure_bound(self) -> Optional[float]:
    """B of the secure sum (None when secure=False)."""
    return self._secure_bound

  def create(self, value_type) -> tff.templates.AggregationProcess:
    """Builds the process for clients' values of `value_type`.

    Args:
      value_type: a `tff.TensorType` or a (nested) structure of them, all of
        the same float dtype and fully defined shapes.

    Returns:
      A `tff.templates.AggregationProcess`: `initialize() -> RandKState |
      TopKState`, `next(state, value@CLIENTS) -> (state, mean@SERVER,
      measurements@SERVER)` with the mean of the same type as the value.

    Raises:
      TypeError: `value_type` is not such a structure.
      RuntimeError: secure=True in tff_priv.runtime's 'native' context, which
        has no secure-sum intrinsics.
    """
    dtype, specs, dimension = _check_value_type(value_type)
    if self._secure:
      runtime.check_secure_intrinsics('SparsifiedSecureSumFactory(secure=True)')
    k = smp_mechanisms.num_kept(dimension, self._compression)
    # rand_k with k == d keeps every coordinate in order: the mask, the gather
    # and the scatter are identities and are skipped (top_k always sends its
    # mask, which `next` checks).
    full = k == dimension and self._mask == 'rand_k'
    scale = (
        smp_mechanisms.rand_k_scale(dimension, k)
        if self._mask == 'rand_k'
        else 1.0
    )
    clip = self._clip
    expected_clients = self._expected_clients
    noise_multiplier = self._noise_multiplier
    secure = self._secure
    bound = self._secure_bound
    tf_dtype = tf.as_dtype(dtype)
    upload_type, inner, uploaded_bits = _inner_sum(
        secure, bound, full, specs, dtype, k, self._planned
    )
    indices_type = tff.TensorType(np.int32, [k])

    mask = _mask_computations(
        self._mask, self._mask_seed, dimension, k, indices_type
    )
    client_upload = _client_upload(
        value_type,
        specs,
        None if full else indices_type,
        scale,
        clip,
        noise_multiplier,
        tf_dtype,
    )
    round_event = _round_event(noise_multiplier)
    server_result = _server_result(
        upload_type,
        specs,
        None if full else indices_type,
        dimension,
        noise_multiplier * clip,
        expected_clients,
        tf_dtype,
    )

    return _process(
        value_type,
        self._mask,
        mask,
        inner,
        client_upload,
        round_event,
        server_result,
        uploaded_bits,
        full=full,
        secure=secure,
    )


def _process(
    value_type,
    mask_kind,
    mask,
    inner,
    client_upload,
    round_event,
    server_result,
    uploaded_bits,
    *,
    full,
    secure,
) -> tff.templates.AggregationProcess:
  """The process `create` returns, from the round's computations."""

  @tff.tensorflow.computation
  def server_measurements():
    return collections.OrderedDict(
        uploaded_bits_per_client=tf.constant(uploaded_bits, tf.int64),
    )

  def make_state(mask_state, sum_state, event, is_init):
    cls = RandKState if mask_kind == 'rand_k' else TopKState
    return tff.federated_zip(
        cls(
            mask_state[0],
            mask_state[1],
            sum_state,
            event,
            tff.federated_value(is_init, tff.SERVER),
        )
    )

  @tff.federated_computation
  def init_fn():
    mask_state = tff.federated_eval(mask.initial_state, tff.SERVER)
    return make_state(
        mask_state,
        inner.initialize(),
        tff.federated_eval(round_event, tff.SERVER),
        True,
    )

  @tff.federated_computation(
      init_fn.type_signature.result,
      tff.FederatedType(value_type, tff.CLIENTS),
  )
  def next_fn(state, value):
    indices, new_mask_state = _mask_step(mask_kind, mask, state, full)
    num_clients = _count_clients(secure)
    clients_num_clients = tff.federated_broadcast(num_clients)
    if full:
      uploads = tff.federated_map(client_upload, (value, clients_num_clients))
      summed = inner.next(state.sum_state, uploads)
      result = tff.federated_map(server_result, (summed.result, num_clients))
    else:
      uploads = tff.federated_map(
          client_upload,
          (value, tff.federated_broadcast(indices), clients_num_clients),
      )
      summed = inner.next(state.sum_state, uploads)
      result = tff.federated_map(
          server_result, (summed.result, indices, num_clients)
      )
    # The inner sum's own measurements (SecureSumFactory's clipped counts)
    # are exact client statistics: not released.
    return tff.templates.MeasuredProcessOutput(
        state=make_state(
            new_mask_state,
            summed.state,
            tff.federated_eval(round_event, tff.SERVER),
            False,
        ),
        result=result,
        measurements=tff.federated_eval(server_measurements, tff.SERVER),
    )

  return tff.templates.AggregationProcess(init_fn, next_fn)


def _mask_step(mask_kind, mask, state, full):
  """(this round's indices@SERVER or None, the next mask state), in `next`."""
  if mask_kind == 'rand_k':
    indices = (
        None
        if full
        else tff.federated_map(
            mask.round_indices, (state.round_num, state.mask_seed)
        )
    )
    return indices, (
        tff.federated_map(mask.next_state, state.round_num),
        state.mask_seed,
    )
  indices = tff.federated_map(
      mask.round_indices, (state.mask_indices, state.mask_is_fresh)
  )
  return indices, (
      state.mask_indices,
      tff.federated_eval(mask.next_state, tff.SERVER),
  )


def _count_clients(secure):
  """The round's number of clients@SERVER (a secure sum of ones if secure)."""
  ones = tff.federated_value(1, tff.CLIENTS)
  if secure:
    return tff.federated_secure_sum_bitwidth(ones, bitwidth=1)
  return tff.federated_sum(ones)


def _inner_sum(secure, bound, full, specs, dtype, k, planned_rounds):
  """(upload type, the inner sum's process, bits a client uploads)."""
  # k == d (rand_k) uploads the value structure itself (no flat copy), typed
  # with Python containers: SecureSumFactory cannot trace a bare StructType.
  if full:
    upload_type = tff.types.to_type(
        tf.nest.map_structure(
            lambda s: tff.TensorType(s.dtype.as_numpy_dtype, s.shape), specs
        )
    )
  else:
    upload_type = tff.TensorType(dtype, [k])
  if secure:
    inner_factory = tff.aggregators.SecureSumFactory(
        upper_bound_threshold=float(bound), lower_bound_threshold=-float(bound)
    )
    bits_per_value = _SECURE_BITS_PER_VALUE
  else:
    inner_factory = tff.aggregators.SumFactory()
    bits_per_value = 8 * np.dtype(dtype).itemsize
  uploaded_bits = np.int64(bits_per_value) * np.int64(k)
  if planned_rounds is not None:
    inner_factory = plan_lib.planned_factory(
        inner_factory, planned_rounds, 'SparsifiedSecureSumFactory'
    )
  return upload_type, inner_factory.create(upload_type), uploaded_bits


class _Mask(NamedTuple):
  """The server's mask computations.

  rand_k: initial_state() -> (round_num, seed), round_indices(round_num,
  seed), next_state(round_num). top_k: initial_state() -> (placeholder
  indices, not fresh), round_indices(indices, is_fresh) (checked),
  next_state() -> not fresh.
  """

  initial_state: Any
  round_indices: Any
  next_state: Any


def _mask_computations(mask, mask_seed, dimension, k, indices_type) -> _Mask:
  """The mask's TF computations (see `_Mask`)."""
  if mask == 'rand_k':

    @tff.tensorflow.computation
    def initial_mask_state():
      if mask_seed is None:
        seed = tf.random.uniform(
            [2], minval=tf.int64.min, maxval=tf.int64.max, dtype=tf.int64
        )
      else:
        seed = tf.constant([mask_seed, 0], tf.int64)
      return tf.constant(0, tf.int64), seed

    @tff.tensorflow.computation(
        tff.TensorType(np.int64), tff.TensorType(np.int64, [2])
    )
    def round_indices(round_num, seed):
      return smp_mechanisms.rand_k_indices(
          smp_mechanisms.round_seed(seed, round_num), dimension, k
      )

    @tff.tensorflow.computation(tff.TensorType(np.int64))
    def next_round_num(round_num):
      return round_num + 1

    return _Mask(initial_mask_state, round_indices, next_round_num)

  @tff.tensorflow.computation
  def initial_top_k_state():
    # A placeholder mask, flagged as not fresh: `next` refuses it.
    return tf.range(k, dtype=tf.int32), tf.constant(False)

  @tff.tensorflow.computation(indices_type, tff.TensorType(np.bool_))
  def checked_indices(indices, is_fresh):
    checks = [
        tf.debugging.Assert(
            is_fresh,
            [
                'top_k mask not refreshed for this round: the learning '
                'process must set it from public data before every next() '
                '(tff_priv.learning.smp)'
            ],
        ),
        tf.debugging.Assert(
            tf.reduce_all(indices[1:] > indices[:-1]),
            ['top_k mask indices must be sorted and distinct'],
        ),
        tf.debugging.Assert(
            tf.logical_and(
                tf.reduce_min(indices) >= 0,
                tf.reduce_max(indices) < dimension,
            ),
            ['top_k mask indices must be in [0, d)', dimension],
        ),
    ]
    with tf.control_dependencies(checks):
      return tf.identity(indices)

  @tff.tensorflow.computation
  def not_fresh():
    return tf.constant(False)

  return _Mask(initial_top_k_state, checked_indices, not_fresh)


def _client_upload(
    value_type, specs, indices_type, scale, clip, noise_multiplier, tf_dtype
):
  """The client's clipped, sparsified, noised upload.

  `indices_type` None: k == d under rand_k, the value itself.
  """

  def noise_share(num_clients):
    return tf.cast(
        smp_mechanisms.client_noise_stddev(noise_multiplier, clip, num_clients),
        tf_dtype,
    )

  if indices_type is None:

    @tff.tensorflow.computation(value_type, np.int32)
    def client_upload(value, num_clients):
      return smp_mechanisms.sparsify_clip_noise(
          _as_structure(value, specs),
          None,
          scale=1.0,
          clip=clip,
          noise_stddev=noise_share(num_clients),
      )

    return client_upload

  @tff.tensorflow.computation(value_type, indices_type, np.int32)
  def client_sparse_upload(value, indices, num_clients):
    return smp_mechanisms.sparsify_clip_noise(
        _as_structure(value, specs),
        indices,
        scale=scale,
        clip=clip,
        noise_stddev=noise_share(num_clients),
    )

  return client_sparse_upload


def _round_event(noise_multiplier):
  """The round's DpEvent, as the state carries it."""

  @tff.tensorflow.computation
  def round_event():
    return dp_event.GaussianDpEvent(
        tf.constant(noise_multiplier, tf.float64)
    ).to_named_tuple()

  return round_event


def _server_result(
    upload_type,
    specs,
    indices_type,
    dimension,
    noise_stddev,
    expected_clients,
    tf_dtype,
):
  """The mean the server releases from the summed uploads.

  `indices_type` None: k == d under rand_k.
  """

  def empty_round_noise(num_clients, shape):
    # No client reported: the server draws the sum's noise itself, so the
    # release has the same distribution for every n (the round still
    # carries N(0, sigma^2 C^2) and nothing depends on client data).
    stddev = tf.constant(noise_stddev, tf_dtype)
    noise = tf.random.normal(shape, stddev=stddev, dtype=tf_dtype)
    return tf.where(num_clients > 0, tf.zeros_like(noise), noise)

  if indices_type is None:

    @tff.tensorflow.computation(upload_type, np.int32)
    def server_result(summed, num_clients):
      return tf.nest.map_structure(
          lambda t: (t + empty_round_noise(num_clients, tf.shape(t)))
          / tf.constant(expected_clients, tf_dtype),
          _as_structure(summed, specs),
      )

    return server_result

  @tff.tensorflow.computation(upload_type, indices_type, np.int32)
  def server_sparse_result(summed, indices, num_clients):
    summed = summed + empty_round_noise(num_clients, tf.shape(summed))
    mean = summed / tf.constant(expected_clients, tf_dtype)
    return smp_mechanisms.unflatten(
        smp_mechanisms.densify(mean, indices, dimension), specs
    )

  return server_sparse_result


def _as_structure(value: Any, specs: Any) -> Any:
  """`value` (as TFF passes it to a TF computation) in the structure of `specs`.

  TFF passes a struct without a Python container as a `tff.structure.Struct`,
  which `tf.nest` treats as a leaf; this gives every TF computation here the
  same `tf.nest` structure and order, so that the clients' flattening and the
  server's unflattening agree.
  """
  if isinstance(value, tff.structure.Struct):
    leaves = tff.structure.flatten(value)
  else:
    leaves = tf.nest.flatten(value)
  return tf.nest.pack_sequence_as(specs, leaves)


def _check_value_type(value_type) -> tuple[Any, Any, int]:
  """(numpy dtype, structure of tf.TensorSpec, d) of a valid value type."""
  value_type = tff.types.to_type(value_type)
  if not isinstance(value_type, (tff.TensorType, tff.StructType)):
    raise TypeError(
        'value_type must be a tff.TensorType or a structure of them, got '
        f'{value_type}'
    )
  if not tff.types.is_structure_of_floats(value_type):
    raise TypeError(
        f'value_type must be a structure of float tensors, got {value_type}'
    )
  try:
    specs = tff.types.type_to_tf_tensor_specs(value_type)
  except (TypeError, ValueError) as e:
    # TFF 0.87 cannot convert a named StructType without a Python container.
    raise TypeError(
        'value_type must be a tff.TensorType or a structure of them with '
        f'Python containers (e.g. tff.types.to_type of a list or an '
        f'OrderedDict), got {value_type}'
    ) from e
  leaves = tf.nest.flatten(specs)
  if not leaves:
    raise TypeError('value_type must contain at least one tensor')
  dtypes = {leaf.dtype for leaf in leaves}
  if len(dtypes) != 1:
    raise TypeError(
        'value_type must have a single float dtype (one flat vector), got '
        f'{sorted(d.name for d in dtypes)}'
    )
  if not all(leaf.shape.is_fully_defined() for leaf in leaves):
    raise TypeError(
        f'value_type must have fully defined shapes, got {value_type}'
    )
  dimension = sum(int(leaf.shape.num_elements()) for leaf in leaves)
  if dimension < 1:
    raise TypeError(f'value_type has no elements: {value_type}')
  return dtypes.pop().as_numpy_dtype, specs, dimension


def _theorem1_for_target(epsilon, delta, q, rounds) -> dict:
  check = closed_forms.fedsmp_theorem1_truth(epsilon, delta, q, rounds)
  return {
      'formula': 'Fed-SMP Theorem 1',
      'paper_noise_multiplier': check.noise_multiplier,
      'paper_claimed_epsilon': epsilon,
      'true_rdp_epsilon': check.true_epsilon,
      'holds': check.holds,
  }


def _theorem1_for_noise(
    noise_multiplier, rdp_epsilon, delta, q, rounds
) -> dict:
  del noise_multiplier  # The theorem is read at the accountant's eps.
  return {
      'formula': 'Fed-SMP Theorem 1 (sufficient condition)',
      'paper_noise_multiplier_needed_for_rdp_epsilon': (
          closed_forms.fedsmp_theorem1_noise_multiplier(
              rdp_epsilon, delta, q, rounds
          )
          if 0 < rdp_epsilon < math.inf
          else None
      ),
  }


def privacy_report(
    params: dict[str, Any], rounds: int, sampling: sampling_lib.Sampling
) -> dict:
  """The sampled Gaussian's eps by every accountant, Fed-SMP Theorem 1 beside.

  For a target eps: the noise the accountants need, and the theorem's noise
  multiplier with what it really gives (`closed_forms.fedsmp_theorem1_truth`);
  for a noise level: the multiplier the theorem would need for the
  accountant's eps. The report carries the training program's name 'smp'.

  Args:
    params: by name, `delta` and any of `epsilon` and `noise_multiplier`
      (absent: not given; `delta` given).
    rounds: T >= 1.
    sampling: the rounds' client `Sampling`.
  """
  return reports.gaussian_mechanism_report(
      'smp',
      rounds=rounds,
      claim_for_target=_theorem1_for_target,
      claim_for_noise=_theorem1_for_noise,
      sampling=sampling,
      **params,
  )
