"""Synthetic populations shaped as TFF's EMNIST, CIFAR-100 and Shakespeare.

For cost, memory and dry runs at the mission's scale where the real files are
not at hand: never for accuracy claims. Each task has the real one's client
count, element layout, per-client example counts of the same mean (a spread,
not the real histogram) and classes; its examples are generated from a seed
when a client's dataset is made (nothing large in memory or on disk, the same
client the same data on every call and every process). The data has structure
a model can learn (class templates plus noise; a Zipf vocabulary of words), so
accuracy moves, but it is not the real data and says nothing about it.
"""

import collections
from typing import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

EMNIST_CLIENTS = 3383
EMNIST_MEAN_EXAMPLES = 226
EMNIST_CLASSES = 62
CIFAR100_CLIENTS = 500
CIFAR100_EXAMPLES = 100
CIFAR100_CLASSES = 100
SHAKESPEARE_CLIENTS = 715
SHAKESPEARE_MEAN_SNIPPETS = 22.5
TEST_EXAMPLES = 10_000
_VOCABULARY = 2000
_WORDS = (15, 40)  # Words per snippet: uniform in [15, 40].
_LETTERS = 'etaoinshrdlcumwfgypbvkjxqz'


def _counts(rng, num_clients, mean, sigma, low, high):
  """Per-client example counts: lognormal of the given mean, clipped."""
  raw = rng.lognormal(0.0, sigma, num_clients)
  counts = np.round(raw * mean / raw.mean())
  return np.clip(counts, low, high).astype(np.int32)


def _index(client_id):
  """The client's index from its id `client_NNNN`."""
  return tf.strings.to_number(
      tf.strings.split(client_id, '_')[-1], out_type=tf.int32
  )


def _ids(num_clients):
  if (
      isinstance(num_clients, bool)
      or not isinstance(num_clients, int)
      or num_clients < 1
  ):
    raise ValueError(f'num_clients must be a positive int, got {num_clients!r}')
  width = max(4, len(str(num_clients - 1)))
  return [f'client_{i:0{width}d}' for i in range(num_clients)]


def _client_data(
    num_clients, make: Callable
) -> tff.simulation.datasets.ClientData:
  """ClientData whose client `client_i` is `make(i)`, made when asked for."""
  return tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
      _ids(num_clients), lambda cid: make(_index(cid))
  )


class _Images:
  """Class templates plus per-client contrast and pixel noise.

  A client's label mix is a Dirichlet draw around the population's class
  frequencies, each image its class template (a smooth random pattern) with a
  per-client contrast and Gaussian pixel noise. The test set is generated the
  same way from another seed: one pool of 10,000 examples with the
  population's class frequencies.
  """

  def __init__(self, seed, num_clients, counts, num_classes, shape, alpha):
    rng = np.random.RandomState(seed)
    coarse = rng.uniform(
        -1.0,
        1.0,
        (num_classes, shape[0] // 4, shape[1] // 4) + tuple(shape[2:]),
    )
    coarse = coarse.reshape(coarse.shape[:3] + (-1,))
    templates = tf.image.resize(coarse, shape[:2], method='bicubic').numpy()
    self.templates = tf.constant(
        templates.reshape((num_classes,) + shape), tf.float32
    )
    # Class frequencies of the population (some classes far more common, as
    # EMNIST's digits are), and each client's mix around them.
    prior = rng.dirichlet(np.full(num_classes, 2.0))
    self.prior = prior
    mixes = rng.dirichlet(
        alpha * num_classes * prior + 1e-3, num_clients
    ).astype(np.float32)
    self.log_mixes = tf.constant(np.log(mixes + 1e-12), tf.float32)
    self.contrast = tf.constant(rng.uniform(0.6, 1.4, num_clients), tf.float32)
    self.counts = tf.constant(counts, tf.int32)
    self.seed = seed
    self.shape = shape

  def examples(self, key, n, log_mix, contrast):
    """n (labels, values in [-1.5, 1.5]-ish) from `key` (a [2] seed)."""
    label_key, noise_key = tf.unstack(
        tf.random.experimental.stateless_split(key, 2)
    )
    labels = tf.random.stateless_categorical(log_mix[None], n, seed=label_key)[
        0
    ]
    noise = tf.random.stateless_normal(
        tf.concat([[n], self.shape], 0), seed=noise_key
    )
    values = contrast * tf.gather(self.templates, labels) + 0.6 * noise
    return labels, values

  def client(self, i):
    key = tf.stack([tf.constant(self.seed, tf.int32), i])
    return self.examples(
        key, self.counts[i], self.log_mixes[i], self.contrast[i]
    )

  def test(self):
    key = tf.constant([self.seed, -1], tf.int32)
    log_prior = tf.constant(np.log(self.prior), tf.float32)
    return self.examples(key, TEST_EXAMPLES, log_prior, 1.0)


def _grey(labels, values):
  pixels = tf.clip_by_value(0.5 + 0.35 * values, 0.0, 1.0)
  return tf.data.Dataset.from_tensor_slices(
      collections.OrderedDict(label=tf.cast(labels, tf.int32), pixels=pixels)
  )


def _colour(labels, values):
  image = tf.clip_by_value(128.0 + 60.0 * values, 0.0, 255.0)
  return tf.data.Dataset.from_tensor_slices(
      collections.OrderedDict(
          image=tf.cast(image, tf.uint8), label=tf.cast(labels, tf.int64)
      )
  )


def emnist_shaped(seed: int = 0, num_clients: int = EMNIST_CLIENTS):
  """(train ClientData, test Dataset) in TFF's EMNIST layout, 62 classes.

  3,383 clients; examples per client lognormal, mean 226 (sigma 0.5,
  10..1,000); elements label int32, pixels float32 [28, 28]; 62 classes.
  EMNIST-62 (TFF, `only_digits=False`) has 3,400 writers of about 200 examples
  and the digits-only split 3,383 writers; the shape here is the one issue 35
  of the project set (3,383 writers, about 226 examples each, 62 classes).
  """
  _ids(num_clients)  # Checks num_clients before any work.
  rng = np.random.RandomState(seed)
  counts = _counts(rng, num_clients, EMNIST_MEAN_EXAMPLES, 0.5, 10, 1000)
  images = _Images(seed, num_clients, counts, EMNIST_CLASSES, (28, 28), 5.0)
  train = _client_data(num_clients, lambda i: _grey(*images.client(i)))
  return train, _grey(*images.test())


def cifar100_shaped(seed: int = 0, num_clients: int = CIFAR100_CLIENTS):
  """(train ClientData, test Dataset) in TFF's CIFAR-100 layout.

  Without the coarse label. 500 clients of 100 examples, as TFF's 500 clients
  of 100 images; elements image uint8 [32, 32, 3], label int64; 100 classes.
  """
  _ids(num_clients)
  counts = np.full(num_clients, CIFAR100_EXAMPLES, np.int32)
  images = _Images(
      seed, num_clients, counts, CIFAR100_CLASSES, (32, 32, 3), 0.5
  )
  train = _client_data(num_clients, lambda i: _colour(*images.client(i)))
  return train, _colour(*images.test())


class _Snippets:
  """Snippets of Zipf-distributed random words.

  15 to 40 words drawn from a Zipf(1.1) vocabulary of 2,000 random lower-case
  words, ending in '.'. A client's test snippets are generated the same way
  from another seed: a fifth of its count, at least one.
  """

  def __init__(self, seed, counts):
    rng = np.random.RandomState(seed)
    letters = np.array(list(_LETTERS))
    letter_p = np.linspace(2.0, 0.2, len(letters))
    letter_p /= letter_p.sum()
    words = [
        ''.join(rng.choice(letters, rng.randint(2, 9), p=letter_p))
        for _ in range(_VOCABULARY)
    ]
    self.words = tf.constant(words)
    ranks = np.arange(1, _VOCABULARY + 1)
    self.log_zipf = tf.constant(
        np.log(ranks**-1.1 / np.sum(ranks**-1.1)), tf.float32
    )
    self.counts = tf.constant(counts, tf.int32)
    self.seed = seed

  def snippets(self, key, n):
    word_key, length_key = tf.unstack(
        tf.random.experimental.stateless_split(key, 2)
    )
    ids = tf.random.stateless_categorical(
        self.log_zipf[None], n * _WORDS[1], seed=word_key
    )[0]
    lengths = tf.random.stateless_uniform(
        [n], length_key, _WORDS[0], _WORDS[1] + 1, dtype=tf.int32
    )
    words = tf.RaggedTensor.from_tensor(
        tf.reshape(tf.gather(self.words, ids), [n, _WORDS[1]]), lengths
    )
    text = tf.strings.reduce_join(words, axis=1, separator=' ') + '.'
    return tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(snippets=text)
    )

  def client(self, i, test):
    key = tf.stack([tf.constant(self.seed, tf.int32), 2 * i + int(test)])
    n = self.counts[i]
    if test:
      n = tf.maximum(1, n // 5)
    return self.snippets(key, n)


def shakespeare_shaped(seed: int = 0, num_clients: int = SHAKESPEARE_CLIENTS):
  """(train, test) ClientData in TFF's Shakespeare layout (`snippets`).

  715 clients, as TFF's 715 roles (with 16,068 training snippets); snippets
  per client lognormal, mean 22.5 (sigma 1, 1..1,000); element snippets
  string; classes: TFF's char vocabulary.
  """
  _ids(num_clients)
  rng = np.random.RandomState(seed)
  counts = _counts(rng, num_clients, SHAKESPEARE_MEAN_SNIPPETS, 1.0, 1, 1000)
  snippets = _Snippets(seed, counts)
  train = _client_data(num_clients, lambda i: snippets.client(i, False))
  test = _client_data(num_clients, lambda i: snippets.client(i, True))
  return train, test
