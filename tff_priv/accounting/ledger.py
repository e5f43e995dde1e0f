"""The privacy ledger: every release of a run, counted by one accountant.

A `PrivacyLedger` records each release as a dp_accounting `DpEvent` (with a
repeat count: consecutive identical releases are merged) and answers eps for a
delta, or delta for an eps, with dp_accounting's RDP accountant (default) or
PLD accountant. Nothing else in tff_priv computes a spent epsilon: mechanisms
emit events (`events.py`), the ledger counts them, and a paper's closed form
(`closed_forms.py`) is only ever printed beside the ledger's answer.
"""

import json
import math
from typing import Optional

import attr
from dp_accounting import dp_event

from tff_priv import validation
from tff_priv.accounting import accountants
from tff_priv.accounting import events
from tff_priv.accounting import guarantees
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.accounting import wrapped_states

_FORMAT = 'tff_priv.PrivacyLedger/1'


class PrivacyLedger:
  """Records DP releases and reports what they spent.

  Rounds with different noise (a CRD schedule) are recorded one by one; the
  composition is then heterogeneous, which both accountants handle exactly as
  dp_accounting's `ComposedDpEvent`.

  The ledger serialises to JSON (`to_json` / `from_json`) with floats written
  exactly (Python's shortest round-trip repr), so a checkpoint can carry it as
  a string tensor and a resumed run continues its spent budget: eps after a
  round trip is bit-identical.

  Example:
    ledger = PrivacyLedger()
    for _ in range(rounds):
      ledger.record_gaussian(noise_multiplier=1.1, sampling_probability=0.01)
    eps = ledger.epsilon(delta=1e-5)            # RDP accountant
    eps_pld = ledger.epsilon(1e-5, accountant='pld')
  """

  def __init__(self, neighboring_relation: Optional[str] = None):
    """Creates an empty ledger.

    Args:
      neighboring_relation: 'add_or_remove_one' or 'replace_one'. None: taken
        from the first sampled release (Poisson sampling needs
        add-or-remove-one, fixed-size sampling replace-one), add-or-remove-one
        if no release says.
    """
    if neighboring_relation is not None:
      validation.one_of(
          'neighboring_relation', neighboring_relation, accountants.RELATIONS
      )
    self._relation = neighboring_relation
    self._entries: list[list] = []  # [event, count], consecutive ones merged.

  # Recording.

  def record(self, event: dp_event.DpEvent, count: int = 1) -> None:
    """Records `count` repetitions of `event`."""
    if not isinstance(event, dp_event.DpEvent):
      raise TypeError(f'event must be a dp_accounting DpEvent, got {event!r}')
    count = validation.int_at_least('count', count, 1)
    needed = accountants.relation_for(event)
    if needed is not None:
      if self._relation is None:
        self._relation = needed
      elif needed != self._relation:
        raise ValueError(
            f'this ledger counts under {self._relation} adjacency, and the '
            f'event {event} needs {needed}: Poisson sampling is accounted '
            'under add_or_remove_one, fixed-size sampling under replace_one'
        )
    if not self._make('rdp').supports(event):
      raise ValueError(f'the RDP accountant cannot count {event}')
    if self._entries and self._entries[-1][0] == event:
      self._entries[-1][1] += count
    else:
      self._entries.append([event, count])

  def record_gaussian(
      self,
      noise_multiplier: float,
      *,
      sampling: Optional[sampling_lib.Sampling] = None,
      sampling_probability: Optional[float] = None,
      population: Optional[int] = None,
      sample_size: Optional[int] = None,
      count: int = 1,
  ) -> None:
    """Records `count` rounds of a (sampled) Gaussian sum.

    See `events.sampled_gaussian_event` for the arguments; the sampling is a
    `Sampling`, or the keyword triple (`Sampling.of`): `sampling_probability`
    q (Poisson), or `population` N and `sample_size` K (fixed-size).
    """
    sampling = sampling_lib.Sampling.of(
        sampling,
        sampling_probability=sampling_probability,
        population=population,
        sample_size=sample_size,
    )
    self.record(
        events.sampled_gaussian_event(noise_multiplier, sampling), count
    )

  def record_round(
      self,
      aggregator_state,
      *,
      sampling: Optional[sampling_lib.Sampling] = None,
      sampling_probability: Optional[float] = None,
      population: Optional[int] = None,
      sample_size: Optional[int] = None,
      neighboring_relation: Optional[str] = None,
  ) -> dp_event.DpEvent:
    """Records the round that produced `aggregator_state`, under its sampling.

    The one call a user's own `tff.learning` loop needs:

      output = process.next(state, client_data)
      ledger.record_round(output, sampling_probability=q)

    The factory's event is read in the relation the sampling needs
    (`guarantees.sampled_event`): Poisson sampling under add-or-remove-one,
    fixed-size sampling under replace-one.

    Args:
      aggregator_state: the round's output (`process.next(...)`: then its
        aggregator's measurements are checked too, and an exact client
        statistic among them, such as TFF's debug measurements, is refused),
        or the aggregator's state after `next`, of a tff_priv factory or of
        TFF's `DifferentiallyPrivateFactory` (`guarantees.extract_dp_event`).
      sampling: the round's client `Sampling` (instead of the three below).
      sampling_probability: Poisson client sampling rate q.
      population: N, for fixed-size sampling of `sample_size` of N clients.
      sample_size: K, for fixed-size sampling.
      neighboring_relation: the relation the state's event holds under
        (`factory.guarantee.neighboring_relation`); None: read from the
        state (`guarantees.StateAccounting`, which tff_priv's states and
        TFF's DP factory's have), also inside TFF's zeroing and clipping
        wrappers with a public norm (or a noised one, charged, around a
        central add-or-remove-one state: TFF's DP factory's).

    Returns:
      The event recorded.

    Raises:
      ValueError: a state past its factory's plan of rounds
        (`guarantees.past_plan`); Poisson sampling of an event that holds
        under replace-one
        (noise added on each client: sample K of N instead); any sampling
        of a state whose event holds a schedule (BLT, the tree: no
        amplification is claimed) or its own sampling (BandMF); a TFF
        wrapper that tracks its norm without noise
        (`wrapped_states.UnnoisedWrapperError`, also for debug measurements
        in an output's metrics); an explicit
        `neighboring_relation` that contradicts the state's; a sampling under
        which the accountant cannot count the event (refused here, not later
        in `epsilon`).
      TypeError: a whole learning-process state instead of its `aggregator`.
    """
    aggregator_state = _checked_state(aggregator_state)
    sampling = sampling_lib.Sampling.of(
        sampling,
        sampling_probability=sampling_probability,
        population=population,
        sample_size=sample_size,
    )
    _refuse_sampling_of_a_stream(aggregator_state, sampling)
    neighboring_relation = _state_relation(
        aggregator_state, neighboring_relation
    )
    event = guarantees.sampled_event(
        guarantees.extract_dp_event(aggregator_state),
        neighboring_relation,
        sampling,
    )
    relation = accountants.relation_for(event) or self.neighboring_relation
    stream_relation = (
        self._relation is None
        and neighboring_relation == 'replace_special'
        and accountants.relation_for(event) is None
    )
    if stream_relation:
      # A stream's zero-out event (BLT, a tree): counted under it.
      relation = neighboring_relation
    reason = accountants.can_count('rdp', event, relation)
    if reason is not None:
      raise ValueError(
          f'{reason}: no amplification by this sampling is known for this '
          "state's event; record it without sampling arguments (an upper "
          'bound)'
      )
    if stream_relation:
      self._relation = neighboring_relation
    self.record(event)
    return event

  def record_pure_epsilon(self, epsilon: float, count: int = 1) -> None:
    """Records `count` eps-DP releases (e.g. one-value eps-LDP reports)."""
    self.record(events.pure_epsilon_event(epsilon), count)

  def extend(self, other: 'PrivacyLedger') -> None:
    """Records every release of `other` after this ledger's.

    An empty ledger without a relation takes `other`'s.
    """
    if self._relation is None and not self._entries:
      self._relation = other._relation  # pylint: disable=protected-access
    for event, count in other.entries:
      self.record(event, count)

  # Reading.

  @property
  def neighboring_relation(self) -> str:
    return self._relation or 'add_or_remove_one'

  @property
  def entries(self) -> tuple[tuple[dp_event.DpEvent, int], ...]:
    """The releases recorded so far, as (event, count) pairs in order."""
    return tuple((event, count) for event, count in self._entries)

  @property
  def num_releases(self) -> int:
    return sum(count for _, count in self._entries)

  def dp_event(self) -> dp_event.DpEvent:
    """Everything recorded, as one dp_accounting event.

    Equal events are composed once with their total count, wherever they
    stand (composition is commutative for both accountants), and a
    `SelfComposedDpEvent` is read as its inner event times its count (none
    when 0: a stream's or a BandMF cycle's other rounds). A run of T rounds
    whose events alternate (a BandMF cycle charged every b rounds) is then
    a few terms, not T, each of which the accountant computes anew.
    """
    totals = []  # [inner event, total count], in order of first record.
    for event, count in self._entries:
      while isinstance(event, dp_event.SelfComposedDpEvent):
        event, count = event.event, count * event.count
      for total in totals:
        if total[0] == event:
          total[1] += count
          break
      else:
        totals.append([event, count])
    parts = [
        event if count == 1 else dp_event.SelfComposedDpEvent(event, count)
        for event, count in totals
        if count
    ]
    if not parts:
      return dp_event.NoOpDpEvent()
    return parts[0] if len(parts) == 1 else dp_event.ComposedDpEvent(parts)

  def supports(self, accountant: str = 'rdp') -> bool:
    """Whether `accountant` ('rdp' or 'pld') can count all recorded releases."""
    return self._cannot_count(accountant) is None

  def _cannot_count(self, accountant: str):
    return accountants.can_count(
        accountant, self.dp_event(), self.neighboring_relation
    )

  def epsilon(self, delta: float, accountant: str = 'rdp') -> float:
    """The smallest eps such that the run so far is (eps, delta)-DP.

    Args:
      delta: in (0, 1).
      accountant: 'rdp' (default; dp_accounting's RdpAccountant) or 'pld'.

    Returns:
      eps (0 for an empty ledger, inf after a non-private release).

    Raises:
      ValueError: bad delta, or the accountant cannot count a release (PLD in
        dp_accounting 0.4.3 does not count fixed-size sampling).
    """
    delta = validation.open_unit('delta', delta)
    return self._composed(accountant).get_epsilon(delta)

  def delta(self, epsilon: float, accountant: str = 'rdp') -> float:
    """The smallest delta such that the run so far is (epsilon, delta)-DP."""
    epsilon = validation.non_negative('epsilon', epsilon)
    return self._composed(accountant).get_delta(epsilon)

  def report(self, delta: float) -> dict:
    """eps at `delta` from every accountant that can count this ledger.

    Returns:
      {'delta': delta, 'rdp_epsilon': ..., 'pld_epsilon': ... or None,
       'neighboring_relation': ..., 'releases': ...,
       'unsupported': {accountant: reason}}.
    """
    result = {
        'delta': validation.open_unit('delta', delta),
        'neighboring_relation': self.neighboring_relation,
        'releases': self.num_releases,
        'unsupported': {},
    }
    for name in accountants.ACCOUNTANTS:
      reason = self._cannot_count(name)
      if reason is None:
        result[f'{name}_epsilon'] = self.epsilon(delta, name)
      else:
        result[f'{name}_epsilon'] = None
        result['unsupported'][name] = reason
    return result

  # Serialisation.

  def to_json(self) -> str:
    """The ledger as a JSON string (exact: floats round-trip bit for bit)."""
    return json.dumps(
        {
            'format': _FORMAT,
            'neighboring_relation': self._relation,
            'entries': [
                {'count': count, 'event': encode_event(event)}
                for event, count in self._entries
            ],
        }
    )

  @classmethod
  def from_json(cls, text: str) -> 'PrivacyLedger':
    """The ledger that `to_json` wrote."""
    data = json.loads(text)
    if not isinstance(data, dict) or data.get('format') != _FORMAT:
      raise ValueError(f'not a serialised PrivacyLedger ({_FORMAT})')
    ledger = cls(data['neighboring_relation'])
    for entry in data['entries']:
      ledger.record(decode_event(entry['event']), entry['count'])
    return ledger

  def __eq__(self, other):
    return (
        isinstance(other, PrivacyLedger)
        and self.neighboring_relation == other.neighboring_relation
        and self.entries == other.entries
    )

  def __repr__(self):
    return (
        f'PrivacyLedger({self.neighboring_relation}, '
        f'{self.num_releases} releases: {self.dp_event()})'
    )

  # Internals.

  def _make(self, accountant: str):
    return accountants.make_accountant(accountant, self.neighboring_relation)

  def _composed(self, accountant: str):
    reason = self._cannot_count(accountant)
    if reason is not None:
      raise ValueError(
          f"accountant='{accountant}' cannot count this ledger: {reason}; use "
          "accountant='rdp'"
      )
    return self._make(accountant).compose(self.dp_event())


def _checked_state(aggregator_state):
  """The aggregator state of a round's output (or the state itself), checked.

  Checked by the refusals that do not depend on the sampling: debug
  measurements in the output, a whole learning state, a plan exceeded.
  """
  measurements = None
  if hasattr(aggregator_state, 'state') and hasattr(
      aggregator_state, 'metrics'
  ):
    # The round's whole output: its aggregator's measurements are checked
    # too (an exact client statistic among them is refused).
    measurements = aggregator_state.metrics.get('aggregator')
    aggregator_state = getattr(
        aggregator_state.state, 'aggregator', aggregator_state.state
    )
  if hasattr(aggregator_state, 'global_model_weights') and hasattr(
      aggregator_state, 'aggregator'
  ):
    raise TypeError(
        "record_round takes the round's output or the aggregator's "
        'state: pass output or output.state.aggregator, not output.state'
    )
  wrapped_states.check_no_debug_measurements(measurements)
  past = guarantees.past_plan(aggregator_state)
  if past is not None:
    raise ValueError(
        f'the state is at round {past[0]} of a factory calibrated for '
        f'{past[1]} rounds: its plan was exceeded (see '
        'tff_priv.aggregators.plan to extend a plan explicitly)'
    )
  return aggregator_state


def _refuse_sampling_of_a_stream(aggregator_state, sampling) -> None:
  """A state whose event holds a schedule or its own sampling takes none."""
  # Inside TFF's wrappers too: the inner factory's event is what gets charged.
  try:
    declared = guarantees.accounting_of(aggregator_state)
  except TypeError:
    return  # Refused with its reason where the relation is read.
  if declared.takes_sampling or sampling.kind == 'none':
    return
  if declared.sampling == 'own':
    raise ValueError(
        f"{declared.factory}'s event already holds its sampling "
        f'({declared.schedule}): call record_round(state) without sampling '
        f'arguments, and draw the clients with '
        f'tff_priv.program.{declared.sampler}'
    )
  raise ValueError(
      f'{declared.factory} claims no amplification by sampling: its event '
      f'holds for {declared.schedule}, whoever is sampled; call '
      'record_round(state) without sampling arguments, and draw the clients '
      f'with tff_priv.program.{declared.sampler}'
  )


def _state_relation(aggregator_state, given: Optional[str]) -> Optional[str]:
  """The relation of the state's event: the known one, or `given` (checked)."""
  try:
    known = guarantees.relation_of_state(aggregator_state)
  except TypeError:
    if given is None:
      raise
    known = None
  if given is None:
    return known
  if known is not None and given != known:
    raise ValueError(
        f'neighboring_relation={given!r} contradicts the '
        f"state's event, which holds under {known}: omit "
        'neighboring_relation (the sampling reads the event in the relation '
        'it needs: Poisson add-or-remove-one, population/sample_size '
        'replace-one)'
    )
  return given


def encode_event(value):
  """A DpEvent (or a field of one) as JSON-ready data (whitelisted types)."""
  if isinstance(value, dp_event.DpEvent):
    cls = type(value)
    if events.EVENT_CLASSES.get(cls.__name__) is not cls:
      raise TypeError(f'cannot serialise event type {cls.__name__}')
    out = {'type': cls.__name__}
    for field in attr.fields(cls):
      out[field.name] = encode_event(getattr(value, field.name))
    return out
  if isinstance(value, (list, tuple)):
    return [encode_event(v) for v in value]
  if isinstance(value, float) and not math.isfinite(value):
    raise ValueError(f'cannot serialise non-finite value {value}')
  return value


def decode_event(value):
  """The inverse of `encode_event`; only whitelisted event types."""
  if isinstance(value, dict):
    cls = events.EVENT_CLASSES.get(value.get('type'))
    if cls is None:
      raise ValueError(f'unknown event type in ledger: {value.get("type")!r}')
    kwargs = {k: decode_event(v) for k, v in value.items() if k != 'type'}
    return cls(**kwargs)
  if isinstance(value, list):
    return [decode_event(v) for v in value]
  return value
