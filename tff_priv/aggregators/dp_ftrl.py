"""DP-FTRL: TFF's tree-aggregation DP factory, restarted, with its DpEvent.

Kairouz, McMahan, Song, Thakkar, Thakurta, Xu, "Practical and Private (Deep)
Learning without Sampling or Shuffling" (ICML 2021). TFF's tree aggregation
never restarts its tree and reports `UnsupportedDpEvent`; `TreeRestartFactory`
restarts it, seeds every tree secretly and charges each tree whole:
client-level DP under the zero-out relation when every client takes part at
most once per tree, against an analyst who sees the released models only.
"""

import math
import secrets
from typing import Optional

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_priv import validation
from tff_priv.accounting import calibration
from tff_priv.accounting import events
from tff_priv.accounting import guarantees
from tff_priv.accounting import target_noise
from tff_priv.aggregators import correlated_noise
from tff_priv.aggregators import plan as plan_lib
from tff_priv.mechanisms import clipping

GUARANTEE = guarantees.Guarantee(
    unit='client',
    noise='central',
    neighboring_relation='replace_special',
    description=(
        'client-level DP of each tree (each client at most once per tree), '
        'its update replaced by zero; the server sees the clipped updates'
    ),
)


# A TreeRestartFactory process's state; its `noise` holds the tree (the state
# of TFF's tree-aggregation factory).
TreeState = correlated_noise.stream_state_class(
    'TreeState',
    __name__,
    accounting=guarantees.StateAccounting(
        factory='TreeRestartFactory',
        relation=GUARANTEE.neighboring_relation,
        noise=GUARANTEE.noise,
        sampling='schedule',
        sampler='StreamSampler',
        schedule='each client at most once per tree',
    ),
    legacy_noise_key='tree',
)


def tree_noise(
    epsilon: float,
    delta: float,
    total_rounds: int,
    rounds_per_tree: int,
    *,
    trees_left: Optional[int] = None,
    spent=None,
) -> float:
  """z for which ceil(T / R) trees (or `trees_left`) meet (eps, delta).

  Each tree is counted by dp_accounting as an unsampled Gaussian of
  multiplier z / sqrt(S) (`events.tree_sensitivity_squared`); `spent`
  (`calibration.Spent`): the charges already made, met together.
  """
  sensitivity = math.sqrt(events.tree_sensitivity_squared(rounds_per_tree))
  return target_noise.noise_for_target(
      epsilon,
      delta,
      trees_left or math.ceil(total_rounds / rounds_per_tree),
      sensitivity=sensitivity,
      spent=spent,
  )


def tree_event(noise_multiplier: float, rounds_per_tree: int):
  """The DpEvent of one tree of `rounds_per_tree` rounds."""
  return dp_accounting.SingleEpochTreeAggregationDpEvent(
      noise_multiplier, rounds_per_tree
  )


class TreeRestartFactory(
    plan_lib.Planned, tff.aggregators.UnweightedAggregationFactory
):
  """TFF's tree-aggregation DP factory restarted every `rounds_per_tree` rounds.

  TFF's `DifferentiallyPrivateFactory.tree_aggregation` clips each client's
  update to C, sums, and adds the noise of a binary tree over the rounds (each
  node N(0, (z C)^2)), released as the residual of the cumulative noise, so that
  the model after round t holds the sum of the true updates plus one tree prefix
  sum of noise. TFF's factory never restarts its tree and its state reports
  `UnsupportedDpEvent`: it does not say what it guarantees.

  `TreeRestartFactory` wraps it and owns the guarantee:

  * The tree restarts (the inner state is replaced by a fresh `initialize()`)
    every `rounds_per_tree` rounds, and at the first round after
    `force_restart` (the training program sets it when it resumes from a
    checkpoint, so that rounds run again are never released with the noise they
    were released with before: the difference of two such releases would be
    noise-free).
  * Each tree's noise seed is secret. TFF leaves the tree's seed to
    tensorflow_privacy, which without `noise_seed` reads it from the clock
    (`tf.timestamp()` in microseconds and nanoseconds): about 2^37 candidates
    near a release's known time, each checkable against a released model
    delta, after which every release of that tree is noise-free. Here the seed
    of the tree starting at round r is `fold_in(fold_in(key, nonce), r)`
    (TF's stateless Philox hash): `key` is 63 bits from the operating system
    (Python's `secrets`) drawn when the process is built (`create`), so a run
    resumed in a new process draws new ones; `nonce` is drawn by `initialize()`
    and again at every forced restart (TF's nondeterministic integers) and
    kept in the state, so two runs of one process differ, and a restart from a
    state restored in the same process does not repeat its tree's noise.
    Neither is released; the nonce is in the checkpoints.
  * If every client takes part at most once per tree (the training program's
    'epoch' sampling: a fresh permutation of the clients per epoch, K per
    round, `rounds_per_tree` = N // K rounds per epoch), one tree is
    `SingleEpochTreeAggregationDpEvent(z, rounds_per_tree)` (Kairouz et al.,
    appendix D; dp_accounting's RDP accountant) under the "replace with a
    special element" relation (dp_accounting's REPLACE_SPECIAL: a client's
    update replaced by zero). The state's `dp_event` of a round is
    `SelfComposedDpEvent(that, 1)` at a restart and `SelfComposedDpEvent(that,
    0)` (nothing) otherwise, so a tree is charged whole at its first round,
    before anything of it is released; a crash can only over-count.

  Adversary: the server adds the noise and sees the clipped updates, so the
  guarantee is against an analyst who sees the released models only.

  Args:
    noise_multiplier: z > 0: each tree node's noise std is z C.
    clients_per_round: K, the sum's divisor.
    clip: C > 0, the L2 clip of each client's update.
    rounds_per_tree: R >= 1: the tree restarts every R rounds.
    noise_seed: None (a secret key from the operating system); an int is
      the key and the nonce is 0, so the noise is reproducible (tests only:
      then the guarantee does not hold).
    planned_rounds: None, or T: the state carries the plan and the T+1-th
      round is refused (`tff_priv.aggregators.plan`; `calibrated` sets it).
  """

  def __init__(
      self,
      noise_multiplier: float,
      clients_per_round: int,
      clip: float,
      rounds_per_tree: int,
      noise_seed: Optional[int] = None,
      planned_rounds: Optional[int] = None,
  ):
    self._z = validation.positive('noise_multiplier', noise_multiplier)
    self._k = validation.int_at_least('clients_per_round', clients_per_round, 1)
    self._clip = validation.positive('clip', clip)
    self._rounds = validation.int_at_least(
        'rounds_per_tree', rounds_per_tree, 1
    )
    self._noise_seed = noise_seed
    self._planned = plan_lib.planned(planned_rounds)

  @classmethod
  def calibrated(
      cls,
      epsilon: float,
      *,
      total_rounds: int,
      population: int,
      clients_per_round: int,
      delta: float = 1e-5,
      clip: float = 1.0,
      spent=None,
  ) -> 'TreeRestartFactory':
    """A factory whose run of `total_rounds` rounds meets (eps, delta).

    One tree per epoch of R = N // K rounds, for a loop that draws its
    clients with `tff_priv.program.StreamSampler(N, K, 'epoch')` (each client
    at most once per epoch) and charges each round with
    `PrivacyLedger.record_round(state)` (no sampling arguments). Round T+1
    is refused (`plan`). `spent`: a `PrivacyLedger` of earlier rounds, met
    together with the `total_rounds` rounds added (a plan extended).
    """
    population, k = validation.population_and_k(population, clients_per_round)
    total_rounds = validation.int_at_least('total_rounds', total_rounds, 1)
    rounds_per_tree = population // k
    z = tree_noise(
        epsilon,
        delta,
        total_rounds,
        rounds_per_tree,
        spent=calibration.Spent.of(spent),
    )
    return cls(z, k, clip, rounds_per_tree, planned_rounds=total_rounds)

  @property
  def guarantee(self) -> guarantees.Guarantee:
    return GUARANTEE

  def event(self) -> dp_accounting.DpEvent:
    """The DpEvent of one tree."""
    return tree_event(self._z, self._rounds)

  @property
  def rounds_per_tree(self) -> int:
    return self._rounds

  @property
  def clip(self) -> float:
    """The L2 clip C of each client's update."""
    return self._clip

  def audit_spec(self) -> guarantees.AuditSpec:
    """Its public clip (one trial per call)."""
    return guarantees.AuditSpec(clip=self._clip)

  def create(self, value_type):
    specs = tf.nest.map_structure(
        lambda t: tf.TensorSpec(t.shape, t.dtype),
        tff.types.type_to_tf_tensor_specs(value_type),
    )
    # TFF's `DifferentiallyPrivateFactory.tree_aggregation`, built from its
    # query here because `reseed` needs the query to restart the tree from
    # a seed of ours. Its noise_seed 0 only keeps tensorflow_privacy from
    # reading the clock: every tree is reseeded before it releases anything.
    sum_query = tfp.TreeResidualSumQuery.build_l2_gaussian_query(
        self._clip, self._z, specs, noise_seed=0, use_efficient=True
    )
    inner = tff.aggregators.DifferentiallyPrivateFactory(
        tfp.NormalizedQuery(sum_query, denominator=float(self._k))
    ).create(value_type)
    rounds = self._rounds
    event = tree_event(self._z, rounds)
    fixed = self._noise_seed is not None
    key = self._noise_seed if fixed else secrets.randbits(63)
    tree_type = inner.initialize.type_signature.result.member

    new_nonce, restart_nonce = _nonce_computations(fixed)
    reseed = _reseed_computation(sum_query, key, tree_type)

    init_fn = _init_computation(inner, new_nonce, event, self._planned)
    state_type = init_fn.type_signature.result
    restarts, pick, new_state, finite = _round_computations(
        rounds, tree_type, event, self._planned, value_type
    )

    @tff.federated_computation(
        state_type, tff.FederatedType(value_type, tff.CLIENTS)
    )
    def next_fn(state, value):
      restart = tff.federated_map(
          restarts, (state.rounds_done, state.force_restart)
      )
      nonce = tff.federated_map(
          restart_nonce, (state.force_restart, state.nonce)
      )
      fresh = tff.federated_map(
          reseed, (inner.initialize(), state.rounds_done, nonce)
      )
      tree = tff.federated_map(pick, (restart, fresh, state.noise))
      output = inner.next(tree, tff.federated_map(finite, value))
      return tff.templates.MeasuredProcessOutput(
          state=tff.federated_map(
              new_state,
              (restart, state.rounds_done, output.state, nonce),
          ),
          result=output.result,
          measurements=output.measurements,
      )

    return tff.templates.AggregationProcess(init_fn, next_fn)


_NONCE_TYPE = tff.TensorType(np.int64, [2])


def _charged(event, count):
  """`SelfComposedDpEvent(event, count)` as the state carries it (TF)."""
  return dp_accounting.SelfComposedDpEvent(event, count).to_named_tuple()


def _init_computation(inner, new_nonce, event, planned):
  """The process's `initialize`: a fresh tree, its nonce, the placeholder."""

  @tff.tensorflow.computation
  def placeholder_dp_event():
    return _charged(event, tf.constant(1, tf.int32))

  @tff.federated_computation()
  def init_fn():
    return tff.federated_zip(
        TreeState(
            noise=inner.initialize(),
            nonce=tff.federated_eval(new_nonce, tff.SERVER),
            rounds_done=tff.federated_value(np.int64(0), tff.SERVER),
            force_restart=tff.federated_value(False, tff.SERVER),
            dp_event=tff.federated_eval(placeholder_dp_event, tff.SERVER),
            is_init_state=tff.federated_value(True, tff.SERVER),
            planned_rounds=tff.federated_value(
                np.int64(planned or 0), tff.SERVER
            ),
        )
    )

  return init_fn


def _round_computations(rounds, tree_type, event, planned, value_type):
  """(restarts, pick, new_state, finite): the TF steps of `next`."""

  @tff.tensorflow.computation(np.int64, np.bool_)
  def restarts(rounds_done, force_restart):
    return tf.logical_or(force_restart, tf.equal(rounds_done % rounds, 0))

  @tff.tensorflow.computation(np.bool_, tree_type, tree_type)
  def pick(restart, fresh, carried):
    # tf.cond, not tf.where: the tree's level buffers grow with its leaves
    # ([levels, ...]), and tf.where would broadcast a fresh one-leaf tree
    # to the old tree's levels (copies of its one node: twice its noise).
    return tf.cond(restart, lambda: fresh, lambda: carried)

  @tff.tensorflow.computation(np.bool_, np.int64, tree_type, _NONCE_TYPE)
  def new_state(restart, rounds_done, tree, nonce):
    if planned is not None:
      with tf.control_dependencies(
          [plan_lib.check(rounds_done, planned, 'TreeRestartFactory')]
      ):
        rounds_done = tf.identity(rounds_done)
    return correlated_noise.stream_state(
        TreeState,
        planned,
        noise=tree,
        nonce=nonce,
        rounds_done=rounds_done + 1,
        force_restart=tf.constant(False),
        dp_event=_charged(event, tf.cast(restart, tf.int32)),
        is_init_state=tf.constant(False),
    )

  @tff.tensorflow.computation(value_type)
  def finite(value):
    # tff_priv's policy: a non-finite update contributes zeros (TFF's
    # clipping would pass the NaN into the sum).
    return clipping.clip_l2(value, None)

  return restarts, pick, new_state, finite


def _nonce_computations(fixed: bool):
  """(new_nonce, restart_nonce): a tree's nonce, and the next round's.

  Secret (from the OS) unless `fixed` (a test's noise seed).
  """

  @tff.tensorflow.computation
  def new_nonce():
    if fixed:
      return tf.zeros([2], tf.int64)
    return tf.raw_ops.NonDeterministicInts(shape=[2], dtype=tf.int64)

  @tff.tensorflow.computation(np.bool_, _NONCE_TYPE)
  def restart_nonce(force_restart, nonce):
    # A forced restart (a resumed run, or a state restored in the same
    # process) seeds its tree anew: the restarted tree's rounds are
    # released again, never with the noise they had.
    if fixed:
      return tf.where(
          force_restart, nonce + tf.constant([0, 1], tf.int64), nonce
      )
    fresh = tf.raw_ops.NonDeterministicInts(shape=[2], dtype=tf.int64)
    return tf.where(force_restart, fresh, nonce)

  return new_nonce, restart_nonce


def _reseed_computation(sum_query, key: int, tree_type):
  """`(tree, rounds_done, nonce) -> tree`: a fresh tree from a fresh seed.

  The seed is that of (key, nonce, rounds_done).
  """

  @tff.tensorflow.computation(tree_type, np.int64, _NONCE_TYPE)
  def reseed(tree, rounds_done, nonce):
    seed = tf.random.experimental.stateless_fold_in(
        tf.constant([key, 0], tf.int64), nonce[0]
    )
    seed = tf.random.experimental.stateless_fold_in(seed, nonce[1])
    seed = tf.random.experimental.stateless_fold_in(seed, rounds_done)
    numerator = tree.query_state.numerator_state
    generator = numerator.tree_state.value_generator_state
    numerator = numerator._replace(
        tree_state=numerator.tree_state._replace(
            value_generator_state=generator._replace(seeds=seed)
        )
    )
    # A tree of one leaf whose node is drawn from the new seed (the node
    # `initialize()` drew came from seed 0).
    numerator = sum_query.reset_state(None, numerator)
    return tree._replace(
        query_state=tree.query_state._replace(numerator_state=numerator)
    )

  return reseed


# `aggregator_state` set to restart its tree at the next round.
with_restart_forced = correlated_noise.with_restart_forced
