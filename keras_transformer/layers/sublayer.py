"""Residual connection, dropout and layer normalisation around a sub-layer (section 3.1, 5.4).

`ResidualSublayer` computes LayerNorm(x + Dropout(Sublayer(x))) (post-norm, the paper's) or,
with `norm_first`, x + Dropout(Sublayer(LayerNorm(x))) (pre-norm); the sub-layer is a function
of [batch, time, d_model] given at each call, so its own layer keeps its weights.

Example:
    block = ResidualSublayer(dropout=0.1)
    y = block(x, sublayer=lambda h: ffn(h, training=True), training=True)  # x's shape
"""
from __future__ import annotations

from typing import Callable

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="keras_transformer")
class ResidualSublayer(keras.layers.Layer):
    """Post-norm (the paper): LayerNorm(x + Dropout(Sublayer(x))).
    Pre-norm (option): x + Dropout(Sublayer(LayerNorm(x))).

    Args:
        dropout: P_drop, applied to the sub-layer output before the residual sum.
        norm_first: pre-norm instead of the paper's post-norm.
        epsilon: the layer normalisation epsilon.

    Example:
        block = ResidualSublayer(dropout=0.1)
        y = block(x, sublayer=ffn)
    """

    def __init__(self, dropout: float, norm_first: bool = False, epsilon: float = 1e-6,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.dropout = dropout
        self.norm_first = norm_first
        self.epsilon = epsilon
        self.layer_norm = keras.layers.LayerNormalization(epsilon=epsilon,
                                                          dtype=self.dtype_policy)
        self.output_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, input_shape) -> None:
        self.layer_norm.build(input_shape)

    def call(self, x: tf.Tensor, sublayer: Callable[[tf.Tensor], tf.Tensor],
             training: bool | None = None) -> tf.Tensor:
        output = self.output_dropout(sublayer(self.sublayer_input(x)), training=training)
        return x + output if self.norm_first else self.layer_norm(x + output)

    def sublayer_input(self, x: tf.Tensor) -> tf.Tensor:
        """What the sub-layer reads of x: LayerNorm(x) (pre-norm), or x itself (post-norm)."""
        return self.layer_norm(x) if self.norm_first else x

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), "dropout": self.dropout, "norm_first": self.norm_first,
                "epsilon": self.epsilon}
