r"""Utility loss of parameter distortion with data generation, measured.

Flags -> `tff_priv.experiments.distortion.Settings` -> its labelled
`RunConfig`s -> `tff_priv.program.grid.run` (each run of the training
program in <output_dir>/<label>/, resumable; a finished run is not run
again) -> W* from the runs' initial model (<output_dir>/reference.npz) -> the
split of the utility loss L = E||W~ - W*||^2 - ||W - W*||^2 into its sampling
and distortion parts (<output_dir>/summary.md, utility_loss.png). See
`utility_loss`'s docstring there and docs/distortion.md for the definitions.
The clients are the task's own iid split (`--num_clients` x
`--samples_per_client` examples of mnist5k or digits) and the model the task's
'softmax' (softmax regression, L2 penalty 0.01). Bad flags end with one line
and exit status 2.

  .venv/bin/python scripts/utility_loss.py --output_dir=results/utility_loss
"""

import sys

from tff_priv.program import command

_VERBOSE_ARGV = command.quiet_environment(sys.argv)

# pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import flags

from tff_priv import cli
from tff_priv.experiments import distortion

# pylint: enable=g-import-not-at-top,g-bad-import-order

_D = distortion.Settings()
_TASK = flags.DEFINE_enum('task', _D.task, distortion.TASKS, 'Offline task.')
_CLIENTS = flags.DEFINE_integer(
    'num_clients', _D.num_clients, 'U clients, all in every round.'
)
_SAMPLES = flags.DEFINE_integer(
    'samples_per_client', _D.samples_per_client, '|D_i|.'
)
_TEST = flags.DEFINE_integer(
    'test_examples', _D.test_examples, 'Test subset (at most the test set).'
)
_STEPS = flags.DEFINE_integer(
    'local_steps', _D.local_steps, 'Bernoulli batches (SGD steps) per round.'
)
_LR = flags.DEFINE_float('learning_rate', _D.learning_rate, 'Client SGD rate.')
_ROUNDS = flags.DEFINE_integer('rounds', _D.rounds, 'T of W, W_rho and W~.')
_REFERENCE_STEPS = flags.DEFINE_integer(
    'reference_steps',
    _D.reference_steps,
    'Full-batch gradient steps of the reference optimisation that gives W*.',
)
_RHOS = flags.DEFINE_list('rhos', list(map(str, _D.rhos)), 'rho values.')
_TVS = flags.DEFINE_list(
    'target_tvs', list(map(str, _D.target_tvs)), 'TV targets.'
)
_EPSILONS = flags.DEFINE_list(
    'epsilons', list(map(str, _D.epsilons)), 'DP-calibrated levels.'
)
_CLIP = flags.DEFINE_float('clip', _D.clip, 'L2 clip C of each upload.')
_VARIANCE = flags.DEFINE_float(
    'parameter_variance',
    _D.parameter_variance,
    'sigma^2 per coordinate for the TV calibration and bounds (default: the '
    'across-client variance measured in an earlier noise-free mnist5k run: '
    'a statistic of the same data, fine for this utility study, not for a '
    'private release).',
)
_DELTA = flags.DEFINE_float('delta', _D.delta, 'delta of the DP reading.')
_SEEDS = flags.DEFINE_integer('seeds', _D.seeds, 'Batch seeds per cell.')
_SEED = flags.DEFINE_integer(
    'seed', _D.seed, 'Data split, initial model, test subset (all runs).'
)
_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', 'results/utility_loss', 'Output folder.'
)
_PROGRESS = flags.DEFINE_bool('progress', False, "Each run's rounds.")
_VERBOSE = flags.DEFINE_bool('verbose', False, "TF's and the program's logs.")

_CLI = cli.Cli('utility_loss.py')


def _floats(flag):
  try:
    return tuple(float(v) for v in flag.value)
  except ValueError:
    raise ValueError(f'{flag.name} must be numbers, got {flag.value}') from None


def main(argv):
  if len(argv) > 1:
    _CLI.fail(f'unexpected arguments {argv[1:]}')
  try:
    settings = distortion.Settings(
        task=_TASK.value,
        num_clients=_CLIENTS.value,
        samples_per_client=_SAMPLES.value,
        test_examples=_TEST.value,
        local_steps=_STEPS.value,
        learning_rate=_LR.value,
        rounds=_ROUNDS.value,
        reference_steps=_REFERENCE_STEPS.value,
        rhos=_floats(_RHOS),
        target_tvs=_floats(_TVS),
        epsilons=_floats(_EPSILONS),
        clip=_CLIP.value,
        parameter_variance=_VARIANCE.value,
        delta=_DELTA.value,
        seeds=_SEEDS.value,
        seed=_SEED.value,
    ).validate()
  except (ValueError, TypeError) as e:
    _CLI.fail(str(e))
  out = _OUTPUT_DIR.value
  verbose = _VERBOSE.value or flags.FLAGS['verbosity'].present
  paths = command.main(
      'utility_loss.py',
      lambda: distortion.run(settings, out, _PROGRESS.value),
      out,
      verbose,
  )
  print('\n'.join(f'{name}: {path}' for name, path in paths.items()))


if __name__ == '__main__':
  _CLI.run(main)
