"""Steinke, Nasr, Jagielski's one-run audit of a udp training run, as a row.

`config` is the tiny record-level run of docs/auditing.md; `row` turns its
summary into a row of `tff_priv.auditing.catalogue.format_table` (accounted
eps of the whole run against the analyst, the one-run lower bound, the
largest bound m canaries can show, the verdict).
"""

import dataclasses
import math
import os
from typing import Any, Callable, Mapping, Optional, Sequence

from tff_priv import validation
from tff_priv.auditing import canary_examples
from tff_priv.auditing import one_run
from tff_priv.program import training

# Canaries that interfere less: 784 input values per canary (>= 200 canaries),
# one linear layer, 10 clients as digits has.
LOW_INTERFERENCE = {
    'task': 'mnist5k',
    'task_options': {'num_clients': 10, 'model': 'softmax'},
}


def config(
    canaries: int = 200,
    rounds: int = 30,
    epsilon: float = 1.0,
    seed: int = 1,
    *,
    task: str = 'digits',
    task_options: Optional[Mapping[str, Any]] = None,
) -> training.RunConfig:
  """The run: udp at `epsilon` (whole run, delta 1e-5) with m canary examples.

  The tiny record-level run of docs/auditing.md: digits, every client each
  round, 10 real examples and m / 10 canary slots per client, one full-batch
  step of rate 5 per round, 30 rounds, eps 1 by default: a claim 200 canaries
  can refute, as the noise-free run's bound of 2.45 shows; at eps 4 the row
  could not fail, 200 canaries show at most 3.80.

  `task` / `task_options`: 'digits' (10 clients, 8x8 inputs: 200 canaries of
  64 values interfere) by default; `LOW_INTERFERENCE` is mnist5k's softmax
  regression over 10 clients (784 inputs >= the canaries: nearly orthogonal
  canary gradients).
  """
  return training.RunConfig(
      task=task,
      task_options=dict(task_options or {}),
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
    best = max(
        best,
        one_run.epsilon_lower_bound(
            m, r, r, delta, canary_examples.ALPHA / len(fractions)
        ),
    )
  return best


def row(run_config: training.RunConfig, summary: Mapping[str, Any]) -> dict:
  """A `catalogue.format_table` row from a finished run's summary."""
  entry = summary['privacy']['empirical']
  claim = entry['accounted_epsilon']
  bound = entry['epsilon_lower_bound']
  return {
      'mechanism': 'udp training run (one-run audit)',
      'setting': (
          f'{run_config.task}, {run_config.total_rounds} rounds, '
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
      # Mahloujifar et al.'s f-DP bound from the same canaries (a bound on
      # eps for a run whose trade-off curve is Gaussian).
      'fdp_mu_lower_bound': entry['fdp_mu_lower_bound'],
      'fdp_epsilon_lower_bound': entry['fdp_epsilon_lower_bound'],
  }


def noise_sweep(
    fractions: Sequence[float],
    root: str,
    *,
    canaries: int = 200,
    rounds: int = 30,
    epsilon: float = 1.0,
    task: str = 'digits',
    task_options: Optional[Mapping[str, Any]] = None,
    progress: Optional[Callable[[dict], None]] = None,
) -> list[dict]:
  """Both one-run bounds of the run at fractions of the noise eps needs.

  The run of `config` is calibrated to `epsilon` (its noise multiplier z);
  each fraction f runs it again with z f (0: no noise) and reads Steinke et
  al.'s bound and the f-DP one from the same canaries. A claim of `epsilon`
  is refuted by a bound above it: the larger the fractions a bound refutes,
  the stronger the audit (`largest_refuted`). Runs go to `root`/<f>
  (resumable).
  """
  base = config(canaries, rounds, epsilon, task=task, task_options=task_options)
  summary = training.run(base, os.path.join(root, 'calibrated'), progress=False)
  z = summary['parameters']['resolved']['noise_multiplier']
  rows = []
  for f in fractions:
    f = validation.non_negative('fraction', f)
    params = {'clip': base.params['clip'], 'noise_multiplier': z * f}
    run_config = dataclasses.replace(base, params=params)
    entry = training.run(
        run_config, os.path.join(root, f'fraction_{f:g}'), progress=False
    )['privacy']['empirical']
    row = {
        'fraction': f,
        'noise_multiplier': z * f,
        'steinke_epsilon_lower_bound': entry['epsilon_lower_bound'],
        'fdp_mu_lower_bound': entry['fdp_mu_lower_bound'],
        'fdp_epsilon_lower_bound': entry['fdp_epsilon_lower_bound'],
        'claimed_epsilon': epsilon,
    }
    rows.append(row)
    if progress is not None:
      progress(row)
  return rows


def largest_refuted(rows: Sequence[dict], key: str) -> Optional[float]:
  """The largest noise fraction whose bound `key` refutes the claim (None)."""
  refuted = [r['fraction'] for r in rows if r[key] > r['claimed_epsilon']]
  return max(refuted) if refuted else None
