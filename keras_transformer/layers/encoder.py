"""One encoder layer (section 3.1): self-attention and a feed-forward network.

`EncoderLayer` wraps each in a `ResidualSublayer` (residual dropout, layer normalisation,
post-norm or pre-norm) and maps [batch, time, d_model] to the same shape; a padding mask
[batch, 1, 1, time] (True: a real token) keeps attention off PAD. `DecoderLayer` extends it.

Example:
    layer = EncoderLayer(num_heads=8, key_dim=64, value_dim=64, d_ff=2048, dropout=0.1)
    y = layer(x, padding_mask, training=True)  # [batch, time, d_model]
"""
from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.layers.attention import MultiHeadAttention, record_attention
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.sublayer import ResidualSublayer


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(keras.layers.Layer):
    """Multi-head self-attention, then a position-wise feed-forward network, each wrapped in
    a residual connection with dropout and layer normalisation.

    Args:
        num_heads, key_dim, value_dim: h, d_k, d_v.
        d_ff: the feed-forward inner size.
        dropout: residual dropout P_drop.
        attention_dropout, relu_dropout: dropout inside the sub-layers (0 in the paper).
        norm_first: pre-norm instead of the paper's post-norm.
        epsilon: layer normalisation epsilon.

    Example:
        layer = EncoderLayer(num_heads=8, key_dim=64, value_dim=64, d_ff=2048, dropout=0.1)
        y = layer(x, padding_mask)  # [batch, time, d_model], mask [batch, 1, 1, time]
    """

    def __init__(self, num_heads: int, key_dim: int, value_dim: int, d_ff: int, dropout: float,
                 attention_dropout: float = 0.0, relu_dropout: float = 0.0,
                 norm_first: bool = False, epsilon: float = 1e-6, **kwargs) -> None:
        super().__init__(**kwargs)
        self.num_heads, self.key_dim, self.value_dim = num_heads, key_dim, value_dim
        self.d_ff, self.dropout = d_ff, dropout
        self.attention_dropout, self.relu_dropout = attention_dropout, relu_dropout
        self.norm_first, self.epsilon = norm_first, epsilon
        policy = self.dtype_policy
        self.self_attention = MultiHeadAttention(num_heads, key_dim, value_dim, attention_dropout,
                                                 dtype=policy, name="self_attention")
        self.self_attention_block = ResidualSublayer(dropout, norm_first, epsilon, dtype=policy,
                                                     name="self_attention_block")
        self.feed_forward = PositionwiseFeedForward(d_ff, relu_dropout, dtype=policy,
                                                    name="feed_forward")
        self.feed_forward_block = ResidualSublayer(dropout, norm_first, epsilon, dtype=policy,
                                                   name="feed_forward_block")

    def build(self, input_shape) -> None:
        for layer in (self.self_attention, self.self_attention_block, self.feed_forward,
                      self.feed_forward_block):
            layer.build(input_shape)

    def call(self, x: tf.Tensor, attention_mask: tf.Tensor | None = None,
             training: bool | None = None, return_attention_scores: bool = False
             ) -> tf.Tensor | tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """x [batch, time, d_model] -> the same shape, and with `return_attention_scores`
        {"self_attention": weights [batch, heads, time, time]}."""
        scores: dict[str, tf.Tensor] = {}
        x = self.self_attention_block(
            x, sublayer=record_attention(self.self_attention, scores, "self_attention",
                                   attention_mask=attention_mask, training=training),
            training=training)
        x = self.feed_forward_block(
            x, sublayer=lambda h: self.feed_forward(h, training=training),
            training=training)
        return (x, scores) if return_attention_scores else x

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), "num_heads": self.num_heads, "key_dim": self.key_dim,
                "value_dim": self.value_dim, "d_ff": self.d_ff, "dropout": self.dropout,
                "attention_dropout": self.attention_dropout, "relu_dropout": self.relu_dropout,
                "norm_first": self.norm_first, "epsilon": self.epsilon}

