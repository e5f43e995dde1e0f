"""Keras models of the papers tff_priv reproduces (uncompiled).

`mcmahan_cnn` (FedAvg's CNN, Fed-SMP's FMNIST model), `mlp` (UDP's
784-256-10 MLP), `udp_cifar_cnn` (UDP's CIFAR-10 CNN), `small_vgg` (LDP-FL's)
and `shakespeare_lstm` (Fed-SMP's Shakespeare model), each with its source and
parameter count. Where a paper leaves the architecture open the choice is
marked [decision]. The classifiers end in a softmax (use
`SparseCategoricalCrossentropy(from_logits=False)`); the LSTM returns logits
as TFF's baseline does.
"""

from collections.abc import Sequence

import tensorflow as tf

# TFF's baseline char-LSTM is exactly the paper's model; it is the one source.
from tensorflow_federated.python.simulation.baselines.shakespeare import (
    char_prediction_models,
)
from tensorflow_federated.python.simulation.baselines.shakespeare import (
    char_prediction_tasks,
)

SHAKESPEARE_VOCAB_SIZE = char_prediction_tasks.VOCAB_LENGTH
SHAKESPEARE_SEQUENCE_LENGTH = char_prediction_tasks.DEFAULT_SEQUENCE_LENGTH


SOFTMAX_L2 = 0.01


def _check(input_shape: Sequence[int], num_classes: int) -> tuple[int, ...]:
  shape = tuple(int(s) for s in input_shape)
  if not shape or any(s <= 0 for s in shape):
    raise ValueError(
        f'input_shape must be positive dimensions, got {input_shape}'
    )
  if isinstance(num_classes, bool) or not isinstance(num_classes, int):
    raise TypeError(f'num_classes must be an int, got {num_classes!r}')
  if num_classes < 2:
    raise ValueError(f'num_classes must be >= 2, got {num_classes}')
  return shape


def _image_input(shape: tuple[int, ...]) -> list[tf.keras.layers.Layer]:
  """Input layers; a 2-D (H, W) input gets a channel axis."""
  layers = [tf.keras.layers.InputLayer(input_shape=shape)]
  if len(shape) == 2:
    layers.append(tf.keras.layers.Reshape(shape + (1,)))
  return layers


def mcmahan_cnn(
    input_shape: Sequence[int] = (28, 28, 1), num_classes: int = 10
) -> tf.keras.Model:
  """The CNN of McMahan et al. 2017 ("Communication-Efficient Learning ...").

  conv 5x5x32 (same padding, ReLU) -> 2x2 max pool -> conv 5x5x64 (same,
  ReLU) -> 2x2 max pool -> dense 512 (ReLU) -> dense num_classes (softmax).
  1,663,370 parameters for 28x28x1 inputs and 10 classes (the paper's
  number; 1,690,046 for EMNIST's 62 classes). Layer for layer the model of
  TFF's `create_original_fedavg_cnn_model`, which is fixed to 28x28x1 and
  10/62 classes; this one takes any input shape (e.g. 8x8 digits). Fed-SMP's
  FMNIST model.

  Args:
    input_shape: (H, W) or (H, W, C).
    num_classes: output classes.

  Returns:
    An uncompiled Keras model.
  """
  shape = _check(input_shape, num_classes)

  def conv(filters):
    return tf.keras.layers.Conv2D(
        filters, kernel_size=5, padding='same', activation='relu'
    )

  pool = lambda: tf.keras.layers.MaxPooling2D(pool_size=2, padding='same')
  return tf.keras.Sequential(
      _image_input(shape)
      + [
          conv(32),
          pool(),
          conv(64),
          pool(),
          tf.keras.layers.Flatten(),
          tf.keras.layers.Dense(512, activation='relu'),
          tf.keras.layers.Dense(num_classes, activation='softmax'),
      ],
      name='mcmahan_cnn',
  )


def mlp(
    input_shape: Sequence[int] = (28, 28),
    num_classes: int = 10,
    hidden_units: int = 256,
) -> tf.keras.Model:
  """UDP's MLP: one hidden ReLU layer of 256 units, softmax output.

  Wei et al. ("User-Level Privacy-Preserving Federated Learning", Sec. VI):
  "single hidden layer with 256 hidden units, ReLU ... softmax of 10
  classes" on MNIST: 784-256-10, 784*256 + 256 + 256*10 + 10 = 203,530
  parameters.

  Args:
    input_shape: any shape; it is flattened.
    num_classes: output classes.
    hidden_units: width of the hidden layer.

  Returns:
    An uncompiled Keras model.
  """
  shape = _check(input_shape, num_classes)
  if (
      isinstance(hidden_units, bool)
      or not isinstance(hidden_units, int)
      or (hidden_units < 1)
  ):
    raise ValueError(
        f'hidden_units must be a positive int, got {hidden_units!r}'
    )
  return tf.keras.Sequential(
      [
          tf.keras.layers.InputLayer(input_shape=shape),
          tf.keras.layers.Flatten(),
          tf.keras.layers.Dense(hidden_units, activation='relu'),
          tf.keras.layers.Dense(num_classes, activation='softmax'),
      ],
      name='mlp',
  )


def softmax_regression(
    input_shape: Sequence[int] = (28, 28),
    num_classes: int = 10,
    l2: float = SOFTMAX_L2,
) -> tf.keras.Model:
  """Multinomial logistic regression with an L2 penalty (strongly convex).

  The model of the distortion utility-loss experiment (docs/distortion.md):
  its federated objective has one optimum W*, so ||W - W*||^2 is well
  defined. `tff.learning.models.from_keras_model` adds the penalty
  l2 ||kernel||^2 to the loss.

  Args:
    input_shape: any shape; it is flattened.
    num_classes: output classes.
    l2: the kernel's L2 penalty, > 0.

  Returns:
    An uncompiled Keras model.
  """
  shape = _check(input_shape, num_classes)
  if not l2 > 0:
    raise ValueError(f'l2 must be > 0, got {l2!r}')
  return tf.keras.Sequential(
      [
          tf.keras.layers.InputLayer(input_shape=shape),
          tf.keras.layers.Flatten(),
          tf.keras.layers.Dense(
              num_classes,
              activation='softmax',
              kernel_regularizer=tf.keras.regularizers.l2(l2),
          ),
      ],
      name='softmax_regression',
  )


def udp_cifar_cnn(
    input_shape: Sequence[int] = (32, 32, 3),
    num_classes: int = 10,
    filters: int = 32,
) -> tf.keras.Model:
  """UDP's CIFAR-10 CNN: a single 5x5 convolution with padding 4, then softmax.

  Wei et al. (Sec. VI): "single convolutional layer with the convolutional
  kernel size 5 and the padding size 4, where ReLU units and softmax of 10
  classes are applied". The paper does not give the number of filters nor any
  pooling: [decision] 32 filters, no pooling, so 32x32 -> 36x36x32 -> dense.
  Parameters: 5*5*3*32 + 32 + 36*36*32*10 + 10 = 417,162.

  Args:
    input_shape: (H, W, C).
    num_classes: output classes.
    filters: convolution filters.

  Returns:
    An uncompiled Keras model.
  """
  shape = _check(input_shape, num_classes)
  return tf.keras.Sequential(
      _image_input(shape)
      + [
          tf.keras.layers.ZeroPadding2D(padding=4),
          tf.keras.layers.Conv2D(filters, kernel_size=5, activation='relu'),
          tf.keras.layers.Flatten(),
          tf.keras.layers.Dense(num_classes, activation='softmax'),
      ],
      name='udp_cifar_cnn',
  )


def small_vgg(
    input_shape: Sequence[int] = (32, 32, 3), num_classes: int = 10
) -> tf.keras.Model:
  """A small VGG-style CNN for CIFAR-10, as LDP-FL uses.

  Sun, Qian, Chen (LDP-FL, Sec. 5) "re-design a small VGG (Simonyan and
  Zisserman 2014)" without giving its layers. [decision] Three VGG blocks of
  two 3x3 same-padded ReLU convolutions (32, 64, 128 filters) each followed
  by 2x2 max pooling, then dense 128 (ReLU) and a softmax; no batch
  normalisation (its running statistics are not model weights that FedAvg or
  the LDP encoder could treat like the rest). 550,570 parameters.

  Args:
    input_shape: (H, W, C).
    num_classes: output classes.

  Returns:
    An uncompiled Keras model.
  """
  shape = _check(input_shape, num_classes)
  layers = _image_input(shape)
  for filters in (32, 64, 128):
    layers += [
        tf.keras.layers.Conv2D(filters, 3, padding='same', activation='relu'),
        tf.keras.layers.Conv2D(filters, 3, padding='same', activation='relu'),
        tf.keras.layers.MaxPooling2D(pool_size=2),
    ]
  layers += [
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(128, activation='relu'),
      tf.keras.layers.Dense(num_classes, activation='softmax'),
  ]
  return tf.keras.Sequential(layers, name='small_vgg')


def shakespeare_lstm(
    vocab_size: int = SHAKESPEARE_VOCAB_SIZE,
    sequence_length: int = SHAKESPEARE_SEQUENCE_LENGTH,
) -> tf.keras.Model:
  """The char-LSTM of McMahan et al. 2017, as TFF's Shakespeare baseline.

  Embedding 8 -> LSTM 256 -> LSTM 256 -> dense vocab_size (logits), pad id 0
  masked. Fed-SMP's Shakespeare model ("2-layer LSTM 256"). With TFF's
  vocabulary (86 characters + pad, OOV, BOS, EOS = 90): 720 + 271,360 +
  525,312 + 23,130 = 820,522 parameters. Delegates to
  `char_prediction_models.create_recurrent_model` of TFF, the model the
  online and offline Shakespeare tasks use.

  Args:
    vocab_size: output classes and embedding rows.
    sequence_length: input length.

  Returns:
    An uncompiled Keras model returning logits.
  """
  return char_prediction_models.create_recurrent_model(
      vocab_size=vocab_size, sequence_length=sequence_length
  )
