"""Power, false alarms and calibration of the vectorised factory audit.

`replay` draws a vectorised trial's statistics with numpy and runs the audit's
own decision, so many audits can be replayed in seconds: `power_table` and
`plot_power` give the probability that an audit flags a factory whose true eps
is r times its claim, `calibration` and `plot_calibration` the bounds against
the true eps as the trials grow.
"""

import dataclasses
from typing import Sequence

import dp_accounting
import numpy as np

from tff_priv import validation
from tff_priv.auditing import bounds
from tff_priv.auditing import tradeoff

DELTA = 1e-5
ALPHA = 1e-3
TRIALS = 100_000
SELECTION_FRACTION = 0.2


def gaussian_epsilon(noise_multiplier: float, delta: float = DELTA) -> float:
  """The true eps at delta of one Gaussian mechanism (dp_accounting, PLD)."""
  return float(
      dp_accounting.pld.PLDAccountant()
      .compose(dp_accounting.GaussianDpEvent(noise_multiplier))
      .get_epsilon(delta)
  )


@dataclasses.dataclass(frozen=True)
class Replay:
  """One replayed audit: the decision and its verdict."""

  decision: tradeoff.Decision
  flagged: bool
  max_epsilon_lower_bound: float


def replay(
    true_mu: float,
    claimed_mu: float,
    *,
    trials: int = TRIALS,
    delta: float = DELTA,
    alpha: float = ALPHA,
    selection_fraction: float = SELECTION_FRACTION,
    seed: int = 0,
) -> Replay:
  """The vectorised audit of a true_mu-GDP Gaussian claimed claimed_mu-GDP.

  A vectorised trial of a Gaussian factory (`aggregator_audit`, TFF's
  gaussian_fixed, udp) releases, along the canary direction, N(0, s^2) without
  the canary and N(mu s, s^2) with it, mu = (the canary's shift) / s: for a
  factory whose noise multiplier is z, mu = 1 / z exactly, and its true eps at
  delta is dp_accounting's eps of GaussianDpEvent(z). `replay` draws those
  statistics with numpy and runs the audit's own decision (`tradeoff.decide`,
  the same split and tests). tests/auditing/aggregator_audit_test.py checks
  the real factory against the same numbers.
  """
  rng = np.random.default_rng(seed)
  s0 = rng.standard_normal(trials)
  s1 = rng.standard_normal(trials) + true_mu
  choose, held = tradeoff.split(trials, selection_fraction, rng)
  decision = tradeoff.decide(
      [('canary direction', s0, s1)], choose, held, delta, alpha
  )
  claimed_eps = tradeoff.gdp_epsilon(claimed_mu, delta)
  flagged = (
      decision.mu_lower_bound > claimed_mu
      or decision.epsilon_lower_bound > claimed_eps
  )
  n = decision.evaluation_trials
  return Replay(
      decision,
      flagged,
      bounds.max_epsilon_lower_bound(n, n, delta, alpha / 2.0),
  )


def flag_rate(
    claimed_epsilon: float, ratio: float, *, seeds: int, **kwargs
) -> float:
  """Fraction of `seeds` replayed audits that flag true eps = ratio x claim."""
  delta = kwargs.get('delta', DELTA)
  claimed_mu = tradeoff.gdp_mu(claimed_epsilon, delta)
  true_mu = tradeoff.gdp_mu(ratio * claimed_epsilon, delta)
  flags = sum(
      replay(true_mu, claimed_mu, seed=s, **kwargs).flagged
      for s in range(seeds)
  )
  return flags / seeds


def power_table(
    claims: Sequence[float] = (0.5, 1.0, 2.0, 4.0),
    ratios: Sequence[float] = (1.0, 1.5, 2.0, 10.0),
    *,
    seeds: int = 100,
    **kwargs,
) -> list[dict]:
  """[{claim, ratio, flag_rate, seeds}] over the grid (replayed audits)."""
  seeds = validation.int_at_least('seeds', seeds, 1)
  return [
      dict(
          claim=c,
          ratio=r,
          seeds=seeds,
          flag_rate=flag_rate(c, r, seeds=seeds, **kwargs),
      )
      for c in claims
      for r in ratios
  ]


def calibration(
    noise_multipliers: Sequence[float] = (0.5, 1.0, 2.0, 4.0),
    trial_counts: Sequence[int] = (1_000, 10_000, 100_000, 1_000_000),
    *,
    seeds: int = 5,
    delta: float = DELTA,
    alpha: float = ALPHA,
) -> list[dict]:
  """Median bounds of the audit of an honest Gaussian against its true eps.

  Returns rows {z, true_epsilon, trials, epsilon_lower_bound (median of the
  (eps, delta) bound), mu_epsilon_lower_bound (median eps at delta of the mu
  bound), max_epsilon_lower_bound}.
  """
  rows = []
  for z in noise_multipliers:
    true_eps = gaussian_epsilon(z, delta)
    for n in trial_counts:
      runs = [
          replay(1.0 / z, 1.0 / z, trials=n, delta=delta, alpha=alpha, seed=s)
          for s in range(seeds)
      ]
      rows.append(
          dict(
              z=z,
              true_epsilon=true_eps,
              trials=n,
              epsilon_lower_bound=float(
                  np.median([r.decision.epsilon_lower_bound for r in runs])
              ),
              mu_epsilon_lower_bound=float(
                  np.median(
                      [
                          tradeoff.gdp_epsilon(r.decision.mu_lower_bound, delta)
                          for r in runs
                      ]
                  )
              ),
              max_epsilon_lower_bound=runs[0].max_epsilon_lower_bound,
          )
      )
  return rows


def _pyplot():
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  return plt


def plot_power(
    path: str,
    claims: Sequence[float] = (0.5, 1.0, 2.0, 4.0),
    ratios: Sequence[float] = (1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 2.0),
    *,
    seeds: int = 40,
    **kwargs,
) -> list[dict]:
  """Flag rate vs true/claimed eps ratio, a curve per claim (PNG); the rows."""
  rows = power_table(claims, ratios, seeds=seeds, **kwargs)
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(6, 4))
  for i, c in enumerate(claims):
    ys = [r['flag_rate'] for r in rows if r['claim'] == c]
    ax.plot(ratios, ys, 'o-', color=f'C{i}', label=f'claimed eps {c:g}')
  ax.axhline(0.95, color='k', lw=0.6, ls='--')
  ax.axvline(1.5, color='k', lw=0.6, ls=':')
  ax.set_xlabel('true eps / claimed eps (Gaussian factory, delta 1e-5)')
  ax.set_ylabel(f'fraction of {seeds} audits that fail')
  trials = kwargs.get('trials', TRIALS)
  ax.set_title(
      f'Vectorised audit, {trials:,} trials per set, '
      f'alpha {kwargs.get("alpha", ALPHA):g}'
  )
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return rows


def plot_calibration(path: str, **kwargs) -> list[dict]:
  """Median bounds vs trials against the true eps of honest Gaussians (PNG)."""
  rows = calibration(**kwargs)
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(6, 4))
  zs = sorted({r['z'] for r in rows})
  for i, z in enumerate(zs):
    sub = [r for r in rows if r['z'] == z]
    n = [r['trials'] for r in sub]
    color = f'C{i}'
    ax.axhline(sub[0]['true_epsilon'], color=color, lw=0.8)
    ax.plot(
        n,
        [r['mu_epsilon_lower_bound'] for r in sub],
        'o-',
        color=color,
        label=f'z={z:g} (true eps {sub[0]["true_epsilon"]:.2f}): mu bound',
    )
    ax.plot(
        n,
        [r['epsilon_lower_bound'] for r in sub],
        's--',
        color=color,
        label=f'z={z:g}: (eps, delta) bound',
    )
  ax.plot(
      n,
      [r['max_epsilon_lower_bound'] for r in sub],
      'k:',
      lw=0.8,
      label='most the (eps, delta) bound can show',
  )
  ax.set_xscale('log')
  ax.set_ylim(0, max(r['true_epsilon'] for r in rows) * 1.3)
  ax.set_xlabel('trials per set')
  ax.set_ylabel('eps at delta 1e-5 (median of audits)')
  ax.set_title('Honest Gaussian mechanisms: lower bounds vs true eps (lines)')
  ax.legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return rows


def format_power_table(rows) -> str:
  """The rows as a Markdown table, claims down, ratios across."""
  claims = sorted({r['claim'] for r in rows})
  ratios = sorted({r['ratio'] for r in rows})
  lines = [
      '| claimed eps | '
      + ' | '.join(f'true = {r:g} x claim' for r in ratios)
      + ' |',
      '|---' * (len(ratios) + 1) + '|',
  ]
  for c in claims:
    cells = [
        next(r for r in rows if r['claim'] == c and r['ratio'] == x)
        for x in ratios
    ]
    lines.append(
        f'| {c:g} | '
        + ' | '.join(f"{r['flag_rate']:.3f}" for r in cells)
        + ' |'
    )
  return '\n'.join(lines)
