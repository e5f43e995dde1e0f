"""Aggregator states inside TFF's wrappers, and what a round may release.

TFF wraps a model aggregator in others (`zeroing_factory`, `clipping_factory`,
`add_debug_measurements`); the DP factory inside still releases what its event
describes, but what the wrappers add is not private. `unwrap` finds the DP
state and the extra events (a norm tracked with noise is charged, one without
refused); `public_measurement_paths` says which measurement leaves of a
recognised aggregator a round may release.
"""

from typing import Any, Mapping, Optional

from dp_accounting import dp_event

# (wrapper's norm key, its count key, its measurements key).
_WRAPPERS = (
    ('zeroing_norm', 'zeroed_count', 'zeroing'),
    ('clipping_norm', 'clipped_count', 'clipping'),
)
# `tff.learning.add_debug_measurements`' exact client statistics.
DEBUG_MEASUREMENTS = ('average_client_norm', 'std_dev_client_norm')


class UnnoisedWrapperError(ValueError):
  """A wrapper releases an exact client statistic that no DpEvent covers."""


def _wrapper(state) -> Optional[tuple[str, str, str]]:
  if not isinstance(state, Mapping) or 'inner_agg' not in state:
    return None
  for keys in _WRAPPERS:
    if keys[0] in state:
      return keys
  return None


def _empty(value) -> bool:
  return value is None or (isinstance(value, (tuple, list, dict)) and not value)


def _norm_event(norm_key: str, norm_state) -> Optional[dp_event.DpEvent]:
  """The release of a wrapper's norm: None (public), a Gaussian, or refused."""
  if _empty(norm_state) or (
      isinstance(norm_state, (tuple, list)) and all(map(_empty, norm_state))
  ):
    return None  # A fixed norm: a public number.
  # The estimator's state (a namedtuple), alone or first of a plain tuple.
  estimator = norm_state
  if not hasattr(estimator, '_fields') and isinstance(estimator, (tuple, list)):
    estimator = estimator[0]
  below = getattr(estimator, 'below_estimate_state', None)
  numerator = getattr(below, 'numerator_state', None)
  stddev = getattr(numerator, 'stddev', None)
  clip = getattr(numerator, 'l2_norm_clip', None)
  if stddev is None or clip is None or float(stddev) <= 0:
    wrapper = norm_key.split('_', maxsplit=1)[0]
    raise UnnoisedWrapperError(
        f"the aggregator's {wrapper} tracks its norm from the clients' "
        'update norms without noise (an exact client statistic, in its '
        f'state and its {norm_key!r} measurement), as '
        'tff.learning.dp_aggregator does by default: use '
        'dp_aggregator(..., zeroing=False), a fixed (public) norm in '
        f'tff.aggregators.{wrapper}_factory, or a noised quantile '
        '(PrivateQuantileEstimationProcess.gaussian), which is charged'
    )
  # Its count query adds N(0, stddev^2) to a sum of records of norm <= clip.
  return dp_event.GaussianDpEvent(float(stddev) / float(clip))


def _admits_noised_norm(state) -> bool:
  """Whether a wrapper's noised norm composes with the event of `state`.

  It does with an add-or-remove-one event the server's noise makes, charged
  under the caller's sampling: its `StateAccounting` (the class attribute
  `accounting`, read here without importing `guarantees`) says so, or it is
  TFF's `DPAggregatorState`.
  """
  declared = getattr(type(state), 'accounting', None)
  if declared is not None:
    return (
        getattr(declared, 'relation', None) == 'add_or_remove_one'
        and getattr(declared, 'noise', None) == 'central'
        and getattr(declared, 'sampling', None) == 'caller'
    )
  return type(state).__name__ == 'DPAggregatorState'


def unwrap(state: Any) -> tuple[Any, list[dp_event.DpEvent]]:
  """(the state inside TFF's zeroing / clipping wrappers, their extra events).

  TFF wraps a model aggregator in others: `tff.aggregators.zeroing_factory`
  and `clipping_factory` (state `{'zeroing_norm' | 'clipping_norm',
  'inner_agg', 'zeroed_count_agg' | 'clipped_count_agg'}`;
  `tff.learning.dp_aggregator` wraps its DP factory in adaptive zeroing by
  default) and `tff.learning.add_debug_measurements` (same state, more
  measurements). The DP factory inside still releases what its event
  describes: zeroing or clipping with a public norm before the DP factory's
  own clip changes no client's contribution by more than that clip. What the
  wrappers add is not private: a norm tracked adaptively without noise
  (`PrivateQuantileEstimationProcess.no_noise`, dp_aggregator's zeroing) is
  an exact quantile of the clients' update norms, in the state and in the
  `zeroing_norm` measurement: the next rounds' release depends on it through
  which clients are zeroed, so no DpEvent describes the run. Refused
  (`UnnoisedWrapperError`). A norm tracked with Gaussian noise is charged:
  its count query is one more Gaussian release a round.

  A noised norm's event (a Gaussian count, add-or-remove-one, the server
  adding the noise) is accepted only around a factory whose event it
  composes with (same relation, same adversary, the caller's sampling): TFF's
  `DifferentiallyPrivateFactory`, or a state that declares so
  (`_admits_noised_norm`).

  Raises:
    UnnoisedWrapperError: a wrapper's norm is tracked without noise, or a
      noised one wraps another factory.
  """
  extras = []
  while True:
    keys = _wrapper(state)
    if keys is None:
      if extras and not _admits_noised_norm(state):
        raise UnnoisedWrapperError(
            "a TFF wrapper with a noised norm is charged around TFF's "
            'DifferentiallyPrivateFactory (or a factory whose state declares '
            'central add-or-remove-one noise) only: its count is an '
            'add-or-remove-one Gaussian the server adds; use a fixed '
            '(public) norm around this factory'
        )
      return state, extras
    extra = _norm_event(keys[0], state[keys[0]])
    if extra is not None:
      extras.append(extra)
    state = state['inner_agg']


def _leaves(tree, prefix=()):
  if isinstance(tree, Mapping):
    for key, value in tree.items():
      yield from _leaves(value, prefix + (key,))
  elif hasattr(tree, '_fields'):
    for key in tree._fields:
      yield from _leaves(getattr(tree, key), prefix + (key,))
  elif isinstance(tree, (tuple, list)):
    for i, value in enumerate(tree):
      yield from _leaves(value, prefix + (i,))
  else:
    yield prefix


def check_no_debug_measurements(measurements: Any) -> None:
  """Refuses `add_debug_measurements`' exact client statistics, at any depth.

  Raises:
    UnnoisedWrapperError: one line naming them and the fix.
  """
  found, todo = [], [measurements]
  while todo:
    value = todo.pop()
    if isinstance(value, Mapping):
      found += [k for k in DEBUG_MEASUREMENTS if k in value]
      todo += list(value.values())
  if found:
    raise UnnoisedWrapperError(
        f'the aggregator\'s measurements {", ".join(sorted(set(found)))} '
        '(from tff.learning.add_debug_measurements) are exact statistics of '
        "the clients' updates, released uncharged: build the process "
        'without add_debug_measurements'
    )


def public_measurement_paths(
    state: Any, measurements: Any, inner_public: str
) -> set[tuple]:
  """The paths of the measurement leaves a private round may release.

  Besides the norms (`unwrap`), what TFF's wrappers add is not private:

  * `zeroed_count` / `clipped_count` are exact counts of clients: dropped from
    what a private round releases.
  * `add_debug_measurements`' `average_client_norm` and `std_dev_client_norm`
    are exact statistics of the clients' updates: refused.

  Args:
    state: the aggregator's state after `next`.
    measurements: the aggregator's measurements of that round.
    inner_public: what the state inside the wrappers is: 'tff_priv' (a
      tff_priv factory: every measurement is public, checked on
      neighbouring inputs) or 'tff_dp' (TFF's DifferentiallyPrivateFactory:
      `dp_query_metrics`, a function of its noised state, and an empty
      `dp`).

  Raises:
    UnnoisedWrapperError: a measurement is an exact client statistic that
      cannot be dropped (debug measurements), or a wrapper tracks its norm
      without noise.
    ValueError: a measurement tff_priv does not know.
  """
  paths = set()
  prefix = ()
  while True:
    keys = _wrapper(state)
    if keys is None:
      break
    norm_key, count_key, inner_key = keys
    _norm_event(norm_key, state[norm_key])  # Refuses an unnoised norm.
    if not isinstance(measurements, Mapping) or inner_key not in measurements:
      raise ValueError(
          f'unknown measurements of a TFF {inner_key} wrapper: '
          f'{measurements}'
      )
    for key in measurements:
      if key == norm_key:
        paths.add(prefix + (key,))  # A public norm, or a charged one.
      elif key not in (count_key, inner_key):
        raise ValueError(
            f'unknown aggregator measurement {"/".join(prefix + (key,))}: '
            'tff_priv releases only the measurements it knows to be public'
        )
    # `count_key`: an exact count of clients: dropped.
    state, measurements = state['inner_agg'], measurements[inner_key]
    prefix += (inner_key,)
  check_no_debug_measurements(measurements)
  if inner_public == 'tff_priv':
    return paths | {prefix + p for p in _leaves(measurements)}
  if not isinstance(measurements, Mapping):
    raise ValueError(
        f"unknown measurements of TFF's DP factory: " f'{measurements}'
    )
  for key, value in measurements.items():
    if key == 'dp_query_metrics':
      paths |= {prefix + (key,) + p for p in _leaves(value)}
    elif key == 'dp' and _empty(value):
      continue
    else:
      raise ValueError(
          f'unknown aggregator measurement {"/".join(prefix + (key,))} '
          f'({value!r}): tff_priv releases only the measurements it knows '
          "to be public (TFF's DP factory with a secure inner sum reports "
          'exact counts of clipped values)'
      )
  return paths
