"""Steinke, Nasr, Jagielski's one-run audit of a udp training run, as a row.

`config` is the tiny record-level run of docs/auditing.md (digits, every
client each round, 10 real examples and m / 10 canary slots per client, one
full-batch step of rate 5 per round, 30 rounds, eps 1 by default: a claim
200 canaries can refute, as the noise-free run's bound of 2.45 shows; at
eps 4 the row could not fail, 200 canaries show at most 3.80); `row` turns
its summary into a row of
`tff_priv.auditing.catalogue.format_table` (accounted eps of the whole run
against the analyst, the one-run lower bound, the largest bound m canaries
can show, the verdict).
"""

import math
from typing import Any, Mapping

from tff_priv import validation
from tff_priv.auditing import canary_examples
from tff_priv.auditing import one_run
from tff_priv.program import training


def config(
    canaries: int = 200, rounds: int = 30, epsilon: float = 1.0, seed: int = 1
) -> training.RunConfig:
  """The run: udp at `epsilon` (whole run, delta 1e-5) with m canary examples."""
  return training.RunConfig(
      task='digits',
      batch_size=20,
      mechanism='udp',
      params={'clip': 1.0, 'epsilon': validation.positive('epsilon', epsilon)},
      clients_per_round=10,
      total_rounds=validation.int_at_least('rounds', rounds, 1),
      eval_every=rounds,
      client_learning_rate=5.0,
      max_client_examples=10,
      sampling_seed=seed,
      audit_canaries=validation.int_at_least('canaries', canaries, 2),
  )


def max_showable(m: int, delta: float) -> float:
  """The largest bound m canaries can give: every guess right, best grid row."""
  fractions = canary_examples.GUESS_FRACTIONS
  best = 0.0
  for f in fractions:
    r = 2 * min(m // 2, max(1, math.ceil(f * m / 2)))
    best = max(best, one_run.epsilon_lower_bound(
        m, r, r, delta, canary_examples.ALPHA / len(fractions)
    ))
  return best


def row(run_config: training.RunConfig, summary: Mapping[str, Any]) -> dict:
  """A `catalogue.format_table` row from a finished run's summary."""
  entry = summary['privacy']['empirical']
  claim = entry['accounted_epsilon']
  bound = entry['epsilon_lower_bound']
  return {
      'mechanism': 'udp training run (one-run audit)',
      'setting': (
          f"{run_config.task}, {run_config.total_rounds} rounds, "
          f"{entry['num_canaries']} canary examples; eps of the whole run"
      ),
      'accounted_epsilon': claim,
      'empirical_lower_bound': bound,
      'max_showable': max_showable(entry['num_canaries'], entry['delta']),
      'trials': 1,
      'verdict': 'pass' if bound <= claim else 'FAIL',
      'unit': 'example',
      'delta': entry['delta'],
      'guesses': entry['guesses'],
      'correct': entry['correct'],
  }

