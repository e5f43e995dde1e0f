"""A run's privacy accounting: both adversaries, charged from the factory.

Every round is charged through one path, `RunPrivacy`: the DpEvent the
aggregation factory keeps in its state, read for each adversary its
`Guarantee` names (the analyst, under the round's client sampling; the
server, per client), never a measurement or a realised count. Which eps is
reported for each, and when (a budget filter, adaptive noise): `RunPrivacy`.
"""

import dataclasses
import json
import math
from typing import Any, Iterable, Optional

from dp_accounting import dp_event

from tff_priv.accounting import accountants
from tff_priv.accounting import filters
from tff_priv.accounting import guarantees as guarantees_lib
from tff_priv.accounting import individual
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.accounting import sampling as sampling_lib

_FORMAT = 'tff_priv.RunPrivacy/1'
_UNSET = object()  # No round admitted since the last charge.

_UNIT_WORDS = {
    'example': 'one example of a client',
    'client': "all of one client's data",
    'value': 'each reported value of a client',
}


def _finite(x: float):
  return x if math.isfinite(x) else str(x)


@dataclasses.dataclass
class RunPrivacy:
  """The analyst ledger, the per-client ledger, and how to charge a round.

  Every round is charged through one path: the DpEvent the aggregation factory
  keeps in its state (`tff_priv.accounting.guarantees.extract_dp_event`), read
  for each adversary its `Guarantee` names:

  * the analyst, who sees only the released models: the round's event under the
    round's client sampling, in a `PrivacyLedger` (amplification by sampling);
  * the server, which picks the clients: each client that took part is charged
    the server-view event (no amplification, replace-one) in an
    `IndividualLedger`, whose optional budget filter leaves out of a round any
    client the round would take over the budget. A factory whose noise the
    server adds itself ('central') gives no guarantee against the server: no
    individual ledger is kept and the report says so.

  Where a server ledger is kept, both ledgers bound the released models, so the
  analyst's figure is the smaller of the two: the amplified ledger's eps (valid
  only while the budget filter has left no client out, since filtering changes
  the sampling the amplification assumes) and the worst client's server-view
  eps. (For a Gaussian sum under add-or-remove-one the server view's replace-one
  reading at z / 2 dominates: removing a client is replacing its update by 0.)

  When a mechanism chooses its rounds' noise from earlier releases (CRD), the
  composition of the events that happened is an odometer reading, not a
  guarantee: such a run is built with `adaptive` bounds (`filters.RdpBound`, a
  Renyi filter that holds on every path), and those are its reported eps for
  both adversaries from round 1 on; the realised composition stays in the
  ledgers as a labelled diagnostic.

  Nothing here reads a measurement or a realised count: the charge is the
  factory's event, a function of the configuration and the round.

  Attributes:
    guarantee: the factory's `Guarantee`, or None for a non-private run.
    sampling: the client `Sampling` the analyst ledger amplifies by
      (`ClientSampling.ledger_sampling()`; none: no amplification).
    delta: the run's delta.
    analyst: the analyst-view `PrivacyLedger`.
    server: the server-view `IndividualLedger` (None when the server adds
      the noise itself, or the run is not private).
    adaptive: (analyst, server) `filters.RdpBound`s of a run whose events
      are chosen adaptively; None: the events are fixed before the run and
      the ledgers' compositions are the guarantees.
  """

  guarantee: Optional[guarantees_lib.Guarantee]
  sampling: sampling_lib.Sampling
  delta: float
  analyst: ledger_lib.PrivacyLedger
  server: Optional[individual.IndividualLedger]
  adaptive: Optional[tuple[filters.RdpBound, filters.RdpBound]] = None
  unamplified_rounds: int = 0
  admitted_event: Any = dataclasses.field(default=_UNSET, repr=False)

  @classmethod
  def create(
      cls,
      guarantee: Optional[guarantees_lib.Guarantee],
      sampling: sampling_lib.Sampling,
      delta: float,
      budget_epsilon: Optional[float] = None,
      adaptive: Optional[tuple[filters.RdpBound, filters.RdpBound]] = None,
  ) -> 'RunPrivacy':
    if adaptive is not None and budget_epsilon is not None:
      raise ValueError(
          'a server budget filters clients by their realised composition, '
          'which is not a guarantee when the noise is chosen adaptively '
          '(CRD): drop server_budget or crd_beta'
      )
    server = None
    if guarantee is not None and guarantee.noise != 'central':
      server = individual.IndividualLedger(delta, budget_epsilon)
    elif budget_epsilon is not None:
      raise ValueError(
          'a server budget needs a mechanism private against the server (its '
          'noise added by the clients); this one has none'
      )
    sampling = sampling_lib.Sampling.of(sampling)
    if sampling.kind == 'none' and guarantee is not None:
      # No amplification ('epoch' sampling): the event's own relation.
      relation = guarantee.neighboring_relation
    elif sampling.kind == 'fixed':
      relation = 'replace_one'
    else:
      relation = 'add_or_remove_one'
    return cls(
        guarantee,
        sampling,
        delta,
        ledger_lib.PrivacyLedger(relation),
        server,
        adaptive,
    )

  def admit(self, clients: Iterable[Any], event: Optional[dp_event.DpEvent]):
    """The sampled clients the budget filter lets take part in an `event` round.

    The round must then be charged exactly `event` (`charge` checks it).
    """
    clients = list(clients)
    self.admitted_event = event
    if self.server is None or event is None:
      return clients
    return self.server.filter(clients, self.guarantee.server_view_event(event))

  def charge(self, event: Optional[dp_event.DpEvent], clients: Iterable[Any]):
    """Charges one round of `event` (the factory's; None: not private).

    Raises:
      RuntimeError: a budget filter admitted the round's clients for another
        event than the one the round released.
    """
    admitted, self.admitted_event = self.admitted_event, _UNSET
    if (
        self.server is not None
        and self.server.budget_epsilon is not None
        and admitted is not _UNSET
        and admitted != event
    ):
      raise RuntimeError(
          f'the budget filter admitted this round for {admitted}, but the '
          f'round released {event}: a client could exceed the budget'
      )
    if event is None:
      self.analyst.record(dp_event.NonPrivateDpEvent())
      return
    sampled = guarantees_lib.sampled_event(
        event, self.guarantee.neighboring_relation, self.sampling
    )
    if (
        accountants.can_count('rdp', sampled, self.analyst.neighboring_relation)
        is not None
    ):
      # dp_accounting knows no amplification for this event under this
      # sampling (pure-eps releases under fixed-size sampling): charged
      # without it, an upper bound.
      sampled = event
      self.unamplified_rounds += 1
    self.analyst.record(sampled)
    if self.server is not None:
      self.server.record(clients, self.guarantee.server_view_event(event))

  def analyst_epsilon(self) -> float:
    """eps against the analyst at `delta` (see the class docstring)."""
    if self.adaptive is not None:
      return min(bound.epsilon(self.delta) for bound in self.adaptive)
    eps = self.analyst.epsilon(self.delta)
    if self.server is not None:
      if self.server.num_excluded:
        eps = math.inf  # The amplification's sampling no longer holds.
      eps = min(eps, self.server.max_epsilon())
    return eps

  def server_epsilon(self) -> Optional[float]:
    """The worst client's eps against the server (None: no guarantee)."""
    if self.server is None:
      return None
    if self.adaptive is not None:
      return self.adaptive[1].epsilon(self.delta)
    return self.server.max_epsilon()

  def report(self) -> list[dict]:
    """The `guarantees` list of a summary: one entry per adversary."""
    if self.guarantee is None:
      return [
          {
              'adversary': 'analyst',
              'unit': 'client',
              'neighboring_relation': self.analyst.neighboring_relation,
              'accountant': 'none',
              'epsilon': 'inf',
              'delta': self.delta,
              'meaning': (
                  'no privacy mechanism: the models are released as trained'
              ),
          }
      ]
    unit = _UNIT_WORDS[self.guarantee.unit]
    entries = [self._analyst_report(unit)]
    entries.append(self._server_report(unit))
    return entries

  def _analyst_report(self, unit: str) -> dict:
    """The analyst's entry of `report` (a private run); `unit` in words."""
    if self.sampling.kind == 'none' and (
        self.guarantee.neighboring_relation == 'replace_special'
    ):
      amplified = (
          'no amplification by sampling (each client as often as the '
          "stream's participation schedule allows)"
      )
    elif self.sampling.kind == 'none':
      amplified = (
          "the mechanism's events, which hold its sampling (BandMF: "
          'Poisson inside cyclic groups)'
      )
    elif not self.unamplified_rounds:
      amplified = 'client sampling amplified'
    else:
      amplified = 'without sampling amplification (none known for these events)'
    analyst = {
        'adversary': 'analyst',
        'unit': self.guarantee.unit,
        'neighboring_relation': self.analyst.neighboring_relation,
        'accountant': f'dp_accounting RdpAccountant, {amplified}',
        'epsilon': _finite(self.analyst_epsilon()),
        'delta': self.delta,
        'meaning': (
            f'someone who sees only the released models learns about {unit} '
            'at most what (epsilon, delta)-DP allows'
        ),
    }
    if self.adaptive is not None:
      analyst['accountant'] = (
          "events chosen adaptively (each round's noise depends on earlier "
          f'releases): {self.adaptive[0].description} (Feldman and Zrnic '
          '2021), converted by dp_accounting at the best order fixed before '
          'the run; the composition of the events this run released '
          '(analyst_ledger) is an ex-post diagnostic, not a guarantee'
      )
    else:
      analyst['accountant'] += '; events fixed before the run'
    if self.server is not None:
      analyst['accountant'] += (
          "; the smaller of that and the worst client's server-view epsilon"
          ', which is given the participation this run realised (how many '
          'rounds each client took part in), not a figure fixed before the run'
          + (
              ' (the budget filter left clients out: no amplification)'
              if self.server.num_excluded
              else ''
          )
      )
    return analyst

  def _server_report(self, unit: str) -> dict:
    """The server's entry of `report` (a private run); `unit` in words."""
    if self.server is None:
      return {
          'adversary': 'server',
          'unit': self.guarantee.unit,
          'neighboring_relation': individual.RELATION,
          'accountant': 'none',
          'epsilon': 'inf',
          'delta': self.delta,
          'meaning': (
              "the server sees the clients' updates before the noise: no "
              'guarantee against it'
          ),
      }
    report = self.server.report()
    return {
        'adversary': 'server',
        'unit': self.guarantee.unit,
        'neighboring_relation': individual.RELATION,
        'accountant': (
            'dp_accounting RdpAccountant per client over the rounds it took '
            'part in, no amplification'
            if self.adaptive is None
            else f'{self.adaptive[1].description}, no amplification (events '
            'chosen adaptively: the realised per-client composition is not '
            'a guarantee)'
        ),
        'epsilon': _finite(self.server_epsilon()),
        'delta': self.delta,
        'clients_charged': report['clients_charged'],
        'max_participations': report['max_participations'],
        'budget_epsilon': report['budget_epsilon'],
        'clients_excluded_by_budget': report['clients_excluded_by_budget'],
        'meaning': (
            f'the server, which picks the clients and sees what reaches it, '
            f'learns about {unit} at most what (epsilon, delta)-DP allows; '
            "epsilon is the worst client's"
        ),
    }

  def to_json(self) -> str:
    return json.dumps(
        {
            'format': _FORMAT,
            'unamplified_rounds': self.unamplified_rounds,
            'analyst': json.loads(self.analyst.to_json()),
            'server': (
                None
                if self.server is None
                else json.loads(self.server.to_json())
            ),
        }
    )

  def restore(self, text: str) -> None:
    """Loads the ledgers a checkpoint saved (`to_json`)."""
    data = json.loads(text)
    if not isinstance(data, dict) or data.get('format') != _FORMAT:
      raise ValueError(f'not a serialised run privacy record ({_FORMAT})')
    self.analyst = ledger_lib.PrivacyLedger.from_json(
        json.dumps(data['analyst'])
    )
    self.unamplified_rounds = data['unamplified_rounds']
    if (data['server'] is None) != (self.server is None):
      raise ValueError('the checkpoint was written by another mechanism')
    if self.server is not None:
      self.server = individual.IndividualLedger.from_json(
          json.dumps(data['server'])
      )
