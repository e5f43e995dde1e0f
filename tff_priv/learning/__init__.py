"""Learning-process builders on tff.learning templates.

The mechanisms' processes, with their client work, round schedules and
masks. Public names (imported on first use): `build_udp_process`,
`build_crd_process`, `build_fedsmp_process`, `build_ldp_fl_process`,
`no_client_metrics`, `dp_client_metrics`, `DpClientMetrics`,
`udp_sensitivity`, `sparse_categorical_crossentropy`.
"""

from tff_priv import _exports

_EXPORTS = {
    'build_udp_process': 'tff_priv.learning.udp',
    'build_crd_process': 'tff_priv.learning.udp',
    'build_fedsmp_process': 'tff_priv.learning.smp',
    'build_ldp_fl_process': 'tff_priv.learning.ldp',
    'no_client_metrics': 'tff_priv.learning.client_metrics',
    'dp_client_metrics': 'tff_priv.learning.client_metrics',
    'DpClientMetrics': 'tff_priv.learning.client_metrics',
    'udp_sensitivity': 'tff_priv.learning.udp_client_work',
    'sparse_categorical_crossentropy': 'tff_priv.learning.udp_client_work',
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _exports.lazy(__name__, _EXPORTS)
