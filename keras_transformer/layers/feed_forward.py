"""Position-wise feed-forward network (section 3.3, eq. 2).

`PositionwiseFeedForward` computes max(0, x W1 + b1) W2 + b2 at each position alike, with an
inner size `d_ff` and optional dropout on the ReLU activations; its output width is its
input's (d_model, known when built).

Example:
    ffn = PositionwiseFeedForward(d_ff=2048)
    y = ffn(x)  # [batch, time, d_model] -> [batch, time, d_model]
"""
from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.layers.projection import Projection


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionwiseFeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position alike.

    Args:
        d_ff: the inner size (2048 in the base model).
        relu_dropout: dropout on the ReLU activations (0 in the paper).

    Example:
        ffn = PositionwiseFeedForward(d_ff=2048)
        y = ffn(x)  # [batch, time, d_model] -> [batch, time, d_model]
    """

    def __init__(self, d_ff: int, relu_dropout: float = 0.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.d_ff = d_ff
        self.relu_dropout = relu_dropout
        self.inner_dense = Projection(d_ff, activation="relu", dtype=self.dtype_policy,
                                      name="inner")
        self.activation_dropout = keras.layers.Dropout(relu_dropout, dtype=self.dtype_policy)
        self.outer_dense = None

    def build(self, input_shape) -> None:
        self.inner_dense.build(input_shape)
        self.outer_dense = Projection(input_shape[-1], dtype=self.dtype_policy,
                                      name="outer")
        self.outer_dense.build((*input_shape[:-1], self.d_ff))

    def call(self, x: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        hidden = self.activation_dropout(self.inner_dense(x), training=training)  # [b, t, d_ff]
        return self.outer_dense(hidden)  # [b, t, d_model]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), "d_ff": self.d_ff, "relu_dropout": self.relu_dropout}
