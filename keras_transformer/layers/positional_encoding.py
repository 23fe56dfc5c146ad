"""Positional encodings (section 3.5): the paper's sinusoids, or learned embeddings
(Table 3, row E).

Both layers add the encoding of positions start, start + 1, ... to [batch, time, d_model]
(`start`: the decoding step). `sinusoidal_table` is the interleaved sine/cosine table (no
weights, any length; the CTranslate2 export writes it out). With `max_length` (the model's
positions) either layer reads rows of a table of that many positions, and a later position
reads the last one: `LearnedPositionalEmbedding`'s are weights, `SinusoidalPositionalEncoding`'s
a constant that a graph folds, so that a decoding step gathers one row instead of computing
sines and cosines (without `max_length` it computes them, for any position).

Example:
    table = sinusoidal_table(tf.range(128), d_model=512)  # float32 [128, 512]
    x = SinusoidalPositionalEncoding(max_length=128)(embedded)  # positions 0..time-1
    x = LearnedPositionalEmbedding(1024)(embedded, start=step)  # from a decoding step
    x = LearnedPositionalEmbedding(1024).at_position(embedded_step, step)  # [batch, d_model]
"""
from __future__ import annotations

import keras
import tensorflow as tf

# The name of the op that gathers a sinusoid table's rows: a constant, not a weight, which
# ONNX Runtime's int8 quantization must leave exact (`export.onnx_quantize`).
POSITIONS_OP = "sinusoid_rows"


def sinusoidal_table(positions: tf.Tensor, d_model: int) -> tf.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...), interleaved.

    Args:
        positions: int or float [time].
    Returns:
        float32 [time, d_model].
    """
    positions = tf.expand_dims(tf.cast(positions, tf.float32), 1)  # [time, 1]
    even_dims = tf.range(0, d_model, 2, dtype=tf.float32)  # 2i: [ceil(d_model / 2)]
    angles = positions / tf.pow(10000.0, even_dims / d_model)  # [time, ceil(d_model / 2)]
    interleaved = tf.stack([tf.sin(angles), tf.cos(angles)], axis=-1)  # [time, d/2, 2]
    table = tf.reshape(interleaved, [-1, 2 * ((d_model + 1) // 2)])  # [time, d_model (+ 1)]
    return table if d_model % 2 == 0 else table[:, :d_model]


def _time(x: tf.Tensor) -> int | tf.Tensor:
    """x's time steps (axis 1): static when known (a decoding step's 1), so that no step
    computes them."""
    return x.shape[1] or tf.shape(x)[1]


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """Adds the sinusoidal encoding of positions start, start+1, ... to [batch, time, d_model].

    It has no weights. Args: max_length: rows of a table of this many positions (a later
    position reads the last one); None: the sinusoids computed, for any position.

    Example:
        x = SinusoidalPositionalEncoding(128)(embedded)              # positions 0..time-1
        x = SinusoidalPositionalEncoding(128)(embedded, start=step)  # one decoding step
    """

    def __init__(self, max_length: int | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_length = max_length

    def call(self, x: tf.Tensor, start: tf.Tensor | int = 0) -> tf.Tensor:
        rows = self._rows(tf.range(_time(x)) + start, x.shape[-1])  # [time, d_model]
        return x + tf.expand_dims(tf.cast(rows, x.dtype), 0)

    def at_position(self, x: tf.Tensor, position: tf.Tensor | int) -> tf.Tensor:
        """x [batch, d_model] plus the encoding of one position (a decoding step's): `call` on
        x[:, None] with start=position, squeezed, in fewer ops."""
        rows = self._rows(tf.convert_to_tensor(position), x.shape[-1])  # [d_model]
        return x + tf.cast(rows, x.dtype)

    def _rows(self, positions: tf.Tensor, d_model: int) -> tf.Tensor:
        """float32 [time, d_model] for positions int [time], [d_model] for a scalar one."""
        if self.max_length is None:
            table = sinusoidal_table(tf.reshape(positions, [-1]), d_model)  # [time, d_model]
            return table if positions.shape.rank else table[0]
        return tf.gather(sinusoidal_table(tf.range(self.max_length), d_model),
                         tf.minimum(positions, self.max_length - 1), name=POSITIONS_OP)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), "max_length": self.max_length}


@keras.saving.register_keras_serializable(package="keras_transformer")
class LearnedPositionalEmbedding(keras.layers.Layer):
    """Adds a learned embedding of positions start, start+1, ... (at most `max_length`).

    Args:
        max_length: the number of positions with an embedding.
    """

    def __init__(self, max_length: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_length = max_length

    def build(self, input_shape) -> None:
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(self.max_length, input_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=input_shape[-1] ** -0.5))

    def call(self, x: tf.Tensor, start: tf.Tensor | int = 0) -> tf.Tensor:
        return x + tf.expand_dims(self._rows(tf.range(_time(x)) + start, x.dtype), 0)

    def at_position(self, x: tf.Tensor, position: tf.Tensor | int) -> tf.Tensor:
        """x [batch, d_model] plus the embedding of one position (a decoding step's): `call`
        on x[:, None] with start=position, squeezed, in fewer ops."""
        return x + self._rows(tf.convert_to_tensor(position), x.dtype)

    def _rows(self, positions: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        """[time, d_model] for positions int [time], [d_model] for a scalar one."""
        return tf.gather(tf.cast(self.position_embeddings, dtype),
                         tf.minimum(positions, self.max_length - 1))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), "max_length": self.max_length}
