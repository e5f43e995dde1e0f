r"""Fed-SMP experiments (Hu, Guo, Gong, Sec. 6), scaled to a 2-core CPU.

Flags -> `tff_priv.experiments.smp.Setting` per task -> labelled
`RunConfig`s -> `tff_priv.program.grid.run` (each run in
<output_dir>/<label>/, charged by its own ledger) -> summary.md and
accuracy_vs_p.png in --output_dir. Per task: Fed-SMP with each of --masks at
each of --compressions, Fed-SMP at p = 1 (client noise, secure sum), the
noise-free ceiling (--noise_free) and TFF's DP-FedAvg (--dp_fedavg), all at
the target --epsilon. An image task takes the unprefixed flags, a
Shakespeare task the --shakespeare_* ones (--helpfull lists them; the
defaults are docs/smp.md's setting). Run from the repository root:

  nice -n 5 .venv/bin/python scripts/smp_experiments.py --output_dir=results/smp

Started again with the same --output_dir, finished runs are skipped and an
interrupted one resumes; a label whose directory holds another setting is
refused before anything runs (exit 2, one line), as are bad flags. SIGINT /
SIGTERM stop with one line saying how to resume.
"""

import os
import sys

from tff_priv.program import command

_VERBOSE_ARGV = command.quiet_environment(sys.argv)

# pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import flags

from tff_priv import cli
from tff_priv.experiments import smp
from tff_priv.program import grid
from tff_priv.program import run_flags
import tff_priv_tasks as tasks

# pylint: enable=g-import-not-at-top,g-bad-import-order

_SHAKESPEARE = 'shakespeare_'
for _prefix, _defaults in (
    ('', smp.Setting()),
    (_SHAKESPEARE, smp.SHAKESPEARE),
):
  run_flags.define_dataclass_flags(smp.Setting, _defaults, _prefix, ('task',))
flags.adopt_module_key_flags(run_flags)
_TASKS = flags.DEFINE_list(
    'tasks',
    ['mnist5k', 'shakespeare_offline'],
    'Tasks to run: a task starting with "shakespeare" takes the '
    '--shakespeare_* flags, an image task the others.',
)
_OUTPUT_DIR = flags.DEFINE_string('output_dir', 'results/smp', 'Output folder.')
_CACHE_DIR = flags.DEFINE_string(
    'cache_dir', None, 'Where cached data sets are read (online tasks).'
)
_PROGRESS = flags.DEFINE_bool('progress', True, 'Per-round progress on stderr.')
_VERBOSE = flags.DEFINE_bool(
    'verbose', False, "TF's and the program's logs (quiet by default)."
)

_CLI = cli.Cli('smp_experiments.py')


def _setting(task: str) -> smp.Setting:
  """The task's `Setting` from its flags; ValueError naming the flag."""
  prefix = _SHAKESPEARE if task.startswith('shakespeare') else ''
  values = run_flags.dataclass_values(smp.Setting, prefix, ('task',))
  try:
    return smp.Setting(task=task, **values).validate()
  except (ValueError, TypeError) as e:
    raise ValueError(f'--{prefix}{e}') from None


def main(argv):
  if len(argv) > 1:
    _CLI.fail(f'unexpected arguments {argv[1:]}')
  try:
    unknown = sorted(set(_TASKS.value) - set(tasks.TASK_NAMES))
    if (
        unknown
        or not _TASKS.value
        or len(set(_TASKS.value)) < len(_TASKS.value)
    ):
      raise ValueError(
          f'--tasks must name distinct tasks among {tasks.TASK_NAMES}, got '
          f'{_TASKS.value}'
      )
    settings = [_setting(task) for task in _TASKS.value]
    configs = {}
    for s in settings:
      configs.update(smp.configs(s))
  except (ValueError, TypeError) as e:
    _CLI.fail(str(e))
  out = _OUTPUT_DIR.value
  verbose = _VERBOSE.value or flags.FLAGS['verbosity'].present
  results = command.main(
      'smp_experiments.py',
      lambda: grid.run(
          configs, out, progress=_PROGRESS.value, cache_dir=_CACHE_DIR.value
      ),
      out,
      verbose,
  )
  text = smp.summary_markdown(settings, results)
  with open(os.path.join(out, 'summary.md'), 'w') as f:
    f.write(text)
  smp.plot(settings, results, os.path.join(out, 'accuracy_vs_p.png'))
  print(text)
  print(
      f'{len(results)} runs in {out}/<label>/; tables in '
      f"{os.path.join(out, 'summary.md')}, plot in "
      f"{os.path.join(out, 'accuracy_vs_p.png')}"
  )


if __name__ == '__main__':
  _CLI.run(main)
