"""Fed-SMP's sparsified, clipped, noised secure sum as a TFF aggregation factory.

`SparsifiedSecureSumFactory` aggregates client updates (a structure of float
tensors, treated as one flat vector of d values) the way Fed-SMP (Hu, Guo,
Gong; ../shared/notes/mechanisms.md section 3) does, with k = round(p d) kept
coordinates, noise multiplier sigma, clip C and K expected clients per round:

* Server, each round: one mask of exactly k coordinates, identical for every
  client of the round, fresh every round, never derived from private data.
  - mask='rand_k': a uniform k-subset drawn from a public seed in the server
    state (`RandKState.mask_seed`, folded with `round_num`, so it changes every
    round; `sparsify.rand_k_indices`). The server derives the k indices once
    and broadcasts them with the round. A deployment may broadcast the 16-byte
    seed instead: the op is stateless, so clients calling
    `sparsify.rand_k_indices` on it get the same indices; in simulation,
    deriving them once at the server is K times cheaper.
  - mask='top_k': the indices the caller put in the state with
    `with_top_k_mask` before the round. A round whose mask was not refreshed
    fails, as does a mask with indices outside [0, d). In a `tff.learning`
    process whose `model_aggregator` is this factory, a Python loop does, each
    round (tests/aggregators/sparsified_secure_sum_test.py shows it):

        theta = state.global_model_weights.trainable
        theta_pub = <train from theta on public data, clients' optimizer and
                     local period>
        mask = sparsify.top_k_mask_from_public_update(
            theta_pub, theta, len(state.aggregator.mask_indices))
        state = state._replace(
            aggregator=with_top_k_mask(state.aggregator, mask))
        output = process.next(state, client_data)

    `tff_priv.learning.fedsmp.build_fedsmp_process` does the public
    training inside TFF, in the learning process itself.
* Client: mask -> scale by d/k (rand_k only) -> clip the L2 norm of the k
  values to C -> add N(0, sigma^2 C^2 / K) to each of the k values -> upload
  the k values (`tff_priv.mechanisms.sparsify.sparsify_clip_noise`). The noise
  uses the client's own fresh randomness (TF's OS-seeded generator), never the
  public mask seed, which the server knows and could subtract.
* Movement: secure=True sums the k values with `tff.aggregators.SecureSumFactory`
  (TFF's `federated_secure_sum_bitwidth`; floats are clipped to [-B, B] and
  quantized to 32 bits), B = C + z sigma C / sqrt(K)
  (`sparsify.secure_sum_bound`, z = `secure_bound_stddevs`); the counts in
  the measurements are securely summed too, so no client value and no client
  count moves by a plain sum. secure=False: `tff.aggregators.SumFactory`.
* Server: (sum) / K scattered back into the d coordinates (zeros elsewhere),
  unflattened into the value structure. The division is by the fixed K, not by
  the number of reports.

Guarantee: with n = K reporting clients the released sum is a Gaussian
mechanism with sensitivity C and noise std sigma C on every kept coordinate:
(alpha, alpha / (2 sigma^2))-RDP per round (k and d do not enter). With n
clients reporting the noise std is sigma C sqrt(n / K): the measurement
`achieved_noise_multiplier` = sigma sqrt(n / K) is what a ledger must charge
(with sampling rate and rounds; this module does no accounting). Two caveats
of the secure movement, both reported rather than hidden: values clipped to
[-B, B] are altered per client after noising, which the Gaussian analysis does
not cover (`secure_sum_clipped_fraction` counts them; at z = 6 a value is
clipped with probability about 2e-9 when its signal part is within C); the
32-bit quantization is deterministic rounding of each value by at most
B / (2^32 - 1).

With compression = 1 (k = d) this is DP-FedAvg with the noise added at the
clients: mean of K clipped updates plus N(0, sigma^2 C^2 / K^2) per coordinate,
the distribution `tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed`
(sigma, K, C) produces with the noise added at the server.

Measurements of each round (server): `achieved_noise_multiplier` (float64),
`num_reporting_clients` (int32), `uploaded_bits_per_client` (int64: 32 k with
secure=True, k times the value bit width otherwise; DP-FedAvg uploads 32 d),
`secure_sum_clipped_fraction` (float32: clipped values / (n k); 0 when
secure=False) and `sum` (the inner sum factory's own measurements).
"""

import collections
from typing import Any, NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.mechanisms import sparsify

MASKS = ('rand_k', 'top_k')
DEFAULT_SECURE_BOUND_STDDEVS = 6.0
# SecureSumFactory quantizes every float value to 32 bits.
_SECURE_BITS_PER_VALUE = 32


class RandKState(NamedTuple):
  """Server state with mask='rand_k'.

  Attributes:
    round_num: int64 scalar, rounds completed; the round's mask is
      `rand_k_indices(round_seed(mask_seed, round_num), d, k)`.
    mask_seed: int64 [2], the public seed of the mask sequence.
    sum_state: state of the inner sum (secure or plain).
  """

  round_num: Any
  mask_seed: Any
  sum_state: Any


class TopKState(NamedTuple):
  """Server state with mask='top_k'.

  Attributes:
    mask_indices: int32 [k], the next round's mask (sorted, distinct, < d).
    mask_is_fresh: bool scalar; `with_top_k_mask` sets it, `next` clears it
      and fails when it is not set.
    sum_state: state of the inner sum (secure or plain).
  """

  mask_indices: Any
  mask_is_fresh: Any
  sum_state: Any


def with_top_k_mask(state: TopKState, indices: Any) -> TopKState:
  """The top_k `state` with `indices` as the next round's mask.

  Args:
    state: a `TopKState` returned by `initialize` or `next` of a process made
      by a `SparsifiedSecureSumFactory(mask='top_k')`.
    indices: k distinct coordinates of the flattened value, chosen from public
      data only (e.g. `sparsify.top_k_mask_from_public_update`).

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
      mask_indices=sparsify.check_mask_indices(indices, k),
      mask_is_fresh=np.bool_(True),
  )


class SparsifiedSecureSumFactory(tff.aggregators.UnweightedAggregationFactory):
  """Fed-SMP aggregation: shared rand_k/top_k mask, clip, client noise, secure sum.

  See the module docstring for the algorithm, the guarantee and the
  measurements. The created process is a `tff.templates.AggregationProcess`
  usable as the `model_aggregator` of `tff.learning` algorithms.
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
  ):
    """Initializes the factory; every argument is validated here.

    Args:
      noise_multiplier: sigma >= 0; the sum over K clients carries noise of std
        sigma * clip on every kept coordinate.
      clip: C > 0, L2 bound of each client's k (scaled) values.
      compression: p = k / d in (0, 1]; k = `sparsify.num_kept(d, p)`.
      expected_clients_per_round: K >= 1, the number of clients the noise is
        calibrated for and the divisor of the sum.
      mask: 'rand_k' (uniform, unbiased with the d/k scaling) or 'top_k'
        (indices supplied each round with `with_top_k_mask`).
      secure: True moves the values with `tff.aggregators.SecureSumFactory`,
        False with `tff.aggregators.SumFactory`.
      secure_bound: B, the secure sum clips every value to [-B, B]; must be
        >= clip (a clipped value can reach C). Default
        `sparsify.secure_sum_bound(clip, sigma, K, secure_bound_stddevs)`.
        Only with secure=True.
      secure_bound_stddevs: z > 0 of the default bound (ignored when
        `secure_bound` is given).
      mask_seed: rand_k only: an int makes the mask sequence reproducible;
        None draws a fresh seed at every `initialize()`.

    Raises:
      TypeError: an argument has the wrong type.
      ValueError: an argument is out of range (the message names it).
    """
    noise_multiplier = validation.non_negative('noise_multiplier', noise_multiplier)
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
      secure_bound = sparsify.secure_sum_bound(
          clip, noise_multiplier, expected_clients_per_round,
          secure_bound_stddevs,
      )
    if mask_seed is not None:
      if mask != 'rand_k':
        raise ValueError("mask_seed applies only with mask='rand_k'")
      mask_seed = validation.int_at_least('mask_seed', mask_seed, -(2**63))

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
    """Nominal sigma (what the round achieves when exactly K clients report)."""
    return self._noise_multiplier

  @property
  def clip(self) -> float:
    """C, the L2 sensitivity of the sum to one client."""
    return self._clip

  @property
  def expected_clients_per_round(self) -> float:
    """K, the number of clients the noise is calibrated for."""
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
    """
    dtype, specs, dimension = _check_value_type(value_type)
    k = sparsify.num_kept(dimension, self._compression)
    # rand_k with k == d keeps every coordinate in order: the mask, the gather
    # and the scatter are identities and are skipped (top_k always sends its
    # mask, which `next` checks).
    full = k == dimension and self._mask == 'rand_k'
    scale = sparsify.rand_k_scale(dimension, k) if self._mask == 'rand_k' else 1.0
    noise_stddev = sparsify.client_noise_stddev(
        self._noise_multiplier, self._clip, self._expected_clients
    )
    clip = self._clip
    expected_clients = self._expected_clients
    noise_multiplier = self._noise_multiplier
    secure = self._secure
    bound = self._secure_bound
    tf_dtype = tf.as_dtype(dtype)
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
    indices_type = tff.TensorType(np.int32, [k])
    upload_specs = tff.types.type_to_tf_tensor_specs(upload_type)
    if secure:
      inner_factory = tff.aggregators.SecureSumFactory(
          upper_bound_threshold=float(bound), lower_bound_threshold=-float(bound)
      )
      bits_per_value = _SECURE_BITS_PER_VALUE
    else:
      inner_factory = tff.aggregators.SumFactory()
      bits_per_value = 8 * np.dtype(dtype).itemsize
    inner = inner_factory.create(upload_type)
    uploaded_bits = np.int64(bits_per_value) * np.int64(k)

    # ---- Mask (server). ----
    if self._mask == 'rand_k':
      mask_seed = self._mask_seed

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
        return sparsify.rand_k_indices(
            sparsify.round_seed(seed, round_num), dimension, k
        )

      @tff.tensorflow.computation(tff.TensorType(np.int64))
      def next_round_num(round_num):
        return round_num + 1

    else:

      @tff.tensorflow.computation
      def initial_mask_state():
        # A placeholder mask, flagged as not fresh: `next` refuses it.
        return tf.range(k, dtype=tf.int32), tf.constant(False)

      @tff.tensorflow.computation(indices_type, tff.TensorType(np.bool_))
      def round_indices(indices, is_fresh):
        checks = [
            tf.debugging.Assert(
                is_fresh,
                ['top_k mask not refreshed for this round: set it with '
                 'with_top_k_mask(state, indices) before every next()'],
            ),
            tf.debugging.Assert(
                tf.reduce_all(indices[1:] > indices[:-1]),
                ['top_k mask indices must be sorted and distinct']),
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

    # ---- Client. ----
    if full:

      @tff.tensorflow.computation(value_type)
      def client_upload(value):
        return sparsify.sparsify_clip_noise(
            _as_structure(value, specs), None, scale=1.0, clip=clip,
            noise_stddev=noise_stddev,
        )

    else:

      @tff.tensorflow.computation(value_type, indices_type)
      def client_upload(value, indices):
        return sparsify.sparsify_clip_noise(
            _as_structure(value, specs), indices, scale=scale, clip=clip,
            noise_stddev=noise_stddev,
        )

    if secure:
      count_bits = max(1, k.bit_length())

      @tff.tensorflow.computation(upload_type)
      def count_beyond_bound(upload):
        return tf.add_n([
            tf.reduce_sum(
                tf.cast(tf.abs(t) > tf.constant(bound, tf_dtype), tf.int32)
            )
            for t in tf.nest.flatten(_as_structure(upload, upload_specs))
        ])

    # ---- Server. ----
    if full:

      @tff.tensorflow.computation(upload_type)
      def server_result(summed):
        return tf.nest.map_structure(
            lambda t: t / tf.constant(expected_clients, tf_dtype),
            _as_structure(summed, specs),
        )

    else:

      @tff.tensorflow.computation(upload_type, indices_type)
      def server_result(summed, indices):
        mean = summed / tf.constant(expected_clients, tf_dtype)
        return sparsify.unflatten(
            sparsify.densify(mean, indices, dimension), specs
        )

    @tff.tensorflow.computation(
        tff.TensorType(np.int32), tff.TensorType(np.int32)
    )
    def server_measurements(num_reporting, num_clipped):
      num_values = tf.cast(num_reporting, tf.float32) * tf.constant(
          k, tf.float32
      )
      return collections.OrderedDict(
          achieved_noise_multiplier=sparsify.achieved_noise_multiplier(
              noise_multiplier, num_reporting, expected_clients
          ),
          num_reporting_clients=num_reporting,
          uploaded_bits_per_client=tf.constant(uploaded_bits, tf.int64),
          secure_sum_clipped_fraction=tf.math.divide_no_nan(
              tf.cast(num_clipped, tf.float32), num_values
          ),
      )

    @tff.federated_computation
    def init_fn():
      mask_state = tff.federated_eval(initial_mask_state, tff.SERVER)
      if self._mask == 'rand_k':
        state = RandKState(mask_state[0], mask_state[1], inner.initialize())
      else:
        state = TopKState(mask_state[0], mask_state[1], inner.initialize())
      return tff.federated_zip(state)

    @tff.federated_computation(
        init_fn.type_signature.result,
        tff.FederatedType(value_type, tff.CLIENTS),
    )
    def next_fn(state, value):
      if self._mask == 'rand_k':
        if not full:
          indices = tff.federated_map(
              round_indices, (state.round_num, state.mask_seed)
          )
        new_mask_state = (
            tff.federated_map(next_round_num, state.round_num),
            state.mask_seed,
        )
      else:
        indices = tff.federated_map(
            round_indices, (state.mask_indices, state.mask_is_fresh)
        )
        new_mask_state = (state.mask_indices, tff.federated_eval(not_fresh, tff.SERVER))

      if full:
        uploads = tff.federated_map(client_upload, value)
        summed = inner.next(state.sum_state, uploads)
        result = tff.federated_map(server_result, summed.result)
      else:
        uploads = tff.federated_map(
            client_upload, (value, tff.federated_broadcast(indices))
        )
        summed = inner.next(state.sum_state, uploads)
        result = tff.federated_map(server_result, (summed.result, indices))

      ones = tff.federated_value(1, tff.CLIENTS)
      if secure:
        num_reporting = tff.federated_secure_sum_bitwidth(ones, bitwidth=1)
        num_clipped = tff.federated_secure_sum_bitwidth(
            tff.federated_map(count_beyond_bound, uploads), bitwidth=count_bits
        )
      else:
        num_reporting = tff.federated_sum(ones)
        num_clipped = tff.federated_value(0, tff.SERVER)
      round_measurements = tff.federated_map(
          server_measurements, (num_reporting, num_clipped)
      )
      measurements = tff.federated_zip(
          collections.OrderedDict(
              achieved_noise_multiplier=round_measurements.achieved_noise_multiplier,
              num_reporting_clients=round_measurements.num_reporting_clients,
              uploaded_bits_per_client=round_measurements.uploaded_bits_per_client,
              secure_sum_clipped_fraction=(
                  round_measurements.secure_sum_clipped_fraction
              ),
              sum=summed.measurements,
          )
      )
      if self._mask == 'rand_k':
        new_state = RandKState(*new_mask_state, summed.state)
      else:
        new_state = TopKState(*new_mask_state, summed.state)
      return tff.templates.MeasuredProcessOutput(
          state=tff.federated_zip(new_state),
          result=result,
          measurements=measurements,
      )

    return tff.templates.AggregationProcess(init_fn, next_fn)


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
    raise TypeError(f'value_type must have fully defined shapes, got {value_type}')
  dimension = sum(int(leaf.shape.num_elements()) for leaf in leaves)
  if dimension < 1:
    raise TypeError(f'value_type has no elements: {value_type}')
  return dtypes.pop().as_numpy_dtype, specs, dimension
