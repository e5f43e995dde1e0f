"""The one calibration entry point: a mechanism's noise for a target eps."""

from typing import Optional

from tff_priv import validation
from tff_priv.accounting import calibration as calibration_lib
from tff_priv.accounting import closed_forms
from tff_priv.accounting import sampling as sampling_lib

# 'tight': the accountant; 'paper': UDP Theorem 1, eq. (10).
CALIBRATIONS = ('tight', 'paper')


def noise_for_target(
    epsilon: float,
    delta: float,
    rounds: int,
    sampling: Optional[sampling_lib.Sampling] = None,
    *,
    sensitivity: float = 1.0,
    calibration: str = 'tight',
    min_with_unsampled: bool = False,
    spent: Optional[calibration_lib.Spent] = None,
    tol: float = 1e-4,
) -> float:
  """The noise std of a Gaussian release that meets (eps, delta) over `rounds`.

  Every mechanism that calibrates to a target eps comes here (the program's
  through `BuildContext.noise_multiplier`, UDP's with its sensitivity).

  * 'tight' (default): z * sensitivity for the smallest noise multiplier z
    whose accountant eps is <= `epsilon`
    (`calibration.calibrate_noise_multiplier`, dp_accounting's RDP accountant
    over the ledger's own events, so what is calibrated is what the ledger
    later charges). With the default sensitivity 1 this is z itself.
  * 'paper': UDP's Theorem 1, eq. (10) (`closed_forms.udp_theorem1_sigma`),
    which is optimistic: `closed_forms.udp_theorem1_truth` says by how much.

  Args:
    epsilon: target eps > 0.
    delta: target delta in (0, 1).
    rounds: T >= 1 rounds of the release.
    sampling: the rounds' client `Sampling` (None: no sampling).
    sensitivity: Delta > 0, the L2 sensitivity the noise std is relative to
      (1: the result is a noise multiplier).
    calibration: 'tight' or 'paper'.
    min_with_unsampled: ('tight' only) meet the target with the smaller of the
      sampled and the unsampled eps, which both bound the released models of
      noise added on each client under replace-one adjacency.
    spent: ('tight' only) the releases a resumed run has charged already
      (`calibration.Spent`, read from its ledger): the noise of the `rounds`
      left is calibrated so that everything together meets the target.
    tol: ('tight' only) the absolute tolerance on z (the smallest z that meets
      the target, within tol; a coarser tol compares options faster).

  Returns:
    The noise std sigma (z * sensitivity).

  Raises:
    ValueError: a bad value (the message names it).
    calibration.BudgetSpentError: `spent` alone reaches the target.
  """
  validation.one_of('calibration', calibration, CALIBRATIONS)
  sensitivity = validation.positive('sensitivity', sensitivity)
  sampling = sampling or sampling_lib.Sampling.none()
  if calibration == 'paper':
    if spent is not None and spent.releases:
      raise ValueError(
          "calibration='paper' cannot account for releases already charged"
      )
    return closed_forms.udp_theorem1_sigma(
        epsilon, delta, sampling.rate, rounds, sensitivity
    )
  z = calibration_lib.calibrate_noise_multiplier(
      epsilon,
      delta,
      rounds,
      sampling=sampling,
      min_with_unsampled=min_with_unsampled,
      spent=spent,
      tol=tol,
  )
  return z * sensitivity
