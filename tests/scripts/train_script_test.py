"""scripts/train.py end to end: in this process, and in subprocesses (slow)."""

import contextlib
import csv
import functools
import importlib.util
import io
import json
import math
import os
import pty
import shutil
import signal
import sys
import tempfile
import time

import dp_accounting
import pytest
import tensorflow as tf

from tests import script_runs
from tests.scripts import train_runs
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.program import layout
from tff_priv.program import registry
from tff_priv.program import releases
from tff_priv.program import run_flags
from tff_priv.program import sampling
from tff_priv.program import training

_SCRIPT = script_runs.script_path('train.py')
_TIMEOUT = script_runs.TIMEOUT
_NUM_CLIENTS = train_runs.NUM_CLIENTS
_K = train_runs.K
_COMMON = train_runs.COMMON
_SMP_SEED = train_runs.SMP_SEED
_PUBLIC_CLIENTS = train_runs.PUBLIC_CLIENTS
_SMP_ROUNDS = train_runs.SMP_ROUNDS
_MECHANISM_FLAGS = train_runs.MECHANISM_FLAGS
_RUN_MECHANISM = train_runs.RUN_MECHANISM
_DIGITS_PARAMETERS = 8 * 8 * 256 + 256 + 256 * 10 + 10  # tasks.models.mlp


def _run(*args):
  return script_runs.Watched('train.py', *args).finish()


def _mechanism_args(run, root):
  return (
      *_COMMON,
      f'--mechanism={_RUN_MECHANISM.get(run, run)}',
      '--total_rounds=2',
      *_MECHANISM_FLAGS[run],
      f'--root_output_dir={root}',
  )


def _kill_and_resume(root):
  """Starts the smp run, SIGKILLs it once a checkpoint of round >= 2 exists."""
  args = _mechanism_args('smp', root)
  watched = script_runs.Watched('train.py', *args)
  ckpt_dir = layout.path(root, layout.CHECKPOINTS)
  seen = -1
  deadline = time.monotonic() + _TIMEOUT
  while time.monotonic() < deadline and watched.proc.poll() is None:
    if os.path.isdir(ckpt_dir):
      versions = [
          int(e[len(layout.CHECKPOINT_PREFIX) :])
          for e in os.listdir(ckpt_dir)
          if e[len(layout.CHECKPOINT_PREFIX) :].isdigit()
      ]
      seen = max(versions, default=-1)
      if seen >= 2:
        watched.proc.send_signal(signal.SIGKILL)
        break
    time.sleep(0.05)
  killed = watched.finish()
  summary_after_kill = os.path.exists(layout.path(root, layout.SUMMARY))
  resumed = _run(*args)
  return killed, seen, summary_after_kill, resumed


def _load_json(path):
  def no_constants(name):
    raise ValueError(f'not strict JSON: {name}')

  with open(path) as f:
    return json.loads(f.read(), parse_constant=no_constants)


def _rows(path):
  with open(path) as f:
    return list(csv.DictReader(f))


def _ledger(summary):
  return ledger_lib.PrivacyLedger.from_json(
      json.dumps(summary['privacy']['ledger'])
  )


@functools.cache
def _load_script():
  """scripts/train.py as a module, loaded once (its flags are global)."""
  spec = importlib.util.spec_from_file_location('train_script', _SCRIPT)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)  # Defines the script's absl flags.
  return module


def _main_in_process(script, *args):
  """(exit status, stderr) of the script's flag parsing and main()."""
  err = io.StringIO()
  script.flags.FLAGS.unparse_flags()
  try:
    with contextlib.redirect_stderr(err):
      argv = script._CLI.parse_flags(['train.py', *args])  # pylint: disable=protected-access
      script.main(argv)
  except SystemExit as e:
    return e.code, err.getvalue()
  finally:
    script.flags.FLAGS.unparse_flags()
  return 0, err.getvalue()


def _run_in_process(*args):
  """The script's flags -> RunConfig -> training.run, in this process.

  Returns None, or the exception the run raised (kept for the test's
  message: a failing run fails only its own mechanism's test).
  """
  script = _load_script()
  script.flags.FLAGS.unparse_flags()
  try:
    script._CLI.parse_flags(['train.py', *args])  # pylint: disable=protected-access
    config = run_flags.run_config().validate()
    training.run(
        config, script._ROOT_OUTPUT_DIR.value, progress=False  # pylint: disable=protected-access
    )
  except Exception as e:  # pylint: disable=broad-except
    return e
  finally:
    script.flags.FLAGS.unparse_flags()
  return None


def _with_tests(*checks):
  """Adds `test_<name>` per `check_<name>` of the class: its runs' tests."""

  def add(cls):
    for name in checks:
      setattr(cls, f'test_{name}', getattr(cls, f'check_{name}'))
    return cls

  return add


class _TempDirMixin:

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    cls.dirs = {m: os.path.join(cls.tmp, m) for m in _MECHANISM_FLAGS}

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.tmp, ignore_errors=True)
    super().tearDownClass()


class _MechanismRunsChecks(_TempDirMixin):
  """What every mechanism's 2-round run must write (`check_<run>`).

  A subclass makes `runs` and adds the tests of the runs it makes
  (`_with_tests`).
  """

  def _summary_and_rows(self, run, rounds=2, num_clients=_NUM_CLIENTS):
    mechanism = _RUN_MECHANISM.get(run, run)
    root = self.dirs[run]
    summary = _load_json(layout.path(root, layout.SUMMARY))
    rows = _rows(layout.path(root, layout.TRAIN_CSV))
    self.assertEqual(
        [r[layout.ROUND] for r in rows],
        [str(t) for t in range(1, rounds + 1)],
    )
    # Only a non-private run writes who took part and how long it took.
    kind = summary['sampling']['model']
    seed = _load_json(layout.path(root, layout.SECRETS))['sampling_seed']
    draw = sampling.ClientSampling(kind, num_clients, _K)
    if registry.unit(mechanism) is None:  # Not private.
      self.assertEqual(
          [int(r['clients']) for r in rows],
          [len(draw.sample_indices(seed, t)) for t in range(1, rounds + 1)],
      )
      self.assertGreater(summary['wall_time_seconds'], 0)
    else:
      self.assertIsNone(summary['wall_time_seconds'])
      self._check_public_columns(rows)
    self.assertEqual(summary['rounds'], rounds)
    self.assertEqual(summary['mechanism'], mechanism)
    self.assertEqual(summary['task'], 'digits')
    self.assertBetween(summary['final_test_accuracy'], 0.0, 1.0)
    # Each row's eps is the analyst's after that round: the ledger's, and
    # for local noise the smaller of that and the worst client's against the
    # server (both bound the same release).
    ledger = _ledger(summary)
    analyst = ledger.epsilon(summary['privacy']['delta'])
    guarantees = summary['privacy']['guarantees']
    self.assertEqual(guarantees[0]['adversary'], 'analyst')
    if layout.SERVER_EPSILON in rows[-1]:
      server = float(rows[-1][layout.SERVER_EPSILON])
      self.assertEqual(guarantees[1]['epsilon'], server)
      if 'smaller' in guarantees[0]['accountant']:
        analyst = min(analyst, server)
    self.assertEqual(float(rows[-1][layout.RDP_EPSILON]), analyst)
    self.assertEqual(
        summary['privacy']['rdp_epsilon'],
        str(analyst) if registry.unit(mechanism) is None else analyst,
    )
    eval_rows = _rows(layout.path(root, layout.EVAL_CSV))
    self.assertEqual(
        float(eval_rows[-1][layout.TEST_ACCURACY]),
        summary['final_test_accuracy'],
    )
    return summary, rows, ledger

  def _expected(self, record):
    expected = ledger_lib.PrivacyLedger()
    record(expected)
    return expected

  def _check_public_columns(self, rows):
    """Every column a private run writes is public or charged."""
    for column in rows[0]:
      self.assertTrue(
          column == layout.ROUND or releases.is_public_train(column),
          f'{column} is neither public nor charged',
      )

  def _check_dense_uplink(self, summary, rows, clients=None):
    per_client = 4 * _DIGITS_PARAMETERS
    self.assertEqual(
        summary['parameters']['num_parameters'], _DIGITS_PARAMETERS
    )
    self.assertEqual(
        summary['uplink_bytes']['per_client_per_round'], per_client
    )
    if clients is None:  # A private run: the configured K, public.
      clients = [_K] * len(rows)
    self.assertEqual(
        summary['uplink_bytes']['total'], sum(clients) * per_client
    )

  def check_none(self):
    self._check_ok(self.runs['none'])
    summary, rows, ledger = self._summary_and_rows('none')
    self.assertEqual(summary['privacy']['rdp_epsilon'], 'inf')
    self.assertEqual(ledger.num_releases, 2)
    self.assertEqual(math.inf, ledger.epsilon(1e-5))
    self._check_dense_uplink(
        summary, rows, clients=[int(r['clients']) for r in rows]
    )

  def check_dp_fedavg(self):
    self._check_ok(self.runs['dp_fedavg'])
    summary, rows, ledger = self._summary_and_rows('dp_fedavg')
    q = _K / _NUM_CLIENTS
    self.assertEqual(
        ledger,
        self._expected(
            lambda l: l.record_gaussian(0.5, sampling_probability=q, count=2)
        ),
    )
    self.assertEqual(summary['sampling']['model'], 'poisson')
    self.assertGreater(summary['privacy']['analyst_ledger']['pld_epsilon'], 0)
    # The server adds the noise: nothing holds against it.
    self.assertEqual(summary['privacy']['guarantees'][1]['epsilon'], 'inf')
    self._check_dense_uplink(summary, rows)

  def check_dp_ftrl_charges_one_tree_per_epoch(self):
    self._check_ok(self.runs['dp_ftrl'])
    summary, rows, ledger = self._summary_and_rows('dp_ftrl')
    # 10 clients, K = 3: epochs of 3 rounds; 2 rounds are one tree, charged
    # whole at round 1 (and nothing at round 2).
    tree = dp_accounting.SingleEpochTreeAggregationDpEvent(1.0, 3)
    self.assertEqual(ledger.neighboring_relation, 'replace_special')
    self.assertEqual(
        ledger.entries,
        (
            (dp_accounting.SelfComposedDpEvent(tree, 1), 1),
            (dp_accounting.SelfComposedDpEvent(tree, 0), 1),
        ),
    )
    self.assertEqual(summary['sampling']['model'], 'epoch')
    self.assertEqual(summary['privacy']['guarantees'][1]['epsilon'], 'inf')
    self._check_dense_uplink(summary, rows)

  def check_smp_charges_the_configured_noise_every_round(self):
    self._check_ok(self.runs['smp'])
    summary, rows, ledger = self._summary_and_rows('smp', _SMP_ROUNDS)
    q = _K / _NUM_CLIENTS
    # Whatever the number of clients drawn (none in round 2), every round is
    # the factory's Gaussian(z): the clients' noise shares sum to z C.
    draw = sampling.ClientSampling('poisson', _NUM_CLIENTS, _K)
    self.assertEmpty(draw.sample_indices(_SMP_SEED, 2))
    self.assertNotIn('aggregator/num_reporting_clients', rows[0])
    self.assertEqual(
        ledger,
        self._expected(
            lambda l: l.record_gaussian(
                0.8, sampling_probability=q, count=_SMP_ROUNDS
            )
        ),
    )
    k = round(0.2 * _DIGITS_PARAMETERS)
    self.assertEqual(summary['parameters']['resolved']['kept_coordinates'], k)
    self.assertEqual(
        int(rows[0]['aggregator/uploaded_bits_per_client']), 32 * k
    )
    # Public uplink: the configured K, k values of 4 bytes, every round.
    self.assertEqual(summary['uplink_bytes']['total'], _SMP_ROUNDS * _K * 4 * k)
    self.assertEqual(int(rows[1]['uplink_bytes']), _K * 4 * k)
    self.assertIn('paper', summary['privacy']['closed_form'])

  def check_smp_top_k_holds_out_the_public_clients(self):
    self._check_ok(self.runs['smp_top_k'])
    private = _NUM_CLIENTS - _PUBLIC_CLIENTS
    # The rows' client counts are the seeded draws over the private clients.
    summary, rows, ledger = self._summary_and_rows(
        'smp_top_k', num_clients=private
    )
    self.assertEqual(summary['sampling']['num_clients'], private)
    resolved = summary['parameters']['resolved']
    self.assertEqual(resolved['mask'], 'top_k')
    self.assertEqual(
        summary['parameters']['params']['public_clients'], _PUBLIC_CLIENTS
    )
    k = round(0.01 * _DIGITS_PARAMETERS)
    self.assertEqual(resolved['kept_coordinates'], k)
    q = _K / private
    self.assertEqual(
        ledger,
        self._expected(
            lambda l: l.record_gaussian(0.8, sampling_probability=q, count=2)
        ),
    )
    draw = sampling.ClientSampling('poisson', private, _K)
    seed = _load_json(layout.path(self.dirs['smp_top_k'], layout.SECRETS))[
        'sampling_seed'
    ]
    self.assertTrue(any(len(draw.sample_indices(seed, t)) for t in (1, 2)))
    for t, row in enumerate(rows, start=1):
      if len(draw.sample_indices(seed, t)):
        # The server trained on D_pub for the round's mask of k coordinates.
        self.assertEqual(int(row['mask/mask_size']), k)
        self.assertGreater(float(row['mask/public_train/loss']), 0.0)
        self.assertEqual(
            int(row['aggregator/uploaded_bits_per_client']), 32 * k
        )

  def check_distortion(self):
    self._check_ok(self.runs['distortion'])
    summary, rows, ledger = self._summary_and_rows('distortion')
    # sigma_e = z * 2C = 1, read back as noise multiplier sigma_e / 2C, under
    # K of N sampling (local noise, replace-one).
    self.assertEqual(
        ledger,
        self._expected(
            lambda l: l.record_gaussian(
                0.5, population=_NUM_CLIENTS, sample_size=_K, count=2
            )
        ),
    )
    self.assertEqual(summary['sampling']['model'], 'fixed')
    for row in rows:
      self.assertEqual(float(row['aggregator/noise/noise_stddev']), 1.0)
    self.assertIn('tv_upper', summary['privacy']['closed_form'])
    self._check_dense_uplink(summary, rows)

  def check_udp(self):
    self._check_ok(self.runs['udp'])
    summary, rows, ledger = self._summary_and_rows('udp')
    resolved = summary['parameters']['resolved']
    sensitivity = 2 * 0.1 * 1.0 / resolved['min_client_examples']
    self.assertAllClose(resolved['sensitivity'], sensitivity, rtol=1e-12)
    # digits: 1,437 training images over 10 clients.
    self.assertIn(resolved['min_client_examples'], (143, 144))
    for row in rows:
      # The realised sensitivity (it revealed the smallest |D_i|) and the
      # training loss are no longer released.
      self.assertNotIn('client_work/sensitivity', row)
      self.assertNotIn('client_work/train/loss', row)
    for (event, _), row in zip(ledger.entries, rows):
      self.assertEqual(event.source_dataset_size, _NUM_CLIENTS)
      self.assertEqual(event.sample_size, _K)
      self.assertAllClose(
          event.event.noise_multiplier,
          float(row['aggregator/noise/noise_stddev']) / sensitivity,
          rtol=1e-12,
      )
    # Calibrated so that the smaller of the sampled (3 of 10) and unsampled
    # eps of the 2 rounds meets 8 (float32 sigma in the rounds).
    self.assertLessEqual(summary['privacy']['rdp_epsilon'], 8.0 + 0.01)
    unsampled = ledger_lib.PrivacyLedger('replace_one')
    unsampled.record(ledger.entries[0][0].event, 2)
    self.assertAllClose(
        min(ledger.epsilon(1e-5), unsampled.epsilon(1e-5)), 8.0, atol=0.01
    )
    self.assertIn('paper', summary['privacy']['closed_form'])
    self.assertEqual(summary['sampling']['model'], 'fixed')
    self._check_dense_uplink(summary, rows)

  def check_ldp(self):
    self._check_ok(self.runs['ldp'])
    summary, rows, ledger = self._summary_and_rows('ldp')
    # d values of eps0 each round, charged without amplification; each
    # client against the server over the rounds it took part in.
    self.assertEqual(ledger.num_releases, 2)
    composed = self._expected(
        lambda l: l.record_pure_epsilon(2.0, count=2 * _DIGITS_PARAMETERS)
    )
    self.assertAllClose(ledger.epsilon(1e-5), composed.epsilon(1e-5), rtol=1e-9)
    closed = summary['privacy']['closed_form']
    self.assertEqual(
        closed['plain_composition_epsilon'], 2.0 * 2 * _DIGITS_PARAMETERS
    )
    self.assertEqual(closed['paper_epsilon_per_value'], 2.0)
    self.assertIn('shuffle_applicable', closed)
    self._check_dense_uplink(summary, rows)


@pytest.mark.slow
@_with_tests(
    'none',
    'dp_fedavg',
    'dp_ftrl_charges_one_tree_per_epoch',
    'smp_charges_the_configured_noise_every_round',
    'smp_top_k_holds_out_the_public_clients',
    'distortion',
    'udp',
    'ldp',
)
class InProcessRunsTest(_MechanismRunsChecks, tf.test.TestCase):
  """Every mechanism's run, from the script's flags, in this process.

  Every mechanism runs 2 rounds on 'digits' (smp with both masks), from the
  script's own flags, in this process: one CSV row per round, only public or
  charged columns, a strict-JSON summary, and a ledger equal to what the rounds
  in the CSV must have charged (the charge rule of each mechanism, rebuilt here
  from the CSV's own columns).
  """

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.runs = {
        m: _run_in_process(*_mechanism_args(m, cls.dirs[m]))
        for m in _MECHANISM_FLAGS
    }

  def _check_ok(self, result):
    self.assertIsNone(result, repr(result))


# Subprocesses: one central-noise and one client-noise mechanism (the
# in-process runs above check every mechanism's files), one at a time.
_SUBPROCESS_RUNS = ('dp_fedavg', 'smp')


@pytest.mark.slow
@_with_tests('dp_fedavg', 'smp_charges_the_configured_noise_every_round')
class TrainScriptTest(_MechanismRunsChecks, tf.test.TestCase):
  """Subprocess runs: no worker survives; a kill -9, a resume; a bad flag.

  The same checks on subprocess runs of one central-noise (dp_fedavg) and one
  client-noise mechanism (smp), where no TFF worker may survive a run; the exit
  0 line naming the summary; a bad flag's exit 2 with one line; kill -9 mid-run,
  then the same command again: the round counter continues from the checkpoint
  and the final ledger equals that of the uninterrupted smp run (whose charge
  depends on how many clients the seeded Poisson draw of each round gave).
  """

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.runs = {
        m: _run(*_mechanism_args(m, cls.dirs[m])) for m in _SUBPROCESS_RUNS
    }
    cls.killed_dir = os.path.join(cls.tmp, 'killed')
    cls.kill = _kill_and_resume(cls.killed_dir)
    cls.bad = _run(
        '--task=digits',
        '--mechanism=fedsgd',
        f'--root_output_dir={os.path.join(cls.tmp, "bad")}',
    )

  def _check_ok(self, result):
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertNotIn('TIMEOUT', result.stderr)
    self.assertNotEmpty(result.children, 'no TFF worker was seen')
    self.assertEqual(result.survivors, [], 'a TFF worker outlived its run')

  def test_a_run_exits_0_naming_its_summary_and_its_best_round(self):
    result = self.runs['dp_fedavg']
    self._check_ok(result)
    summary_path = layout.path(self.dirs['dp_fedavg'], layout.SUMMARY)
    last = result.stdout.strip().splitlines()[-1]
    self.assertEqual(last.split(':')[0], summary_path)
    # The final accuracy and the best with its round.
    self.assertRegex(
        last, r' test_accuracy=[0-9.]+ \(best [0-9.]+ at round [12]\) '
    )

  def test_bad_flag_in_a_subprocess_exits_2_with_one_line(self):
    result = self.bad
    self.assertEqual(result.returncode, 2, result.stderr[-2000:])
    lines = [l for l in result.stderr.splitlines() if 'error' in l]
    self.assertLen(lines, 1, result.stderr[-2000:])
    self.assertStartsWith(lines[0], 'train.py: error: ')
    self.assertIn('mechanism', lines[0])
    self.assertEqual(result.stdout, '')
    self.assertFalse(os.path.exists(os.path.join(self.tmp, 'bad')))

  def test_kill_and_resume_continues_with_the_same_ledger(self):
    killed, seen, summary_after_kill, resumed = self.kill
    self.assertEqual(killed.returncode, -signal.SIGKILL, killed.stderr[-2000:])
    self.assertGreaterEqual(seen, 2)
    self.assertFalse(summary_after_kill)
    self.assertNotEmpty(killed.children)
    self.assertEqual(killed.survivors, [], 'worker outlived a SIGKILLed run')
    self._check_ok(resumed)
    reference_run = self.runs['smp']
    self._check_ok(reference_run)
    reference_dir = self.dirs['smp']
    summary = _load_json(layout.path(self.killed_dir, layout.SUMMARY))
    reference = _load_json(layout.path(reference_dir, layout.SUMMARY))
    starts = [s['start_round'] for s in summary['sessions']]
    self.assertEqual(starts[0], 0)
    self.assertLen(starts, 2)
    self.assertGreaterEqual(starts[1], 2)  # Resumed, not restarted.
    self.assertEqual([s['start_round'] for s in reference['sessions']], [0])
    # Write-ahead: every round released before the kill stays charged, and a
    # round released after the last checkpoint runs (and is charged) again:
    # the killed run's ledger holds the reference's rounds plus at most the
    # one round that a kill between a release and its checkpoint repeats.
    killed_ledger, reference_ledger = _ledger(summary), _ledger(reference)
    self.assertBetween(killed_ledger.num_releases, _SMP_ROUNDS, _SMP_ROUNDS + 1)
    self.assertEqual(
        {e for e, _ in killed_ledger.entries},
        {e for e, _ in reference_ledger.entries},
    )
    self.assertGreaterEqual(
        summary['privacy']['rdp_epsilon'], reference['privacy']['rdp_epsilon']
    )
    self.assertEqual(summary['uplink_bytes'], reference['uplink_bytes'])
    rows = _rows(layout.path(self.killed_dir, layout.TRAIN_CSV))
    self.assertEqual(
        [r[layout.ROUND] for r in rows],
        [str(t) for t in range(1, _SMP_ROUNDS + 1)],
    )


@pytest.mark.slow
class TrainTerminalTest(tf.test.TestCase):
  """train.py on a terminal (a pseudo-terminal that reports no size)."""

  def test_the_bar_is_drawn_every_round(self):
    root = os.path.join(tempfile.mkdtemp(), 'run')
    args = [
        sys.executable,
        script_runs.script_path('train.py'),
        *_COMMON,
        '--mechanism=dp_fedavg',
        *_MECHANISM_FLAGS['dp_fedavg'],
        '--total_rounds=4',
        '--eval_every=2',
        '--progress',
        f'--root_output_dir={root}',
    ]
    pid, fd = pty.fork()
    if pid == 0:  # The child: the script, on the terminal.
      os.chdir(script_runs.ROOT)
      os.execve(sys.executable, args, script_runs.env())
    output = b''
    deadline = time.monotonic() + script_runs.TIMEOUT
    while time.monotonic() < deadline:
      try:
        chunk = os.read(fd, 65536)
      except OSError:  # The child closed the terminal.
        break
      if not chunk:
        break
      output += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    text = output.decode(errors='replace')
    self.assertEqual(os.waitstatus_to_exitcode(status), 0, text[-2000:])
    bar = text[: text.index('summary.json')]
    for r in range(5):
      self.assertIn(f'{r}/4 [', bar)
    self.assertIn('eps=', bar)
    # The last evaluation is shown with its round.
    self.assertIn('test_acc@2=', bar)


class TrainFlagsTest(_TempDirMixin, tf.test.TestCase):
  """Bad flags and a refused directory, through main() in process.

  Bad flags and a run directory of another configuration: exit status 2 and one
  error line, nothing created or overwritten, through the script's own flag
  parser and main() in this process (SystemExit(2)).
  """

  def test_bad_flags_exit_2_with_one_line(self):
    script = _load_script()
    root = os.path.join(self.tmp, 'refused')
    cases = {
        'task': (('--task=imagenet',), 'task'),
        'mechanism': (('--mechanism=fedsgd',), 'mechanism'),
        'epsilon': (('--epsilon=0',), 'epsilon'),
        'delta': (('--delta=1',), 'delta'),
        'clients_per_round': (
            ('--task=digits', '--clients_per_round=11'),
            'clients_per_round',
        ),
        'flag_type': (('--total_rounds=two',), 'total_rounds'),
        'not_applicable': (
            ('--mechanism=udp', '--compression=0.5'),
            'compression does not apply',
        ),
        'arguments': (('extra',), 'unexpected arguments'),
        'public_clients_all': (
            (
                '--task=digits',
                '--mechanism=smp',
                '--mask=top_k',
                '--public_clients=10',
            ),
            'public_clients (10) must leave private clients',
        ),
        'public_clients_rand_k': (
            ('--mechanism=smp', '--public_clients=3'),
            'public_clients applies only',
        ),
    }
    for name, (args, message) in cases.items():
      with self.subTest(name):
        status, err = _main_in_process(
            script, *args, f'--root_output_dir={root}'
        )
        self.assertEqual(status, 2, err)
        # One error line, after the phase lines of what had started.
        lines = [
            l
            for l in err.splitlines()
            if not (l.startswith('tff_priv: ') and l.endswith(' ...'))
        ]
        self.assertLen(lines, 1, err)
        self.assertStartsWith(lines[0], 'train.py: error: ')
        self.assertStartsWith(err.splitlines()[-1], 'train.py: error: ')
        self.assertIn(message, lines[0])
        self.assertFalse(os.path.exists(root))  # Nothing created.

  def test_other_configuration_is_refused_not_overwritten(self):
    script = _load_script()
    root = os.path.join(self.tmp, 'existing')
    flags = ('--task=digits', '--mechanism=dp_fedavg')
    config = training.RunConfig(
        task='digits', mechanism='dp_fedavg', total_rounds=2
    ).validate()
    training.prepare_output_dir(root, config)
    with open(layout.path(root, layout.CONFIG)) as f:
      before = f.read()
    status, err = _main_in_process(
        script, *flags, '--total_rounds=3', f'--root_output_dir={root}'
    )
    self.assertEqual(status, 2, err)
    self.assertLen(err.splitlines(), 1, err)
    self.assertIn('total_rounds', err)
    with open(layout.path(root, layout.CONFIG)) as f:
      self.assertEqual(f.read(), before)
    self.assertEqual(os.listdir(root), [layout.CONFIG])


if __name__ == '__main__':
  tf.test.main()
