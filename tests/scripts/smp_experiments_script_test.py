"""scripts/smp_experiments.py end to end on the 'digits' task, in subprocesses.

A tiny configuration (digits' 8x8 images, its MLP with d = 19,210, 40 clients
of 10 examples, 4 of them top_k's public set, K = 8 expected per round,
2 rounds; the Shakespeare runs are off: the char-LSTM alone takes longer to
build than this whole test, and its runs go through the same `_run`):

* the first invocation with p in {0.1} runs DP-FedAvg, the noise-free
  ceiling and Fed-SMP rand_k / top_k at p = 0.1, and writes results.jsonl,
  summary.md and accuracy_vs_p.png;
* every record is checked against what its own history implies: uplink bytes
  per client = 4 round(p d) (32 bits per kept value through secure
  aggregation; DP-FedAvg 4 d), cumulative MB = sum over rounds of clients x
  bytes / 1e6, the spent eps recomputed by a fresh ledger charging the
  calibrated sigma every round, and the "first reached the target" MB
  (--target_accuracy=0 is reached in round 1);
* eps spent <= the target, exactly (tolerance 0): the factory's noise does not
  depend on how many clients a round drew, so every round is charged the
  calibrated sigma, whose eps over the 2 rounds is <= the target by
  construction of the calibration.
* a second invocation with p in {0.1, 0.5} skips the 4 finished runs and runs
  only the 2 new ones; a third with another --rounds is refused with exit
  status 2 before anything runs; bad flags are refused the same way.
"""

import json
import math
import os
import subprocess
import sys
import tempfile

import tensorflow as tf

from tff_priv.accounting import ledger as ledger_lib
from tff_priv.program import sampling

_SCRIPT = os.path.join(
    os.path.dirname(__file__), '..', '..', 'scripts', 'smp_experiments.py'
)
_D = 8 * 8 * 256 + 256 + 256 * 10 + 10  # tasks.models.mlp on 8x8 digits.
_CLIENTS, _PUBLIC, _K, _ROUNDS = 40, 4, 8, 2
_EPSILON, _DELTA = 4.0, 1e-5


def _seed():
  """A seed whose Poisson draws give >= K clients in both rounds."""
  draw = sampling.ClientSampling('poisson', _CLIENTS - _PUBLIC, _K)
  for seed in range(1000):
    if all(
        len(draw.sample_indices(seed, r)) >= _K for r in range(1, _ROUNDS + 1)
    ):
      return seed
  raise AssertionError('no such seed')


_SEED = _seed()


def _run(output_dir, *extra):
  return subprocess.run(
      [
          sys.executable, _SCRIPT, '--image_tasks=digits', '--model=mlp',
          f'--num_clients={_CLIENTS}', '--samples_per_client=10',
          f'--public_clients={_PUBLIC}', f'--clients_per_round={_K}',
          f'--rounds={_ROUNDS}', '--local_epochs=1', '--batch_size=10',
          f'--epsilon={_EPSILON}', f'--delta={_DELTA}', '--clip=0.5',
          '--target_accuracy=0', '--test_examples=200',
          '--shakespeare_rounds=0', f'--seed={_SEED}',
          f'--output_dir={output_dir}', *extra,
      ],
      capture_output=True,
      text=True,
      timeout=900,
      check=False,
      env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2'},
  )


def _records(output_dir):
  with open(os.path.join(output_dir, 'results.jsonl')) as f:
    return [json.loads(line) for line in f if line.strip()]


class SmpExperimentsScriptTest(tf.test.TestCase):

  def _check_record(self, r):
    history = r['history']
    self.assertLen(history, _ROUNDS)
    p = r['compression']
    k = _D if p == 1.0 else round(p * _D)
    self.assertEqual(r['kept_coordinates'], k)
    self.assertEqual(r['uploaded_bytes_per_client_per_round'], 4 * k)
    total = 0
    for h in history:
      self.assertGreaterEqual(h['clients'], _K)  # The seed's property.
      self.assertEqual(h['kept_coordinates'], k)
      self.assertEqual(h['uploaded_bytes_per_client'], 4 * k)
      total += h['clients'] * 4 * k
      self.assertAllClose(h['uplink_mb'], total / 1e6)
      self.assertBetween(h['test_accuracy'], 0.0, 1.0)
    self.assertAllClose(r['uplink_mb'], total / 1e6)
    # --target_accuracy=0: reached at the first evaluation (round 1).
    self.assertEqual(r['round_to_target'], 1)
    self.assertAllClose(r['uplink_mb_to_target'], history[0]['uplink_mb'])
    self.assertEqual(r['final_test_accuracy'], history[-1]['test_accuracy'])
    self.assertEqual(
        r['best_test_accuracy'], max(h['test_accuracy'] for h in history)
    )
    if r['method'] == 'noise_free':
      self.assertEqual(r['noise_multiplier'], 0.0)
      self.assertEqual(float(r['epsilon_spent']), math.inf)
      return
    sigma = r['noise_multiplier']
    self.assertGreater(sigma, 0.0)
    self.assertEqual(r['epsilon_target'], _EPSILON)
    ledger = ledger_lib.PrivacyLedger()
    q = _K / (_CLIENTS - _PUBLIC)
    for _ in history:
      ledger.record_gaussian(sigma, sampling_probability=q)
    self.assertAllClose(
        r['epsilon_spent'], ledger.epsilon(_DELTA), rtol=1e-6
    )
    self.assertLessEqual(r['epsilon_spent'], _EPSILON)

  def test_end_to_end_resume_and_refusals(self):
    out = tempfile.mkdtemp(dir=self.get_temp_dir())
    first = _run(out, '--compressions=0.1')
    self.assertEqual(first.returncode, 0, first.stderr[-3000:])
    self.assertEqual(first.stdout.count(': running'), 4)
    records = _records(out)
    keys = {r['key'] for r in records}
    self.assertEqual(
        keys,
        {
            f'digits/dp_fedavg/p=1/seed={_SEED}',
            f'digits/noise_free/p=1/seed={_SEED}',
            f'digits/fed_smp/rand_k/p=0.1/seed={_SEED}',
            f'digits/fed_smp/top_k/p=0.1/seed={_SEED}',
        },
    )
    sigmas = {r['noise_multiplier'] for r in records if r['method'] != 'noise_free'}
    self.assertLen(sigmas, 1)  # One calibration for every method: equal eps.
    for r in records:
      with self.subTest(r['key']):
        self._check_record(r)

    # Resume: the finished runs are skipped, only the new p runs.
    second = _run(out, '--compressions=0.1,0.5')
    self.assertEqual(second.returncode, 0, second.stderr[-3000:])
    self.assertEqual(second.stdout.count('done already'), 4)
    self.assertEqual(second.stdout.count(': running'), 2)
    records = _records(out)
    self.assertLen(records, 6)
    for r in records[4:]:
      self.assertEqual(r['compression'], 0.5)
      with self.subTest(r['key']):
        self._check_record(r)

    with open(os.path.join(out, 'summary.md')) as f:
      summary = f.read()
    self.assertIn('| method | p=0.1 | p=0.5 | p=1 |', summary)
    self.assertIn('| Fed-SMP rand_k |', summary)
    self.assertIn('| Fed-SMP top_k |', summary)
    self.assertIn('| DP-FedAvg |', summary)
    with open(os.path.join(out, 'accuracy_vs_p.png'), 'rb') as f:
      self.assertEqual(f.read(8), b'\x89PNG\r\n\x1a\n')

    # Another setting in the same output directory: refused, nothing runs.
    other = _run(out, '--compressions=0.1', f'--rounds={_ROUNDS + 1}')
    self.assertEqual(other.returncode, 2)
    self.assertIn('rounds', other.stderr)
    self.assertNotIn('running', other.stdout)
    self.assertLen(_records(out), 6)

  def test_bad_flags_exit_2(self):
    out = tempfile.mkdtemp(dir=self.get_temp_dir())
    for flag, word in (
        ('--compressions=1.0', 'compressions'),
        ('--masks=rand_k,foo', 'masks'),
    ):
      with self.subTest(flag):
        result = _run(out, flag)
        self.assertEqual(result.returncode, 2, result.stderr[-2000:])
        self.assertIn(word, result.stderr.splitlines()[-1])
        self.assertFalse(os.path.exists(os.path.join(out, 'results.jsonl')))


if __name__ == '__main__':
  tf.test.main()
