"""A finished run's summary.json, and the accuracy train.py prints of it."""

import json

from tff_priv.program import layout


def build(
    config,
    mechanism,
    privacy,
    *,
    final_metrics,
    final_accuracy,
    best_accuracy,
    best_round,
    uplink_bytes,
    wall_seconds,
    sessions,
    rounds_run,
    empirical=None,
    round_offset=0,
):
  """The run's summary (see `run`); `empirical`: the canary estimate.

  `best_round` is the round of eval_metrics.csv (`round_offset` + the
  model's round: a restarted model's rows follow the earlier ones).
  """
  delta = mechanism.config.delta
  ledger = privacy.analyst
  accounted = ledger.report(delta)
  closed_form = mechanism.closed_form
  analyst_eps = privacy.analyst_epsilon()
  return {
      'format': layout.SUMMARY_FORMAT,
      'task': config.task,
      'task_options': config.task_options,
      'mechanism': config.mechanism,
      'parameters': {
          **config.to_dict(),
          'resolved': mechanism.resolved,
          'num_parameters': mechanism.num_parameters,
      },
      'sampling': mechanism.sampling.describe(),
      'rounds': config.total_rounds,
      'rounds_run': rounds_run,
      'final_test_accuracy': final_accuracy,
      'best_test_accuracy': best_accuracy,
      'best_round': best_round if best_accuracy is not None else None,
      # This model's round t is the CSVs' round round_offset + t.
      'round_offset': round_offset,
      'final_test_metrics': final_metrics,
      'privacy': {
          'delta': delta,
          # Planned and spent: a run that resumed after charges it ran again
          # is recalibrated to stay within its target (the sessions below
          # give each one's noise).
          'target_epsilon': getattr(mechanism.config, 'epsilon', None),
          'guarantees': privacy.report(),
          # The analyst's figure (the first guarantee's epsilon).
          'rdp_epsilon': analyst_eps,
          'analyst_ledger': _analyst_ledger(privacy, accounted),
          'closed_form': closed_form,
          'caveats': _caveats(config, mechanism),
          'ledger': json.loads(ledger.to_json()),
          **({'empirical': empirical} if empirical is not None else {}),
      },
      'uplink_bytes': {
          'total': uplink_bytes,
          'per_client_per_round': mechanism.upload_bytes_per_client,
      },
      # How long the rounds took depends on the sampled clients' data: only
      # a non-private run writes it.
      'wall_time_seconds': (
          wall_seconds if mechanism.guarantee is None else None
      ),
      'sessions': sessions,
  }


def _analyst_ledger(privacy, accounted) -> dict:
  """The summary's `analyst_ledger`: `accounted`, the ledger's report."""
  return {
      'meaning': (
          'the composition of the events this run released; '
          + (
              'its events were chosen adaptively, so this is an '
              'ex-post diagnostic, not a guarantee (the guarantee is '
              'rdp_epsilon above)'
              if privacy.adaptive is not None
              else 'its events were fixed before the run, so this is '
              'the guarantee (before the server-view minimum)'
          )
      ),
      'rdp_epsilon': accounted['rdp_epsilon'],
      'pld_epsilon': accounted['pld_epsilon'],
      'accountants': {
          'rdp_epsilon': 'dp_accounting RdpAccountant',
          'pld_epsilon': 'dp_accounting PLDAccountant',
      },
      'unsupported': accounted['unsupported'],
      'neighboring_relation': accounted['neighboring_relation'],
      'releases': accounted['releases'],
  }


def _caveats(config, mechanism) -> list:
  """The summary's caveats: the mechanism's, and a given sampling seed's."""
  return mechanism.caveats + (
      [
          'sampling_seed was given: whoever knows it (the command '
          'line, secrets.json) can recompute who was sampled in every '
          'round, and the amplified analyst figure assumes that unknown'
      ]
      if config.sampling_seed is not None and mechanism.guarantee
      # Amplified at all:
      and mechanism.sampling.ledger_sampling().kind != 'none'
      else []
  )


def accuracy_line(summary) -> str:
  """The final and the best test accuracy, the best with its round.

  E.g. 'test_accuracy=0.208 (best 0.385 at round 12)'; 'test_accuracy=n/a'
  for a run with no accuracy. The round is the CSVs'; for a restarted model
  its own round follows ('at round 14, model round 4').
  """
  final = summary.get('final_test_accuracy')
  best = summary.get('best_test_accuracy')
  text = f'test_accuracy={_short(final)}'
  if best is not None:
    best_round, offset = summary.get('best_round'), summary.get('round_offset')
    text += f' (best {_short(best)} at round {best_round}'
    if offset and isinstance(best_round, int):
      text += f', model round {best_round - offset}'
    text += ')'
  return text


def _short(x) -> str:
  return 'n/a' if x is None else f'{x:.4g}' if isinstance(x, float) else str(x)
