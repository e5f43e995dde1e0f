"""Empirical privacy auditing: factory audits and one-run estimators.

Public names (imported on first use): `audit_aggregator`, `AuditResult`,
`AuditFailedError`, `one_shot_epsilon`, `one_shot_epsilon_all_iterates`,
`one_run_epsilon_lower_bound` (`one_run.epsilon_lower_bound`, Steinke et
al.), `one_run_fdp_mu_lower_bound` and `one_run_fdp_epsilon_lower_bound`
(`one_run.fdp_*`, Mahloujifar et al.).
"""

from tff_priv import _exports

_EXPORTS = {
    'audit_aggregator': 'tff_priv.auditing.aggregator_audit',
    'AuditResult': 'tff_priv.auditing.aggregator_audit',
    'AuditFailedError': 'tff_priv.auditing.aggregator_audit',
    'one_shot_epsilon': 'tff_priv.auditing.one_shot',
    'one_shot_epsilon_all_iterates': 'tff_priv.auditing.one_shot',
    'one_run_epsilon_lower_bound': (
        'tff_priv.auditing.one_run',
        'epsilon_lower_bound',
    ),
    'one_run_fdp_mu_lower_bound': (
        'tff_priv.auditing.one_run',
        'fdp_mu_lower_bound',
    ),
    'one_run_fdp_epsilon_lower_bound': (
        'tff_priv.auditing.one_run',
        'fdp_epsilon_lower_bound',
    ),
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _exports.lazy(__name__, _EXPORTS)
