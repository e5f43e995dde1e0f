"""TFF aggregation factories that wire tff_priv's mechanisms into AggregationProcesses.

  LDPEncodeFactory            LDP-FL two-point encoding (ldp.py)
  GaussianUDPFactory          UDP client noise, fixed or CRD-scheduled (udp.py)
  SparsifiedSecureSumFactory  Fed-SMP sparsify-clip-noise secure sum (smp.py)
  DistortionFactory           TV-calibrated parameter distortion (distortion.py)
  TreeRestartFactory          TFF's DP-FTRL tree aggregation, restarted, with its DpEvent (dp_ftrl.py)
  BLTFactory                  DP-FTRL with BLT matrix-factorization noise (blt.py)
  BandMFFactory               amplified banded matrix-factorization noise (bandmf.py)
  dp_fedavg.calibrated        TFF's DP-FedAvg factory calibrated over a plan (dp_fedavg.py)

Each `.calibrated(epsilon, total_rounds=T, ...)` factory refuses round T+1
(`PlanExceededError`, plan.py).
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
