"""The per-client ledger and its budget filter at a production population.

`run` drives `accounting.IndividualLedger` as the training program does for
the server's view: each round draws `per_round` of `num_clients` clients
(uniformly, without replacement), lets the budget filter admit them, charges
the admitted ones one server-view Gaussian event, and reads the worst
client's eps (what a round's row releases); every `checkpoint_every` rounds
it serialises the ledger (what a checkpoint writes). Reports the time, the
resident memory this process gained, and the ledger's figures.
"""

import statistics
import time
from typing import Any, Optional

from dp_accounting import dp_event
import numpy as np

from tff_priv import validation
from tff_priv.accounting import individual
from tff_priv.benchmarks import memory


def run(
    num_clients: int = 342_477,
    per_round: int = 1000,
    rounds: int = 1000,
    *,
    noise_multiplier: float = 2.0,
    budget_epsilon: Optional[float] = 8.0,
    checkpoint_every: Optional[int] = 100,
    delta: float = 1e-5,
    seed: int = 0,
) -> dict[str, Any]:
  """Times `rounds` rounds of the ledger (see the module docstring)."""
  num_clients = validation.int_at_least('num_clients', num_clients, 1)
  per_round = validation.int_at_least('per_round', per_round, 1)
  rounds = validation.int_at_least('rounds', rounds, 1)
  if per_round > num_clients:
    raise ValueError(
        f'per_round ({per_round}) must be at most num_clients ({num_clients})'
    )
  event = dp_event.GaussianDpEvent(noise_multiplier)
  ledger = individual.IndividualLedger(delta, budget_epsilon)
  rng = np.random.default_rng(seed)
  ids = [f'client_{i:06d}' for i in range(num_clients)]
  before = memory.tree_rss_mb()
  round_seconds, json_seconds, json_mb = [], [], None
  start = time.perf_counter()
  with memory.Sampler() as sampler:
    sampler.label = 'ledger'
    for r in range(1, rounds + 1):
      t = time.perf_counter()
      drawn = [
          ids[i] for i in rng.choice(num_clients, per_round, replace=False)
      ]
      ledger.record(ledger.filter(drawn, event), event)
      worst = ledger.max_epsilon()
      round_seconds.append(time.perf_counter() - t)
      if checkpoint_every and r % checkpoint_every == 0:
        t = time.perf_counter()
        text = ledger.to_json()
        json_seconds.append(time.perf_counter() - t)
        json_mb = len(text) / 2.0**20
  seconds = time.perf_counter() - start
  report = ledger.report()
  return dict(
      num_clients=num_clients,
      per_round=per_round,
      rounds=rounds,
      seconds=seconds,
      median_round_seconds=statistics.median(round_seconds),
      last_round_seconds=round_seconds[-1],
      to_json_seconds=max(json_seconds, default=None),
      json_mb=json_mb,
      memory_gained_mb=sampler.peaks['ledger'] - before,
      max_epsilon=worst,
      clients_charged=report['clients_charged'],
      max_participations=report['max_participations'],
      clients_excluded_by_budget=report['clients_excluded_by_budget'],
  )
