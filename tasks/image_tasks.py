"""Image classification tasks as `tff.simulation.baselines.BaselineTask`.

Two element layouts, each with TFF's own baseline preprocessing, so a task
built here batches exactly like TFF's baseline for the same data: grey images
in TFF's EMNIST layout (`grey_task`: EMNIST, MNIST, Fashion-MNIST, mnist5k,
digits) and colour images in TFF's CIFAR-100 layout (`colour_task`: CIFAR-10,
CIFAR-100). Synthetic splits (`split_arrays`) cut in-memory arrays over
clients; natural splits (TFF's EMNIST / CIFAR-100) keep TFF's ClientData.
"""

import collections
from collections.abc import Callable, Mapping
from typing import Optional, Union
import warnings

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

# TFF's baseline preprocessing functions (not exported under tff.*): the same
# pipelines the EMNIST and CIFAR-100 baselines use.
from tensorflow_federated.python.simulation.baselines.cifar100 import (
    image_classification_preprocessing,
)
from tensorflow_federated.python.simulation.baselines.emnist import (
    emnist_preprocessing,
)

from tff_priv_tasks import client_data
from tff_priv_tasks import models
from tff_priv_tasks import partition

GREY_MODELS = {
    'cnn': models.mcmahan_cnn,
    'mlp': models.mlp,
    'softmax': models.softmax_regression,
}
COLOUR_MODELS = {'vgg': models.small_vgg, 'udp_cnn': models.udp_cifar_cnn}
CIFAR_SHAPE = (32, 32, 3)

ClientSpec = tff.simulation.baselines.ClientSpec
TestData = Union[tff.simulation.datasets.ClientData, tf.data.Dataset]


def default_eval_spec() -> ClientSpec:
  """TFF's baselines' evaluation spec: one pass, batch 64, no shuffling."""
  return ClientSpec(num_epochs=1, batch_size=64, shuffle_buffer_size=1)


def _check_model(
    model: str, choices: Mapping[str, Callable[..., tf.keras.Model]]
):
  if model not in choices:
    raise ValueError(f'model must be one of {tuple(choices)}, got {model!r}')
  return choices[model]


def _classification_task(
    datasets: tff.simulation.baselines.BaselineTaskDatasets,
    build_keras_model: Callable[[], tf.keras.Model],
) -> tff.simulation.baselines.BaselineTask:
  def model_fn() -> tff.learning.models.VariableModel:
    return tff.learning.models.from_keras_model(
        keras_model=build_keras_model(),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        input_spec=datasets.element_type_structure,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
    )

  return tff.simulation.baselines.BaselineTask(datasets, model_fn)


def _in_order(spec: ClientSpec) -> Callable[[tf.data.Dataset], tf.data.Dataset]:
  """TFF's EMNIST preprocessing with its batches kept in order.

  TFF's pipeline maps its batches in parallel with deterministic=False
  (unless given a debug seed), so under load a client's batches arrived in
  another order from one round to the next. A sequential map (the map only
  reshapes) keeps them in order; TF then warns that the `deterministic`
  argument has no effect, which is the point.
  """
  preprocess = emnist_preprocessing.create_preprocess_fn(
      spec, emnist_task='character_recognition', num_parallel_calls=None
  )

  def in_order(dataset: tf.data.Dataset) -> tf.data.Dataset:
    with warnings.catch_warnings():
      warnings.filterwarnings(
          'ignore', message='The `deterministic` argument has no effect'
      )
      return preprocess(dataset)

  return in_order


def grey_task(
    train_data: tff.simulation.datasets.ClientData,
    test_data: TestData,
    *,
    train_client_spec: ClientSpec,
    eval_client_spec: Optional[ClientSpec],
    num_classes: int,
    model: str = 'cnn',
) -> tff.simulation.baselines.BaselineTask:
  """A task on label/pixels elements (TFF's EMNIST preprocessing).

  Grey images, elements OrderedDict(label=int32 [], pixels=float32 [H, W])
  (TFF's EMNIST layout): EMNIST, MNIST, Fashion-MNIST, mnist5k, digits.
  Preprocessing: TFF's EMNIST character-recognition pipeline (shuffle, repeat
  num_epochs, take max_elements, batch, map to (pixels[..., None], label)).
  Models: 'cnn' (McMahan CNN) or 'mlp' (UDP's 784-256-10 MLP).

  Args:
    train_data: ClientData of OrderedDict(label, pixels [H, W]).
    test_data: ClientData or tf.data.Dataset of the same elements.
    train_client_spec: how train clients iterate (epochs, batch, ...).
    eval_client_spec: same for evaluation; None: `default_eval_spec()`.
    num_classes: classifier outputs.
    model: 'cnn', 'mlp' or 'softmax'.

  Returns:
    The BaselineTask.
  """
  builder = _check_model(model, GREY_MODELS)
  eval_client_spec = eval_client_spec or default_eval_spec()
  pixels_shape = tuple(train_data.element_type_structure['pixels'].shape)
  datasets = tff.simulation.baselines.BaselineTaskDatasets(
      train_data=train_data,
      test_data=test_data,
      train_preprocess_fn=_in_order(train_client_spec),
      eval_preprocess_fn=_in_order(eval_client_spec),
  )
  return _classification_task(
      datasets, lambda: builder(pixels_shape + (1,), num_classes)
  )


def colour_task(
    train_data: tff.simulation.datasets.ClientData,
    test_data: TestData,
    *,
    train_client_spec: ClientSpec,
    eval_client_spec: Optional[ClientSpec],
    num_classes: int,
    model: str = 'vgg',
) -> tff.simulation.baselines.BaselineTask:
  """A task on image/label elements (TFF's CIFAR-100 preprocessing, no crop).

  Colour images, elements OrderedDict([coarse_label,] image=uint8 [32, 32, 3],
  label=int64 []) (TFF's CIFAR-100 layout): CIFAR-10, CIFAR-100.
  Preprocessing: TFF's CIFAR-100 pipeline without cropping (float32,
  `tf.image.per_image_standardization`). Models: 'vgg' (LDP-FL's small VGG)
  or 'udp_cnn' (UDP's one-layer CNN).

  Args:
    train_data: ClientData of OrderedDict(..., image uint8 [32, 32, 3], label).
    test_data: ClientData or tf.data.Dataset of the same elements.
    train_client_spec: how train clients iterate.
    eval_client_spec: same for evaluation; None: `default_eval_spec()`.
    num_classes: classifier outputs.
    model: 'vgg' or 'udp_cnn'.

  Returns:
    The BaselineTask.
  """
  builder = _check_model(model, COLOUR_MODELS)
  eval_client_spec = eval_client_spec or default_eval_spec()
  create = image_classification_preprocessing.create_preprocess_fn
  datasets = tff.simulation.baselines.BaselineTaskDatasets(
      train_data=train_data,
      test_data=test_data,
      train_preprocess_fn=create(train_client_spec, crop_shape=CIFAR_SHAPE),
      eval_preprocess_fn=create(eval_client_spec, crop_shape=CIFAR_SHAPE),
  )
  return _classification_task(
      datasets, lambda: builder(CIFAR_SHAPE, num_classes)
  )


def grey_features(images: np.ndarray, labels: np.ndarray):
  """TFF's EMNIST element layout: OrderedDict(label=int32, pixels=float32)."""
  return collections.OrderedDict(
      label=np.asarray(labels, np.int32), pixels=np.asarray(images, np.float32)
  )


def colour_features(images: np.ndarray, labels: np.ndarray):
  """TFF's CIFAR-100 layout minus coarse_label: image uint8, label int64."""
  return collections.OrderedDict(
      image=np.asarray(images, np.uint8), label=np.asarray(labels, np.int64)
  )


def split_arrays(
    features: Mapping[str, np.ndarray],
    *,
    num_clients: int,
    seed: int,
    partition_method: str = 'iid',
    samples_per_client: Optional[int] = None,
    classes_per_client: int = 2,
    alpha: float = 0.5,
) -> client_data.InMemoryClientData:
  """Cuts feature arrays over clients with `tasks.partition` by `label`.

  Deterministic for a seed. The test data of such a split is the whole
  held-out split as one centralised `tf.data.Dataset` (`centralized`);
  natural splits (TFF's EMNIST / CIFAR-100) keep TFF's train and test
  ClientData.
  """
  parts = partition.partition(
      features['label'],
      num_clients,
      seed,
      method=partition_method,
      samples_per_client=samples_per_client,
      classes_per_client=classes_per_client,
      alpha=alpha,
  )
  return client_data.from_partition(features, parts)


def centralized(features: Mapping[str, np.ndarray]) -> tf.data.Dataset:
  """A held-out split as one dataset of the same elements as the clients'."""
  return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(features))
