"""Individual (per-client) accounting against the server, with a budget filter.

The server picks each round's clients and sees what reaches it, so sampling
does not amplify privacy against it: a client's privacy loss is the
composition of the events of the rounds it took part in (each read by
`Guarantee.server_view_event`, under replace-one adjacency), and a client
never sampled has spent nothing. `IndividualLedger` keeps that history per
client and answers each client's eps at the run's delta, and the worst one.
"""

import collections
import json
import math
from typing import Hashable, Iterable, Optional

from dp_accounting import dp_event

from tff_priv import validation
from tff_priv.accounting import accountants
from tff_priv.accounting import ledger as ledger_lib

_FORMAT = 'tff_priv.IndividualLedger/1'
# The server view counts each participation without sampling, under the
# relation of the server-view events.
RELATION = 'replace_one'


class IndividualLedger:
  """Per-client composition of server-view events, with an optional filter.

  Budget filter: with `budget_epsilon` set, `admits(client, event)` is False
  for a client whose eps would exceed the budget after one more round of
  `event`; the training program then leaves that client out of the round, so
  no client's composed eps ever exceeds the budget. This per-client stopping
  rule is valid as plain composition when the events a client is charged do
  not depend on the data or on earlier releases (fixed noise: every mechanism
  of the training program); when they do (a CRD schedule driven by the
  released model's validation loss), the guarantee needs an individual Renyi
  filter at a fixed order (Feldman and Zrnic, "Individual Privacy Accounting
  via a Renyi Filter", NeurIPS 2021), which this ledger does not implement.

  Clients with the same history share one accountant computation (`_eps_of`),
  and the ledger counts the clients of each history, so a round costs a few
  accountant calls and work in the clients it charges, not in the population
  (the worst eps is a maximum over the distinct histories).

  Example:
    ledger = IndividualLedger(delta=1e-5, budget_epsilon=8.0)
    for round_num in ...:
      chosen = [c for c in sampled if ledger.admits(c, event)]
      ...  # run the round with `chosen`
      ledger.record(chosen, event)
    ledger.max_epsilon()
  """

  def __init__(
      self,
      delta: float,
      budget_epsilon: Optional[float] = None,
      accountant: str = 'rdp',
  ):
    """Creates an empty ledger.

    Args:
      delta: the delta at which eps is reported, in (0, 1).
      budget_epsilon: a client's eps may not exceed this (None: no filter).
      accountant: 'rdp' or 'pld'.
    """
    self._delta = validation.open_unit('delta', delta)
    if budget_epsilon is not None:
      budget_epsilon = validation.positive('budget_epsilon', budget_epsilon)
    self._budget = budget_epsilon
    self._accountant = validation.one_of(
        'accountant', accountant, accountants.ACCOUNTANTS
    )
    self._events: list[dp_event.DpEvent] = []
    # client -> run-length history ((event index, count), ...).
    self._history: dict[str, tuple] = {}
    # history -> how many clients have it.
    self._histories: collections.Counter = collections.Counter()
    self._cache: dict[tuple, float] = {}
    self._excluded: set[str] = set()
    self._extra = (None, None)  # The last `extra` event and its key.

  @property
  def delta(self) -> float:
    return self._delta

  @property
  def budget_epsilon(self) -> Optional[float]:
    return self._budget

  def _index(self, event: dp_event.DpEvent) -> int:
    if not isinstance(event, dp_event.DpEvent):
      raise TypeError(f'event must be a dp_accounting DpEvent, got {event!r}')
    for i, known in enumerate(self._events):
      if known == event:
        return i
    self._events.append(event)
    return len(self._events) - 1

  def _eps_of(self, history: tuple, extra=None) -> float:
    """eps of a history, and of one more round of event `extra` if given."""
    if not history and extra is None:
      return 0.0
    key = history
    if extra is not None:
      if self._extra[0] is not extra:  # One event for a whole round's clients.
        self._extra = (extra, repr(ledger_lib.encode_event(extra)))
      key = (history, self._extra[1])
    if key not in self._cache:
      ledger = ledger_lib.PrivacyLedger(RELATION)
      for index, count in history:
        ledger.record(self._events[index], count)
      if extra is not None:
        ledger.record(extra)
      self._cache[key] = ledger.epsilon(self._delta, self._accountant)
    return self._cache[key]

  @staticmethod
  def _extended(history: tuple, index: int) -> tuple:
    if history and history[-1][0] == index:
      return history[:-1] + ((index, history[-1][1] + 1),)
    return history + ((index, 1),)

  def _key(self, client: Hashable) -> tuple:
    return self._history.get(str(client), ())

  def record(
      self, clients: Iterable[Hashable], event: dp_event.DpEvent
  ) -> None:
    """Charges one round of `event` (a server-view event) to each client."""
    index = self._index(event)
    for client in clients:
      key = str(client)
      old = self._history.get(key, ())
      new = self._extended(old, index)
      if old:
        self._histories[old] -= 1
        if not self._histories[old]:
          del self._histories[old]
      self._histories[new] += 1
      self._history[key] = new

  def epsilon(self, client: Hashable) -> float:
    """The client's eps at `delta` over the rounds it took part in."""
    return self._eps_of(self._key(client))

  def max_epsilon(self) -> float:
    """The largest eps of any client (0 before any round)."""
    return max((self._eps_of(h) for h in self._histories), default=0.0)

  def participations(self, client: Hashable) -> int:
    return sum(count for _, count in self._key(client))

  def admits(self, client: Hashable, event: dp_event.DpEvent) -> bool:
    """Whether one more round of `event` keeps the client within the budget."""
    if self._budget is None:
      return True
    return self._eps_of(self._key(client), extra=event) <= self._budget

  def filter(
      self, clients: Iterable[Hashable], event: dp_event.DpEvent
  ) -> list:
    """The clients `admits` lets take part; the others are remembered."""
    kept = []
    for client in clients:
      if self.admits(client, event):
        kept.append(client)
      else:
        self._excluded.add(str(client))
    return kept

  @property
  def num_excluded(self) -> int:
    """Clients the filter has left out of at least one round."""
    return len(self._excluded)

  @property
  def num_clients(self) -> int:
    """Clients that took part in at least one round."""
    return len(self._history)

  def report(self) -> dict:
    """JSON-ready: worst eps, clients charged, the filter's work."""
    eps = self.max_epsilon()
    return {
        'max_epsilon': eps if math.isfinite(eps) else str(eps),
        'delta': self._delta,
        'budget_epsilon': self._budget,
        'clients_charged': self.num_clients,
        'max_participations': max(
            (sum(count for _, count in h) for h in self._histories), default=0
        ),
        'clients_excluded_by_budget': self.num_excluded,
        'neighboring_relation': RELATION,
        'accountant': self._accountant,
    }

  def to_json(self) -> str:
    """Exact JSON (events through the ledger's encoder)."""
    return json.dumps(
        {
            'format': _FORMAT,
            'delta': self._delta,
            'budget_epsilon': self._budget,
            'accountant': self._accountant,
            'events': [ledger_lib.encode_event(e) for e in self._events],
            'history': self._history,
            'excluded': sorted(self._excluded),
        }
    )

  @classmethod
  def from_json(cls, text: str) -> 'IndividualLedger':
    data = json.loads(text)
    if not isinstance(data, dict) or data.get('format') != _FORMAT:
      raise ValueError(f'not a serialised IndividualLedger ({_FORMAT})')
    ledger = cls(data['delta'], data['budget_epsilon'], data['accountant'])
    ledger._events = [ledger_lib.decode_event(e) for e in data['events']]
    ledger._history = {
        k: tuple(tuple(run) for run in v) for k, v in data['history'].items()
    }
    ledger._histories = collections.Counter(ledger._history.values())
    ledger._excluded = set(data['excluded'])
    return ledger

  def __eq__(self, other):
    return (
        isinstance(other, IndividualLedger)
        and self.to_json() == other.to_json()
    )
