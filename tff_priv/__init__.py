"""tff_priv: privacy-preserving aggregation for TensorFlow Federated.

Four published mechanisms as TFF aggregation factories and learning processes:
LDP-FL's two-point encoder, Gaussian UDP with the CRD round schedule, Fed-SMP's
sparsified secure sum, and parameter distortion with data generation. Every
mechanism reports what it spends through one ledger (`tff_priv.accounting`).
Importing `tff_priv` does not import TensorFlow Federated; import the
submodules you need.
"""

__version__ = '0.2.0'

from tff_priv import _exit  # noqa: F401  # pylint: disable=unused-import
