"""One embedding matrix shared by the source, the target and the pre-softmax projection
(section 3.4).

`SharedEmbedding` looks ids up and scales them by sqrt(d_model); `logits` projects decoder
states back onto the vocabulary with the same matrix transposed, in float32 whatever the
compute dtype; `output_kernel` gives that transposed matrix once, for a decoding loop, and
`table` the matrix itself in the compute dtype (a shortlist gathers its pieces' rows from it).

Example:
    embedding = SharedEmbedding(vocab_size=8000, d_model=512)
    x = embedding(ids)                   # int [batch, time] -> [batch, time, 512]
    kernel = embedding.output_kernel()   # [512, 8000], before the loop
    logits = embedding.logits(h, kernel)  # [batch, time, 512] -> float32 [batch, time, 8000]
"""
from __future__ import annotations

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="keras_transformer")
class SharedEmbedding(keras.layers.Layer):
    """Token embeddings multiplied by sqrt(d_model); `logits` reuses the same matrix transposed.

    The matrix is initialised with stddev d_model^-0.5 so that the scaled embeddings have unit
    variance, as in tensor2tensor.

    Args:
        vocab_size: size of the shared subword vocabulary.
        d_model: the model width.

    Example:
        embedding = SharedEmbedding(vocab_size=37000, d_model=512)
        x = embedding(ids)            # [batch, time] -> [batch, time, d_model]
        logits = embedding.logits(h)  # [batch, time, d_model] -> [batch, time, vocab] float32
    """

    def __init__(self, vocab_size: int, d_model: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model

    def build(self, input_shape=None) -> None:
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model ** -0.5))

    def call(self, ids: tf.Tensor) -> tf.Tensor:
        return tf.gather(self.table(), ids) * tf.cast(self.d_model ** 0.5, self.compute_dtype)

    def table(self) -> tf.Tensor:
        """The embedding matrix [vocab, d_model] in the compute dtype."""
        return tf.cast(self.embeddings, self.compute_dtype)

    def logits(self, hidden: tf.Tensor, kernel: tf.Tensor | None = None) -> tf.Tensor:
        """Pre-softmax projection with the transposed embedding matrix, in float32; `kernel`:
        that matrix as `output_kernel` gave it (a decoding loop transposes it once, before), or
        some of its columns (a shortlist's: logits of those pieces only)."""
        one_position = hidden.shape.rank == 2  # a decoding step's [batch, d_model]
        rows = hidden if one_position else tf.reshape(
            hidden, [-1, self.d_model])  # one matrix product, not one per row
        if kernel is None:
            logits = tf.matmul(rows, tf.cast(self.embeddings, hidden.dtype), transpose_b=True)
        else:
            logits = tf.matmul(rows, kernel)  # [rows, vocab] (a shortlist's [rows, U])
        logits = tf.cast(logits, tf.float32)
        if one_position:
            return logits
        shape = tf.concat([tf.shape(hidden)[:-1], tf.shape(logits)[1:]], axis=0)
        return tf.reshape(logits, shape)

    def output_kernel(self) -> tf.Tensor:
        """The transposed embedding matrix [d_model, vocab] in the compute dtype."""
        return tf.transpose(self.table())

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.d_model)

    def get_config(self) -> dict:
        return {**super().get_config(), "vocab_size": self.vocab_size, "d_model": self.d_model}
