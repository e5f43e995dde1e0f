"""Small TFF models shared by tests."""

import tensorflow as tf
import tensorflow_federated as tff


def softmax_model_fn(metrics=None) -> tff.learning.models.VariableModel:
  """Softmax regression, 4 features -> 3 classes, (x, y) batches.

  Args:
    metrics: Keras metrics beside the loss (None: none).
  """
  keras_model = tf.keras.Sequential(
      [
          tf.keras.layers.InputLayer(input_shape=(4,)),
          tf.keras.layers.Dense(3, activation='softmax'),
      ]
  )
  return tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(),
      metrics=metrics,
      input_spec=(
          tf.TensorSpec([None, 4], tf.float32),
          tf.TensorSpec([None], tf.int32),
      ),
  )
