"""The training program (on tff.program): loop, run directory, registry, plots.

Public names (imported on first use): `RunConfig`, `ConfigError`, `run`,
`run_until` (`training`), `TrainModelAccounting` (write-ahead accounting for
`tff.learning.programs.train_model`), `ClientArraysSource`, `StreamSampler`
(each round's clients of a BLT or DP-FTRL stream in your own loop),
`BandSampler` (amplified BandMF's cyclic Poisson sampling in your own loop).
"""

from tff_priv import _exports

_EXPORTS = {
    'RunConfig': 'tff_priv.program.training',
    'ConfigError': 'tff_priv.program.training',
    'run': 'tff_priv.program.training',
    'run_until': 'tff_priv.program.training',
    'TrainModelAccounting': 'tff_priv.program.train_model_accounting',
    'ClientArraysSource': 'tff_priv.program.data_sources',
    'StreamSampler': 'tff_priv.program.sampling',
    'BandSampler': 'tff_priv.program.sampling',
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _exports.lazy(__name__, _EXPORTS)
