"""Privacy accounting: DpEvents, a ledger, calibration, papers' closed forms.

Public names (imported on first use): `PrivacyLedger`, `IndividualLedger`,
`Guarantee`, `StateAccounting`, `AuditSpec`, `extract_dp_event`, `guarantee_of`,
`calibrate_noise_multiplier`, `gaussian_epsilon`, `Sampling`. No TensorFlow is
imported here.
"""

from tff_priv import _exports

_EXPORTS = {
    'PrivacyLedger': 'tff_priv.accounting.ledger',
    'IndividualLedger': 'tff_priv.accounting.individual',
    'Guarantee': 'tff_priv.accounting.guarantees',
    'StateAccounting': 'tff_priv.accounting.guarantees',
    'AuditSpec': 'tff_priv.accounting.guarantees',
    'extract_dp_event': 'tff_priv.accounting.guarantees',
    'guarantee_of': 'tff_priv.accounting.guarantees',
    'calibrate_noise_multiplier': 'tff_priv.accounting.calibration',
    'gaussian_epsilon': 'tff_priv.accounting.calibration',
    'Sampling': 'tff_priv.accounting.sampling',
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _exports.lazy(__name__, _EXPORTS)
