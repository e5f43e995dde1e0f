"""TFF aggregation factories that wire tff_priv's mechanisms into processes.

`LDPEncodeFactory` (LDP-FL two-point encoding), `GaussianUDPFactory` (UDP
client noise, fixed or CRD-scheduled), `SparsifiedSecureSumFactory` (Fed-SMP
sparsify-clip-noise secure sum), `DistortionFactory` (TV-calibrated parameter
distortion), `TreeRestartFactory` (TFF's DP-FTRL tree aggregation, restarted,
with its DpEvent), `BLTFactory` (DP-FTRL with BLT matrix-factorization noise),
`BandMFFactory` (amplified banded matrix-factorization noise) and
`dp_fedavg.calibrated` (TFF's DP-FedAvg factory calibrated over a plan). Each
`.calibrated(epsilon, total_rounds=T, ...)` factory refuses round T+1
(`PlanExceededError`).
"""

from tff_priv.aggregators import dp_fedavg
from tff_priv.aggregators.bandmf import BandMFFactory
from tff_priv.aggregators.blt import BLTFactory
from tff_priv.aggregators.distortion import DistortionFactory
from tff_priv.aggregators.dp_ftrl import TreeRestartFactory
from tff_priv.aggregators.ldp import LDPEncodeFactory
from tff_priv.aggregators.plan import PlanExceededError
from tff_priv.aggregators.smp import SparsifiedSecureSumFactory
from tff_priv.aggregators.udp import GaussianUDPFactory
