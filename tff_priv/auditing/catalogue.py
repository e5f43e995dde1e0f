"""Audits of every tff_priv factory and TFF's DP-FedAvg at one set of settings.

`quickstart_settings` builds each mechanism near the README quickstart (eps 8
at delta 1e-5 over 20 rounds, 10 clients a round, Poisson rate 0.1; LDP-FL at
eps0 = 5 per value, radius 0.01) on a few-hundred-value vector instead of a
model; `audit_table` audits one round of each (`audit_aggregator`) and
`format_table` prints the results.
"""

import dataclasses
import json
import math
from typing import Any, Callable, Optional, Sequence

import numpy as np
import tensorflow_federated as tff

from tff_priv import validation
from tff_priv.accounting import calibration
from tff_priv.accounting import sampling as sampling_lib
from tff_priv.aggregators import bandmf as bandmf_factory
from tff_priv.aggregators import blt as blt_factory
from tff_priv.aggregators import distortion
from tff_priv.aggregators import ldp
from tff_priv.aggregators import smp
from tff_priv.aggregators import udp
from tff_priv.auditing import aggregator_audit
from tff_priv.mechanisms import bandmf as bandmf_lib
from tff_priv.mechanisms import blt as blt_lib

QUICKSTART_EPSILON = 8.0
QUICKSTART_DELTA = 1e-5
QUICKSTART_ROUNDS = 20
QUICKSTART_CLIENTS = 10
QUICKSTART_SAMPLING = 0.1


@dataclasses.dataclass(frozen=True)
class Setting:
  """One mechanism to audit: its factory and the audit's client sets."""

  mechanism: str
  setting: str
  make_factory: Callable[[], Any]
  dimension: int
  num_clients: int
  canary: Optional[Callable[[int], np.ndarray]] = None


def quickstart_settings(
    dimension: int = 200,
    *,
    noise_multiplier: Optional[float] = None,
    ldp_epsilon: float = 5.0,
) -> list[Setting]:
  """The settings of the table in docs/auditing.md.

  The Gaussian mechanisms use the noise multiplier z that the quickstart's
  calibration gives (eps 8, 20 rounds, Poisson 0.1); local-noise factories
  are audited with one client, whose released mean is its upload (the
  server's view). UDP's canary has norm Delta / 2 and replaces its negation
  (the two uploads differ by the sensitivity Delta = 1).

  Args:
    dimension: values per client.
    noise_multiplier: z of the Gaussian mechanisms; default the quickstart's.
    ldp_epsilon: LDP-FL's eps0 per value.
  """
  dimension = validation.int_at_least('dimension', dimension, 1)
  eps0 = validation.positive('ldp_epsilon', ldp_epsilon)
  if noise_multiplier is None:
    z = calibration.calibrate_noise_multiplier(
        QUICKSTART_EPSILON,
        QUICKSTART_DELTA,
        QUICKSTART_ROUNDS,
        sampling=sampling_lib.Sampling.poisson(QUICKSTART_SAMPLING),
    )
  else:
    z = validation.positive('noise_multiplier', noise_multiplier)
  k = QUICKSTART_CLIENTS
  return [
      *_central_settings(z, k, dimension),
      *_stream_settings(z, k, dimension),
      *_client_noise_settings(z, k, eps0, dimension),
  ]


def _central_settings(z, k, dimension) -> list[Setting]:
  """TFF's DP-FedAvg, with a fixed clip and with adaptive clipping."""
  return [
      Setting(
          'dp_fedavg (TFF gaussian_fixed)',
          f'z={z:.3f}, C=1, K={k}',
          lambda: tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
              noise_multiplier=z, clients_per_round=k, clip=1.0
          ),
          dimension,
          k,
      ),
      Setting(
          'dp_fedavg adaptive (TFF gaussian_adaptive)',
          f'z={z:.3f} (value and clipped count), q=0.5, K={k}, clip 0.1 in '
          'round 1',
          # The clipped count's std z (its multiplier 2z): valid at any z
          # (TFF's default 0.05 K needs z < 0.1 K).
          lambda: (
              tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
                  noise_multiplier=z,
                  clients_per_round=k,
                  target_unclipped_quantile=0.5,
                  clipped_count_stddev=z,
              )
          ),
          # A worst-case canary: at the clip of round 1 (TFF's initial 0.1).
          dimension,
          k,
          lambda d: np.full(d, 0.1 / math.sqrt(d)),
      ),
  ]


def _stream_settings(z, k, dimension) -> list[Setting]:
  """The stream factories: BLT's and BandMF's first round."""
  # BLT: the strategy --mechanism=blt runs for a stream of the quickstart's
  # rounds, its noise scaled so that the stream's claim is Gaussian(z). The
  # audit sees the stream's first round only (noise z s C, s the stream's
  # sensitivity > 1), so it is loose by s in mu.
  blt = blt_lib.optimize(QUICKSTART_ROUNDS, error='max')
  blt_sensitivity = blt.sensitivity(QUICKSTART_ROUNDS)
  # BandMF at its most bands for the quickstart's 100 clients, b = N / K =
  # 10: every client of its group takes part (q = 1, so the claim is the
  # Gaussian(z) a fixed-participation audit can test; amplification by
  # sampling is not audited here). Round 1's noise is z C / c_0 >= z C: the
  # audit of that round is loose by 1 / c_0 in mu.
  bands = round(1 / QUICKSTART_SAMPLING)
  band = bandmf_lib.band_choice(QUICKSTART_ROUNDS, bands * k, k, bands)
  return [
      Setting(
          'blt (BLTFactory)',
          f'z={z * blt_sensitivity:.3f}, C=1, K={k}, round 1 of a '
          f'{QUICKSTART_ROUNDS}-round stream',
          lambda: blt_factory.BLTFactory(
              z * blt_sensitivity,
              k,
              1.0,
              list(blt.buf_decay),
              list(blt.output_scale),
              QUICKSTART_ROUNDS,
          ),
          dimension,
          k,
      ),
      Setting(
          'bandmf (BandMFFactory)',
          f'z={z:.3f}, C=1, K={k}, b={bands}, q=1, round 1 of a cycle',
          lambda: bandmf_factory.BandMFFactory(
              z, k, 1.0, list(band.coefs), band.sampling_probability
          ),
          dimension,
          k,
      ),
  ]


def _client_noise_settings(z, k, eps0, dimension) -> list[Setting]:
  """smp's secure sum, and the local-noise factories with one client."""

  def udp_canary(d):
    return np.full(d, 0.5 / math.sqrt(d))

  return [
      Setting(
          'smp (SparsifiedSecureSumFactory)',
          f'z={z:.3f}, C=1, p=0.1, K={k}, rand_k',
          lambda: smp.SparsifiedSecureSumFactory(z, 1.0, 0.1, k, mask_seed=0),
          dimension,
          k,
      ),
      Setting(
          'udp (GaussianUDPFactory)',
          f'sigma={z:.3f}, Delta=1, 1 client',
          lambda: udp.GaussianUDPFactory(
              z,
              sensitivity=1.0,
              inner_agg_factory=tff.aggregators.UnweightedMeanFactory(),
          ),
          dimension,
          1,
          udp_canary,
      ),
      Setting(
          'distortion (DistortionFactory)',
          f'sigma_e={2 * z:.3f}, C=1, 1 client',
          lambda: distortion.DistortionFactory(
              noise_stddev=2 * z, clip=1.0, parameter_variance=1e-4
          ),
          dimension,
          1,
      ),
      Setting(
          'ldp (LDPEncodeFactory)',
          f'eps0={eps0:g}, r=0.01, d={dimension}, 1 client',
          lambda: ldp.LDPEncodeFactory(eps0, radius=0.01),
          dimension,
          1,
      ),
      Setting(
          'ldp (LDPEncodeFactory)',
          f'eps0={eps0:g}, r=0.01, d=1, 1 client',
          lambda: ldp.LDPEncodeFactory(eps0, radius=0.01),
          1,
          1,
      ),
  ]


def audit_table(
    settings: Sequence[Setting],
    *,
    trials: int,
    vectorized_trials: Optional[int] = None,
    delta: float = QUICKSTART_DELTA,
    seed: int = 0,
    **kwargs,
) -> list[tuple[Setting, aggregator_audit.AuditResult]]:
  """`audit_aggregator` on each setting; kwargs go to it.

  `trials` per set for factories audited run by run, `vectorized_trials`
  (default `trials`) for those whose trials are vectorised
  (`aggregator_audit.vectorizable`).
  """
  rows = []
  for setting in settings:
    canary = setting.canary(setting.dimension) if setting.canary else None
    factory = setting.make_factory()
    n = trials
    if (
        vectorized_trials is not None
        and kwargs.get('vectorized') is not False
        and (aggregator_audit.vectorizable(factory, setting.num_clients))
    ):
      n = vectorized_trials
    result = aggregator_audit.audit_aggregator(
        factory,
        value_type=tff.TensorType(np.float32, [setting.dimension]),
        num_clients=setting.num_clients,
        trials=n,
        delta=delta,
        canary=canary,
        seed=seed,
        **kwargs,
    )
    rows.append((setting, result))
  return rows


def _row(setting, result):
  return {
      'mechanism': setting.mechanism,
      'setting': setting.setting,
      'accounted_epsilon': result.claimed_epsilon,
      'empirical_lower_bound': result.epsilon_lower_bound,
      'max_showable': result.max_epsilon_lower_bound,
      'mu_lower_bound': result.mu_lower_bound,
      'mu_epsilon_lower_bound': result.mu_epsilon_lower_bound,
      'claimed_mu': (
          result.claimed_mu if math.isfinite(result.claimed_mu) else None
      ),
      'max_showable_epsilon': result.max_showable_epsilon,
      'vectorized': result.vectorized,
      'refuted_by': result.refuted_by,
      'alpha': result.alpha,
      'trials': result.trials,
      'seconds': round(result.seconds, 1),
      'verdict': 'pass' if result.passed else 'FAIL',
      'claimed_dp_event': result.claimed_dp_event,
      'neighboring_relation': result.neighboring_relation,
      'statistic': result.statistic,
      'delta': result.delta,
  }


def format_table(rows, fmt: str = 'text', extra_rows=()) -> str:
  """The rows as a Markdown table ('text') or a JSON list ('json').

  `extra_rows`: rows already in `_row`'s form (e.g. a training run's one-run
  audit, `tff_priv.experiments.one_run_audit.row`), printed after.
  """
  validation.one_of('format', fmt, ('text', 'json'))
  dicts = [_row(s, r) for s, r in rows] + list(extra_rows)
  if fmt == 'json':
    return json.dumps(dicts, indent=2)
  lines = [
      '| mechanism | setting | claimed eps (one round) | (eps, delta) lower '
      'bound (max) | GDP mu lower bound vs claimed mu (its eps) | largest '
      'showable eps | trials | verdict |',
      '|---|---|---|---|---|---|---|---|',
  ]
  for d in dicts:
    if 'mu_lower_bound' in d:
      claimed_mu = d.get('claimed_mu')
      mu = (
          f"{d['mu_lower_bound']:.3f} vs "
          f"{'-' if claimed_mu is None else format(claimed_mu, '.3f')} "
          f"({d['mu_epsilon_lower_bound']:.2f})"
      )
      largest = f"{d['max_showable_epsilon']:.1f}"
    else:  # A one-run row: the f-DP (Gaussian curve) bound in the mu column.
      mu = '-'
      if d.get('fdp_mu_lower_bound') is not None:
        mu = (
            f"{d['fdp_mu_lower_bound']:.3f} f-DP one run "
            f"({d['fdp_epsilon_lower_bound']:.2f})"
        )
      largest = f"{d['max_showable']:.2f}"
    trials = d['trials'] if d['trials'] == 1 else f"{d['trials']:,} x 2"
    if d.get('vectorized'):
      trials += ' (vectorised)'
    verdict = d['verdict'] + (
        f" ({d['refuted_by']})" if d.get('refuted_by') else ''
    )
    lines.append(
        f"| {d['mechanism']} | {d['setting']} | "
        f"{d['accounted_epsilon']:.3f} | {d['empirical_lower_bound']:.3f} "
        f"({d['max_showable']:.2f}) | {mu} | {largest} | {trials} | "
        f'{verdict} |'
    )
  return '\n'.join(lines)


def plot(rows, path: str, extra_rows=()) -> None:
  """`figure` of the rows (and `extra_rows`, `_row`'s form) saved as a PNG."""
  fig = figure([_row(s, r) for s, r in rows] + list(extra_rows))
  fig.savefig(path, dpi=120, bbox_inches='tight')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  plt.close(fig)


def figure(dicts):
  """Each audit as one line of a dot chart on a log eps axis.

  Per row: the claimed eps (black bar), the (eps, delta) lower bound (dot;
  a cross when the audit failed), the eps of the Gaussian-DP mu bound
  (diamond; for a Gaussian claim), and the largest eps the trials can show
  (grey line from the bound). A bound of 0 sits at the left edge (an arrow).
  One line per row, so that rows with one claim do not hide each other.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  values = [
      v
      for d in dicts
      for v in (
          d['accounted_epsilon'],
          d['empirical_lower_bound'],
          d['max_showable'],
          d.get('mu_epsilon_lower_bound') or 0.0,
      )
      if v > 0 and math.isfinite(v)
  ]
  low, high = min(values) / 2, max(values) * 2
  fig, ax = plt.subplots(figsize=(7, 0.45 * len(dicts) + 1.2))
  _plot_rows(ax, dicts, low, high)
  ax.set_xscale('log')
  ax.set_xlim(low, high)
  ax.set_ylim(len(dicts) - 0.5, -0.5)
  ax.set_yticks(range(len(dicts)))
  ax.set_yticklabels(
      [f"{d['mechanism']}\n{d['setting']}" for d in dicts], fontsize=6
  )
  ax.set_xlabel('eps at delta')
  _legend(ax, plt)
  fig.tight_layout()
  return fig


def _plot_rows(ax, dicts, low, high):
  """`figure`'s lines, one per row, on an axis from `low` to `high`."""
  for y, d in enumerate(dicts):
    bound = d['empirical_lower_bound']
    shown = bound if bound > low else low
    ax.plot(
        [shown, d['max_showable']], [y, y], '-', color='0.75', lw=3, zorder=1
    )
    ax.scatter(
        [min(d['accounted_epsilon'], high)],
        [y],
        marker='|',
        s=300,
        color='k',
        zorder=3,
    )
    ax.scatter(
        [shown],
        [y],
        zorder=4,
        s=45,
        marker=('o' if bound > low else '<') if d['verdict'] == 'pass' else 'x',
        color='C0' if d['verdict'] == 'pass' else 'C3',
    )
    mu_eps = d.get('mu_epsilon_lower_bound')
    if d.get('claimed_mu') is not None and mu_eps and mu_eps > low:
      ax.scatter(
          [mu_eps],
          [y],
          marker='D',
          s=35,
          facecolors='none',
          edgecolors='C2',
          zorder=4,
      )


def _legend(ax, plt):
  """`figure`'s legend and title above the axis (`plt`: matplotlib's pyplot)."""
  handles = [
      plt.Line2D(
          [], [], color='k', marker='|', ls='', ms=12, label='claimed eps'
      ),
      plt.Line2D(
          [],
          [],
          color='C0',
          marker='o',
          ls='',
          label='(eps, delta) lower bound',
      ),
      plt.Line2D(
          [],
          [],
          color='C2',
          marker='D',
          ls='',
          mfc='none',
          label='eps of the mu lower bound (Gaussian claims)',
      ),
      plt.Line2D(
          [], [], color='0.75', lw=3, label='up to the largest showable eps'
      ),
  ]
  ax.legend(
      handles=handles,
      fontsize=6,
      loc='lower center',
      bbox_to_anchor=(0.5, 1.0),
      ncol=2,
      frameon=False,
      title='Factory audits: the claim and what the trials show',
      title_fontsize=8,
  )
