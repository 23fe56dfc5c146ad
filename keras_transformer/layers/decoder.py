"""One decoder layer (section 3.1): masked self-attention, encoder-decoder attention and a
feed-forward network, with a key/value cache for incremental decoding.

`DecoderLayer` takes `EncoderLayer`'s arguments. Teacher forcing decodes a whole target at
once under a causal mask; incremental decoding keeps, per layer, the self-attention keys/values
of the earlier positions (growing, or of a fixed `length` for XLA) and the encoder-decoder
keys/values, projected once from the memory, one row per sentence under the search's
SENTENCE_KEY (`LayerCache`), which a step's rows read in groups of `queries_per_key` (a
sentence's beams).

Example:
    layer = DecoderLayer(num_heads=8, key_dim=64, value_dim=64, d_ff=2048, dropout=0.1)
    y = layer(x, memory, causal_mask, memory_mask)  # [batch, target_time, d_model]
    cache = layer.init_cache(memory)  # memory [batch, source_time, d_model]
    y, cache = layer.step(x_t, cache, memory_mask)  # x_t [batch, d_model]: one position
    y, cache = layer.step(x_t, cache, memory_mask, queries_per_key=4)  # x_t [batch * 4, ...]
"""
from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.layers.attention import MultiHeadAttention, record_attention
from keras_transformer.layers.encoder import EncoderLayer
from keras_transformer.layers.sublayer import ResidualSublayer
from keras_transformer.search_primitives import SENTENCE_KEY

LayerCache = dict[str, tf.Tensor | dict[str, tf.Tensor]]


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(EncoderLayer):
    """An encoder layer with encoder-decoder attention inserted after the self-attention.

    Takes the same arguments as `EncoderLayer`. Teacher forcing: `layer(x, memory, causal_mask,
    memory_mask)`. Incremental decoding: `cache = layer.init_cache(memory)` once, then
    `x, cache = layer.step(x, cache, memory_mask)` for each new position; the cache holds the
    self-attention keys/values of all earlier positions [batch, heads, time, d_k|d_v] and the
    encoder-decoder keys/values, computed once [batch, heads, source_time, d_k|d_v].
    With `init_cache(memory, length)` the self-attention keys/values have a fixed size
    [batch, heads, length, d_k|d_v] and `step(x, cache, memory_mask, position)` writes
    position `position` in place, attending to positions <= `position` (one shape at every
    step, as XLA compiles a loop; the write is XLA's DynamicUpdateSlice, so that cache runs
    under `jit_compile` only).
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        policy = self.dtype_policy
        self.cross_attention = MultiHeadAttention(
            self.num_heads, self.key_dim, self.value_dim, self.attention_dropout, dtype=policy,
            name="cross_attention")
        self.cross_attention_block = ResidualSublayer(
            self.dropout, self.norm_first, self.epsilon, dtype=policy,
            name="cross_attention_block")

    def build(self, x_shape, memory_shape=None) -> None:
        super().build(x_shape)
        self.cross_attention.build(x_shape, memory_shape or x_shape)
        self.cross_attention_block.build(x_shape)

    def call(self, x: tf.Tensor, memory: tf.Tensor, attention_mask: tf.Tensor | None = None,
             memory_mask: tf.Tensor | None = None, training: bool | None = None,
             return_attention_scores: bool = False
             ) -> tf.Tensor | tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """x [batch, target_time, d_model], memory [batch, source_time, d_model] -> the shape
        of x, and with `return_attention_scores` {"self_attention": [batch, heads, target_time,
        target_time], "cross_attention": [batch, heads, target_time, source_time]}."""
        scores: dict[str, tf.Tensor] = {}
        x = self.self_attention_block(
            x, sublayer=record_attention(self.self_attention, scores, "self_attention",
                                         attention_mask=attention_mask, training=training),
            training=training)
        x = self.cross_attention_block(
            x, sublayer=record_attention(self.cross_attention, scores, "cross_attention", memory,
                                         attention_mask=memory_mask, training=training),
            training=training)
        x = self.feed_forward_block(
            x, sublayer=lambda h: self.feed_forward(h, training=training),
            training=training)
        return (x, scores) if return_attention_scores else x

    def cross_attention_weights(self, x: tf.Tensor, memory: tf.Tensor,
                                attention_mask: tf.Tensor | None = None,
                                memory_mask: tf.Tensor | None = None) -> tf.Tensor:
        """float32 [batch, heads, target_time, source_time]: the encoder-decoder attention
        weights of `call` (inference), computing only what they need: not this layer's
        values, outputs or feed-forward network."""
        x = self.self_attention_block(
            x, sublayer=lambda h: self.self_attention(h, attention_mask=attention_mask,
                                                      training=False), training=False)
        return self.cross_attention.attention_weights(
            self.cross_attention_block.sublayer_input(x), memory, memory_mask)

    def init_cache(self, memory: tf.Tensor, length: tf.Tensor | int = 0) -> LayerCache:
        """The cache before the first step: self-attention keys/values of `length` positions
        (0: empty, grown by each step; else fixed, zeros) and, under SENTENCE_KEY, the
        encoder-decoder keys/values of `memory` [batch, source_time, d_model]."""
        cross_key, cross_value = self.cross_attention.project_key_value(memory)
        batch = tf.shape(memory)[0]
        return {
            "self_key": tf.zeros([batch, self.num_heads, length, self.key_dim], cross_key.dtype),
            "self_value": tf.zeros([batch, self.num_heads, length, self.value_dim],
                                   cross_key.dtype),
            SENTENCE_KEY: {"cross_key": cross_key,  # [batch, heads, source_time, d_k]
                           "cross_value": cross_value},  # [batch, heads, source_time, d_v]
        }

    def step(self, x: tf.Tensor, cache: LayerCache, memory_mask: tf.Tensor | None = None,
             position: tf.Tensor | None = None, queries_per_key: int = 1
             ) -> tuple[tf.Tensor, LayerCache]:
        """Decodes one position: x [n, d_model] -> ([n, d_model], new cache), every product a
        plain matrix product; `position` int32 []: the position to write in a fixed-size
        cache (None: grow it). The encoder-decoder keys/values and `memory_mask` [n / g, 1,
        1, source_time] hold a row per g = `queries_per_key` consecutive rows of x."""
        new_cache = dict(cache)

        def attend_to_prefix(h: tf.Tensor) -> tf.Tensor:
            key, value = self.self_attention.project_key_value(h)  # [b, h, 1, d]
            mask = None
            if position is None:
                new_cache["self_key"] = tf.concat([cache["self_key"], key], axis=2)
                new_cache["self_value"] = tf.concat([cache["self_value"], value], axis=2)
            else:
                start = [0, 0, position, 0]
                new_cache["self_key"] = keras.ops.slice_update(cache["self_key"], start, key)
                new_cache["self_value"] = keras.ops.slice_update(cache["self_value"], start,
                                                                 value)
                length = tf.shape(cache["self_key"])[2]
                mask = (tf.range(length) <= position)[None, None, None]  # [1, 1, 1, length]
            return self.self_attention(h, key=new_cache["self_key"],
                                       value=new_cache["self_value"], attention_mask=mask)

        x = self.self_attention_block(x, sublayer=attend_to_prefix)
        memory = cache[SENTENCE_KEY]
        x = self.cross_attention_block(
            x, sublayer=lambda h: self.cross_attention(
                h, key=memory["cross_key"], value=memory["cross_value"],
                attention_mask=memory_mask, queries_per_key=queries_per_key))
        x = self.feed_forward_block(x, sublayer=self.feed_forward)
        return x, new_cache

    def compute_output_shape(self, x_shape, memory_shape=None):
        return x_shape
