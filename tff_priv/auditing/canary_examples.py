"""Record-level one-run audit of a training run with canary examples.

Steinke, Nasr, Jagielski, "Privacy Auditing with One (1) Training Run"
(NeurIPS 2023): m canary records each enter the training data independently
with probability 1/2; from the released output the auditor guesses, for r of
them, whether they were in, and the number v of right guesses bounds eps from
below (`one_run.epsilon_lower_bound`). From the same guesses, Mahloujifar et
al.'s f-DP bound (`one_run.fdp_mu_lower_bound`) is reported beside.
"""

import math
from typing import Any, Callable, Optional, Sequence

import numpy as np
import tensorflow as tf

from tff_priv import validation
from tff_priv.auditing import one_run

GUESS_FRACTIONS = (0.1, 0.2, 0.5, 1.0)
ALPHA = 0.05
METHOD = 'one-run canary examples (Steinke, Nasr, Jagielski, NeurIPS 2023)'
MEANING = (
    'a lower bound, holding with probability >= 1 - alpha, on the record-level '
    'eps (one example of one client, replace-one) of this run against an '
    'analyst who sees the released models, from guessing which canary '
    'examples were trained on; below the accounted eps when the claim holds'
)
FDP_MEANING = (
    'Mahloujifar, Melis, Chaudhuri, "Auditing f-Differential Privacy in One '
    'Run": the largest mu such that the run being mu-GDP is refuted with '
    'probability >= 1 - alpha, and the eps at delta of that Gaussian curve: '
    "a lower bound on the run's eps if its trade-off curve is Gaussian (as "
    'compositions of sampled Gaussians nearly are), otherwise a refutation '
    'of the Gaussian claim only'
)
_SEED_TAG = 0x4341_4E58  # Separates these draws from the seed's other uses.


def num_slots(num_canaries: int, num_clients: int, client_index: int) -> int:
  """How many canary slots client `client_index` holds."""
  return len(_slot_indices(num_canaries, num_clients, client_index))


def _slot_indices(num_canaries, num_clients, client_index) -> np.ndarray:
  """The canaries j with a slot in client i's data: j mod N = i."""
  return np.arange(client_index, num_canaries, num_clients)


class CanaryExamples:
  """m canary examples, their inclusion bits and their slots, from a seed.

  For a mechanism whose guarantee is record-level under replace-one
  adjacency (UDP): canary j has a fixed slot in the local data of client
  j mod N. If the canary is in, the slot holds the canary; if out, it holds a
  blank record (an all-zero input with label 0). Toggling one canary replaces
  one record of one client's data, so the datasets of any two inclusion vectors
  that differ in one canary are replace-one neighbours, and every client's
  |D_i| is the same whichever canaries are in (its weight and the sensitivity
  2 eta C / |D_i| reveal nothing about them). The slots are part of the
  audited run's data: its sensitivity counts them (`num_slots`), so its noise
  is what the claimed eps needs for that data. Counting only the real examples
  would add noise the claim does not need (3x with 10 real examples and 20
  slots) and the audit would test a more private run than claimed.

  Canaries are out-of-distribution so that their memorisation shows: each is
  an input of independent random signs (+-1 per value) with a uniform random
  label; such inputs are nearly orthogonal to each other, so one canary's
  gradient moves its own loss and barely another's. The score of a canary is
  its loss drop from the initial model to the final model (both released: the
  run writes initial_model.npz and final_model.npz): training on a canary
  lowers its loss, more so the less noise hides it.

  Attributes:
    num_canaries: m.
    included: [m] bool, secret: canary j is in the training data.
    x: [m, *input shape] the canaries' inputs.
    y: [m] their labels.
  """

  def __init__(
      self,
      seed: int,
      num_canaries: int,
      num_clients: int,
      input_shape: Sequence[int],
      num_classes: int,
      input_dtype=np.float32,
  ):
    self.num_canaries = validation.int_at_least('num_canaries', num_canaries, 2)
    self._num_clients = validation.int_at_least('num_clients', num_clients, 1)
    num_classes = validation.int_at_least('num_classes', num_classes, 2)
    rng = np.random.default_rng([_SEED_TAG, seed])
    self.included = rng.random(self.num_canaries) < 0.5
    # Random signs: out of distribution, and nearly orthogonal to each other
    # (a canary's own gradient moves its loss, the others' barely do).
    self.x = rng.choice(
        np.array([-1.0, 1.0]), (self.num_canaries, *input_shape)
    ).astype(input_dtype)
    self.y = rng.integers(0, num_classes, self.num_canaries).astype(np.int32)
    self._input_dtype = input_dtype

  def slots(self, client_index: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of the client's canary slots: the canary if in, else a blank."""
    own = _slot_indices(self.num_canaries, self._num_clients, client_index)
    x = self.x[own].copy()
    y = self.y[own].copy()
    out = ~self.included[own]
    x[out] = 0
    y[out] = 0
    return x, y

  def add_to(
      self, dataset: tf.data.Dataset, client_index: int, batch_size: int
  ) -> tf.data.Dataset:
    """A client's preprocessed dataset (batches of (x, y)) with its slots.

    The slots come after the client's own examples (so a cap on a client's
    examples never drops them), rebatched at `batch_size`; UDP's full-batch
    step does not depend on the batching.
    """
    x, y = self.slots(client_index)
    if not len(y):
      return dataset
    x_spec, y_spec = _unpack(dataset.element_spec)
    extra = tf.data.Dataset.from_tensor_slices(
        (tf.cast(x, x_spec.dtype), tf.cast(y, y_spec.dtype))
    )
    if isinstance(dataset.element_spec, dict):
      extra = extra.map(lambda a, b: {'x': a, 'y': b})
    return dataset.unbatch().concatenate(extra).batch(batch_size)

  def scores(
      self,
      loss_fn: Callable[[np.ndarray, np.ndarray, Any], np.ndarray],
      initial_weights: Any,
      final_weights: Any,
  ) -> np.ndarray:
    """Each canary's loss drop from the initial to the final model.

    Args:
      loss_fn: (x, y, model weights) -> [m] per-example losses.
      initial_weights: the released initial model.
      final_weights: the released final model.
    """
    before = np.asarray(loss_fn(self.x, self.y, initial_weights), np.float64)
    after = np.asarray(loss_fn(self.x, self.y, final_weights), np.float64)
    return np.nan_to_num(before - after, nan=-np.inf)


def model_loss_fn(model_fn: Callable[[], Any]):
  """(x, y, (trainable, non_trainable) weights) -> [m] per-example losses.

  The sparse categorical cross-entropy of the model's predicted class
  probabilities (the per-example loss UDP clips), in inference mode.
  """
  models = []

  def loss(x, y, weights):
    if not models:
      models.append(model_fn())
    model = models[0]
    trainable, non_trainable = weights
    for variable, value in zip(model.trainable_variables, trainable):
      variable.assign(value)
    for variable, value in zip(model.non_trainable_variables, non_trainable):
      variable.assign(value)
    predictions = model.predict_on_batch(tf.constant(x), training=False)
    return tf.keras.losses.sparse_categorical_crossentropy(
        tf.constant(y), predictions
    ).numpy()

  return loss


def model_shape(
    model_fn: Callable[[], Any],
) -> tuple[tuple[int, ...], int, Any]:
  """(input shape without the batch, number of classes, input dtype)."""
  model = model_fn()
  x_spec = _unpack(model.input_spec)[0]
  shape = tuple(int(d) for d in x_spec.shape[1:])
  out = model.predict_on_batch(
      tf.zeros((1, *shape), x_spec.dtype), training=False
  )
  return shape, int(out.shape[-1]), x_spec.dtype.as_numpy_dtype


def _unpack(element):
  if isinstance(element, dict):
    return element['x'], element['y']
  return element[0], element[1]


def guesses(scores: np.ndarray, fraction: float) -> tuple[np.ndarray, int]:
  """(guess per canary: +1 in, -1 out, 0 abstain; k) for one grid fraction.

  'in' for the k highest scores, 'out' for the k lowest, k = ceil(f m / 2)
  (ties broken by index, a fixed public rule).
  """
  m = len(scores)
  k = min(m // 2, max(1, math.ceil(fraction * m / 2)))
  order = np.argsort(-np.asarray(scores), kind='stable')
  guess = np.zeros(m, np.int64)
  guess[order[:k]] = 1
  guess[order[m - k :]] = -1
  return guess, k


def audit(
    scores: np.ndarray,
    included: np.ndarray,
    delta: float,
    accounted_epsilon: Optional[float] = None,
    alpha: float = ALPHA,
    fractions: Sequence[float] = GUESS_FRACTIONS,
) -> dict[str, Any]:
  """The `privacy['empirical']` entry of a run with canary examples.

  Guesses: for each fraction f of a fixed public grid `GUESS_FRACTIONS`, the
  auditor guesses 'in' for the k = ceil(f m / 2) highest scores and 'out' for
  the k lowest, abstaining on the rest; each bound is computed at level
  alpha / len(grid) and the largest is reported (a union bound over the grid,
  so the reported bound holds with probability >= 1 - alpha).

  Args:
    scores: [m] each canary's score (higher: more likely in).
    included: [m] bool, which canaries were in.
    delta: the run's delta.
    accounted_epsilon: the run's accounted record-level eps against the
      analyst, printed beside (None: none).
    alpha: one minus the confidence of the reported bound.
    fractions: the public grid of r / m; each bound at alpha / len(grid).

  Returns:
    A JSON-ready dict: the bound, the guesses that gave it, the grid.
  """
  scores = np.asarray(scores, np.float64)
  included = np.asarray(included, bool)
  m = len(scores)
  if included.shape != (m,):
    raise ValueError(f'included must have {m} values, got {included.shape}')
  rows = []
  for f in fractions:
    guess, k = guesses(scores, f)
    made = guess != 0
    correct = int(
        np.sum((guess == 1) & included) + np.sum((guess == -1) & ~included)
    )
    level = alpha / len(fractions)
    bound = one_run.epsilon_lower_bound(
        m, int(made.sum()), correct, delta, level
    )
    mu = one_run.fdp_mu_lower_bound(m, int(made.sum()), correct, level)
    rows.append(
        {
            'fraction': f,
            'k_in': k,
            'k_out': k,
            'guesses': int(made.sum()),
            'correct': correct,
            'epsilon_lower_bound': bound,
            'fdp_mu_lower_bound': mu,
            'fdp_epsilon_lower_bound': one_run.fdp_epsilon_lower_bound(
                m, int(made.sum()), correct, delta, level
            ),
        }
    )
  best = max(rows, key=lambda r: r['epsilon_lower_bound'])
  best_fdp = max(rows, key=lambda r: r['fdp_mu_lower_bound'])
  return {
      'method': METHOD,
      'kind': 'bound',
      'headline': (
          f"epsilon_lower_bound={best['epsilon_lower_bound']:.3g} (a bound "
          f'holding with probability >= {1 - alpha:g}, not an estimate)'
      ),
      'unit': 'example',
      'epsilon_lower_bound': best['epsilon_lower_bound'],
      'num_canaries': m,
      'num_included': int(included.sum()),
      'k_in': best['k_in'],
      'k_out': best['k_out'],
      'guesses': best['guesses'],
      'correct': best['correct'],
      'delta': delta,
      'alpha': alpha,
      'accounted_epsilon': accounted_epsilon,
      'meaning': MEANING,
      # Mahloujifar et al.'s f-DP bound from the same canaries and scores,
      # its own union bound over the grid (each bound holds alone with
      # probability >= 1 - alpha; they are not combined).
      'fdp_mu_lower_bound': best_fdp['fdp_mu_lower_bound'],
      'fdp_epsilon_lower_bound': best_fdp['fdp_epsilon_lower_bound'],
      'fdp_guesses': best_fdp['guesses'],
      'fdp_correct': best_fdp['correct'],
      'fdp_meaning': FDP_MEANING,
      'grid': rows,
  }
