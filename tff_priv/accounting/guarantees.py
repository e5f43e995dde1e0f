"""What a factory's round guarantees, to whom: the DpEvent in its state, read.

Every tff_priv aggregation factory keeps in its state the `dp_accounting`
`DpEvent` of the release its last `next` made, as TFF's
`DifferentiallyPrivateFactory` does; `extract_dp_event` reads it back, and the
factory's `Guarantee` says whom that event protects: the analyst who sees the
released models, and the server.
"""

import dataclasses
from typing import Any, Optional

import attr
from dp_accounting import dp_event
import numpy as np

from tff_priv import validation
from tff_priv.accounting import accountants
from tff_priv.accounting import events
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.accounting import wrapped_states

UNITS = ('example', 'client', 'value')
NOISE_PLACEMENTS = ('local', 'secure_sum', 'central')


class ExtractingDpEventFromInitialStateError(ValueError):
  """The state came from `initialize()`: its DpEvent is a placeholder."""


@dataclasses.dataclass(frozen=True)
class Guarantee:
  """Whom a factory's round event protects, and how.

  A factory says whom its round event protects: the unit ('example' of a
  client's data, 'client', or one reported 'value'), where the noise is added,
  and the neighbouring relation of the event. Two adversaries follow from it:

  * the analyst, who sees only the released models: the round's event under
    the round's client sampling, composed over rounds (amplification by
    sampling);
  * the server, which picks the clients and sees what reaches it: each upload
    for noise added on the client ('local'), the securely summed noisy
    aggregate for noise that clients add before a secure sum ('secure_sum'),
    the clients' raw updates when it adds the noise itself ('central'). It
    knows who took part, so no amplification: a client is charged, under
    replace-one adjacency, for the rounds it took part in
    (`server_view_event`; `tff_priv.accounting.individual`).

  Attributes:
    unit: 'example' (one example of one client's data), 'client' (all of one
      client's data) or 'value' (one reported scalar).
    noise: 'local' (each upload is noised on the client: the server sees
      noisy uploads), 'secure_sum' (clients add shares of the noise and the
      server sees only their secure sum) or 'central' (the server adds the
      noise to the clients' raw updates).
    neighboring_relation: the relation under which the round's `dp_event`
      holds: 'add_or_remove_one' or 'replace_one' (of the unit).
    description: one sentence a summary can print.
  """

  unit: str
  noise: str
  neighboring_relation: str
  description: str = ''

  def __post_init__(self):
    validation.one_of('unit', self.unit, UNITS)
    validation.one_of('noise', self.noise, NOISE_PLACEMENTS)
    validation.one_of(
        'neighboring_relation', self.neighboring_relation, accountants.RELATIONS
    )

  def server_view_event(self, event: dp_event.DpEvent) -> dp_event.DpEvent:
    """The event one participating unit is charged against the server.

    Under replace-one adjacency and without sampling: 'local' and
    'secure_sum' charge the round's event (with every Gaussian noise
    multiplier halved when the event holds under add-or-remove-one: replacing
    a unit moves a clipped sum by twice the clip); 'central' is not private
    against the server that adds the noise (`NonPrivateDpEvent`).
    """
    if self.noise == 'central':
      return dp_event.NonPrivateDpEvent()
    if self.neighboring_relation == 'replace_one':
      return event
    return _halve_gaussians(event)


def _halve_gaussians(event: dp_event.DpEvent) -> dp_event.DpEvent:
  if isinstance(event, dp_event.GaussianDpEvent):
    return dp_event.GaussianDpEvent(event.noise_multiplier / 2.0)
  if isinstance(event, dp_event.SelfComposedDpEvent):
    return dp_event.SelfComposedDpEvent(
        _halve_gaussians(event.event), event.count
    )
  if isinstance(event, dp_event.ComposedDpEvent):
    return dp_event.ComposedDpEvent([_halve_gaussians(e) for e in event.events])
  if isinstance(
      event,
      (dp_event.NoOpDpEvent, dp_event.NonPrivateDpEvent),
  ):
    return event
  raise ValueError(
      f'no replace-one reading of {event} under add-or-remove-one is known'
  )


# TFF's DifferentiallyPrivateFactory: the server clips and noises the sum of
# the clients' raw updates (add-or-remove-one client, sensitivity = clip).
TFF_DP_FACTORY_GUARANTEE = Guarantee(
    unit='client',
    noise='central',
    neighboring_relation='add_or_remove_one',
    description=(
        "TFF's DP-FedAvg: the server clips each client's update and adds "
        'Gaussian noise to their sum; an analyst who sees the models is '
        'protected, the server sees the raw updates'
    ),
)


def _field(state: Any, name: str):
  if isinstance(state, dict):
    return state[name]
  return getattr(state, name)


def _is_tff_dp_state(state) -> bool:
  cls = type(state)
  return cls.__name__ == 'DPAggregatorState' and cls.__module__.startswith(
      'tensorflow_federated'
  )


# The neighbouring relation of the event each known state carries (the
# factories' `guarantee.neighboring_relation`), by state class.
_STATE_RELATIONS = {
    ('tensorflow_federated', 'DPAggregatorState'): 'add_or_remove_one',
    ('tff_priv.aggregators.smp', 'RandKState'): 'add_or_remove_one',
    ('tff_priv.aggregators.smp', 'TopKState'): 'add_or_remove_one',
    ('tff_priv.aggregators.udp', 'ClientNoiseState'): 'replace_one',
    ('tff_priv.aggregators.ldp', 'LDPState'): 'replace_one',
}


# The states of the stream factories (dicts), by their fields, and the
# relation of their events. BLT's and the tree's hold under zero-out
# (REPLACE_SPECIAL) for a participation schedule the caller keeps, and claim
# no amplification by sampling; BandMF's event holds its own sampling
# (`BandSampler`), under add-or-remove-one. Neither takes sampling arguments.
_STREAM_STATES = {
    frozenset(
        (
            'buffers',
            'nonce',
            'rounds_done',
            'force_restart',
            'dp_event',
            'is_init_state',
        )
    ): 'BLTFactory',
    frozenset(
        (
            'tree',
            'nonce',
            'rounds_done',
            'force_restart',
            'dp_event',
            'is_init_state',
        )
    ): 'TreeRestartFactory',
    frozenset(
        (
            'window',
            'nonce',
            'rounds_done',
            'force_restart',
            'dp_event',
            'is_init_state',
        )
    ): 'BandMFFactory',
}
_STREAM_RELATIONS = {
    'BLTFactory': 'replace_special',
    'TreeRestartFactory': 'replace_special',
    'BandMFFactory': 'add_or_remove_one',
}


def stream_factory_of_state(aggregator_state: Any) -> Optional[str]:
  """'BLTFactory', 'TreeRestartFactory' or 'BandMFFactory' for their states."""
  if isinstance(aggregator_state, dict):
    # A calibrated factory's state also carries its plan.
    return _STREAM_STATES.get(frozenset(aggregator_state) - {'planned_rounds'})
  return None


def factory_kind_of_state(aggregator_state: Any) -> str:
  """'tff_priv' or 'tff_dp': whose state this is (inside TFF's wrappers).

  Raises:
    TypeError: a state of no factory tff_priv knows (the message says what
      it knows).
    wrapped_states.UnnoisedWrapperError: a wrapper tracks its norm without
      noise.
  """
  inner, _ = wrapped_states.unwrap(aggregator_state)
  if _is_tff_dp_state(inner):
    return 'tff_dp'
  if stream_factory_of_state(inner) is not None:
    return 'tff_priv'
  cls = type(inner)
  for module, name in _STATE_RELATIONS:
    if cls.__name__ == name and cls.__module__.startswith(module):
      return 'tff_priv'
  raise TypeError(
      f'unknown aggregator state {cls.__module__}.{cls.__name__}: tff_priv '
      "charges the states of its factories and of TFF's "
      'DifferentiallyPrivateFactory (also inside tff.aggregators.'
      'zeroing_factory / clipping_factory with a public norm); a state of '
      'your own factory needs its neighboring_relation (factory.guarantee)'
  )


def relation_of_state(aggregator_state: Any) -> str:
  """The neighbouring relation of the event in a known factory's state.

  TFF's zeroing and clipping wrappers are seen through
  (`wrapped_states.unwrap`).
  """
  inner, _ = wrapped_states.unwrap(aggregator_state)
  stream = stream_factory_of_state(inner)
  if stream is not None:
    return _STREAM_RELATIONS[stream]
  cls = type(inner)
  for (module, name), relation in _STATE_RELATIONS.items():
    if cls.__name__ == name and cls.__module__.startswith(module):
      return relation
  factory_kind_of_state(inner)  # Raises the TypeError naming what is known.
  raise AssertionError('unreachable')


def extract_dp_event(
    aggregator_state: Any, *, allow_initial_state: bool = False
) -> dp_event.DpEvent:
  """The DpEvent of the release that produced `aggregator_state`.

  Every tff_priv aggregation factory keeps, as TFF's
  `DifferentiallyPrivateFactory` does (`DPAggregatorState`), the
  `dp_accounting.DpEvent` of the release its last `next` made in its state:
  two fields, `dp_event` (the event's `to_named_tuple()` form, tensors inside
  the TFF state) and `is_init_state` (True in the state `initialize` returns,
  whose event is a placeholder). `extract_dp_event` reads it back for
  tff_priv's factories and TFF's own. The event covers one round for one unit;
  client sampling is not in it: the caller wraps it in the sampling of the
  round (`PrivacyLedger.record_round`).

  Args:
    aggregator_state: the state returned by `next` of a process created by a
      tff_priv factory (`LDPEncodeFactory`, `GaussianUDPFactory`,
      `SparsifiedSecureSumFactory`, `DistortionFactory`) or by TFF's
      `tff.aggregators.DifferentiallyPrivateFactory` (read with TFF's own
      `extract_dp_event_from_state`). In a `tff.learning` process this is
      `state.aggregator`.
    allow_initial_state: also read `initialize()`'s event, which for these
      factories is the event their first round will release (used to plan a
      round before it runs).

  Returns:
    A `dp_accounting.DpEvent` with plain Python numbers, without client
    sampling. Only the event classes of `events.EVENT_CLASSES` are built.

  Raises:
    ExtractingDpEventFromInitialStateError: the state is `initialize()`'s
      (and `allow_initial_state` is False).
    TypeError: the state carries no DpEvent, or one of an unknown class.
  """
  aggregator_state, extras = wrapped_states.unwrap(aggregator_state)
  if extras:
    event = extract_dp_event(
        aggregator_state, allow_initial_state=allow_initial_state
    )
    return dp_event.ComposedDpEvent([event, *extras])
  try:
    named = _field(aggregator_state, 'dp_event')
    is_init = _field(aggregator_state, 'is_init_state')
  except (AttributeError, KeyError, TypeError) as e:
    raise TypeError(
        'aggregator_state carries no DpEvent (no dp_event / is_init_state '
        'fields): pass the state returned by next() of a tff_priv factory or '
        f"of TFF's DifferentiallyPrivateFactory, got {type(aggregator_state)}"
    ) from e
  if bool(is_init) and not allow_initial_state:
    raise ExtractingDpEventFromInitialStateError(
        'the state comes from initialize(), whose DpEvent is a placeholder; '
        'pass a state returned by next()'
    )
  if _is_tff_dp_state(aggregator_state) and not bool(is_init):
    # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.aggregators import differential_privacy
    # TFF's own reader, checked against ours (which whitelists the classes).
    theirs = differential_privacy.extract_dp_event_from_state(aggregator_state)
    ours = _from_named_tuple(named)
    if plain_event(theirs) != ours:
      raise TypeError(f'TFF reads {theirs} from this state, tff_priv {ours}')
    return ours
  return _from_named_tuple(named)


def _text(value) -> str:
  return value.decode() if isinstance(value, bytes) else str(value)


def _from_named_tuple(named) -> dp_event.DpEvent:
  """A DpEvent from its `to_named_tuple()` form, whitelisted classes only."""
  name = _text(named.class_name)
  cls = events.EVENT_CLASSES.get(name)
  if cls is None or cls.__module__ != _text(named.module_name):
    raise TypeError(
        f'the state names the event class {_text(named.module_name)}.{name}, '
        'which tff_priv does not read'
    )

  def value(v):
    if hasattr(v, '_fields') and hasattr(v, 'class_name'):
      return _from_named_tuple(v)
    if isinstance(v, (list, tuple)):
      return [value(x) for x in v]
    return plain_event(v)

  return cls(
      **{f.name: value(getattr(named, f.name)) for f in attr.fields(cls)}
  )


def plain_event(value):
  """`value` with numpy scalars as Python numbers (JSON-ready, comparable)."""
  if isinstance(value, dp_event.DpEvent):
    return type(value)(
        **{
            f.name: plain_event(getattr(value, f.name))
            for f in attr.fields(type(value))
        }
    )
  if isinstance(value, (list, tuple)):
    return [plain_event(v) for v in value]
  if isinstance(value, np.integer):
    return int(value)
  if isinstance(value, np.floating):
    return float(value)
  if isinstance(value, np.ndarray) and value.ndim == 0:
    return value.item()
  return value


def sampled_event(
    event: dp_event.DpEvent,
    neighboring_relation: str,
    sampling: Optional[sampling_lib.Sampling] = None,
) -> dp_event.DpEvent:
  """A factory's round event under the round's client sampling.

  Poisson sampling is accounted under add-or-remove-one adjacency, fixed-size
  sampling under replace-one; the event is read in the relation the sampling
  needs: an add-or-remove-one Gaussian sum reads as Gaussian(z / 2) under
  replace-one (replacing a unit moves the sum by twice its clip), and a
  replace-one event has no add-or-remove-one reading (a client's noisy upload
  present or absent is not bounded by its local noise).

  Args:
    event: the factory's event of one round (`extract_dp_event`).
    neighboring_relation: the relation `event` holds under
      (`factory.guarantee.neighboring_relation`).
    sampling: the round's `Sampling` (None: every client takes part).

  Raises:
    ValueError: Poisson sampling of a replace-one event.
  """
  validation.one_of(
      'neighboring_relation', neighboring_relation, accountants.RELATIONS
  )
  sampling = sampling_lib.Sampling.of(sampling)
  if sampling.kind == 'poisson' and sampling.sampling_probability < 1:
    if neighboring_relation == 'replace_one':
      raise ValueError(
          'this event holds under replace-one adjacency (noise on each '
          "client's upload): its amplification needs fixed-size sampling "
          '(population=N, sample_size=K), not Poisson sampling'
      )
  elif sampling.kind == 'fixed' and neighboring_relation == 'add_or_remove_one':
    event = _halve_gaussians(event)
  return events.sampled_event(event, sampling)


def guarantee_of(factory: Any) -> Optional[Guarantee]:
  """The `Guarantee` of a tff_priv factory or of TFF's DP factory, else None."""
  guarantee = getattr(factory, 'guarantee', None)
  if isinstance(guarantee, Guarantee):
    return guarantee
  cls = type(factory)
  if (
      cls.__name__ == 'DifferentiallyPrivateFactory'
      and cls.__module__.startswith('tensorflow_federated')
  ):
    return TFF_DP_FACTORY_GUARANTEE
  return None


def past_plan(state: Any) -> Optional[tuple[int, int]]:
  """(rounds_done, planned_rounds) of a plan in `state` that is exceeded.

  Looks through mappings, named tuples and attrs classes for one that has
  both fields (a calibrated factory's state, or its inner factory's).
  """
  names = ('rounds_done', 'planned_rounds')
  if isinstance(state, dict):
    fields = state if all(n in state for n in names) else None
    children = list(state.values())
  elif hasattr(state, '_asdict'):
    fields = state._asdict() if all(hasattr(state, n) for n in names) else None
    children = list(state)
  elif hasattr(state, '__attrs_attrs__'):
    children = [getattr(state, a.name) for a in state.__attrs_attrs__]
    fields = None
  elif isinstance(state, (list, tuple)):
    fields, children = None, list(state)
  else:
    return None
  if fields is not None:
    done, plan = int(np.asarray(fields[names[0]])), int(
        np.asarray(fields[names[1]])
    )
    if plan > 0 and done > plan:
      return done, plan
  for child in children:
    found = past_plan(child)
    if found is not None:
      return found
  return None
