"""Label-smoothed cross-entropy (section 5.4), summed over real target tokens: on logits, or
fused with the tied pre-softmax projection and computed in chunks of rows for training (with or
without XLA).

Both return (the loss summed over the tokens that are not PAD, their count), float32 scalars:
the caller divides (the count all-reduced across replicas when distributed). The loss is the
KL divergence from the smoothed target distribution, so a perfect prediction of it scores 0;
the fused form gives the same values and gradients without the [batch, time, vocab] logits.

Example:
    loss_sum, tokens = label_smoothed_cross_entropy(labels, logits, smoothing=0.1)
    # labels int [batch, time], logits [batch, time, vocab]
    hidden = model.features(inputs, training=True)  # [batch, time, d_model]
    loss_sum, tokens = projected_label_smoothed_cross_entropy(
        labels, hidden, model.embedding.embeddings, smoothing=0.1)
    loss = loss_sum / tokens
"""
from __future__ import annotations

import tensorflow as tf


def label_smoothed_cross_entropy(labels: tf.Tensor, logits: tf.Tensor, smoothing: float,
                                 pad_id: int = 0) -> tuple[tf.Tensor, tf.Tensor]:
    """The cross-entropy against q = (1 - smoothing) * one_hot(label) + smoothing / vocab,
    minus the entropy of q, so that a perfect prediction of q scores 0 (the KL divergence
    KL(q || p); its gradient equals the smoothed cross-entropy's).

    Args:
        labels: int [batch, time], `pad_id` at padding.
        logits: float [batch, time, vocab].
        smoothing: eps_ls (0.1 in the paper); 0 gives the plain negative log-likelihood.
        pad_id: the padding id, excluded from the sum and the count.

    Returns:
        (loss summed over real tokens, number of real tokens), both float32 scalars. Divide the
        sum by the count (all-reduced across replicas when distributed) for the mean.
    """
    logits = tf.cast(logits, tf.float32)
    vocab = tf.shape(logits)[-1]
    off_value = tf.constant(smoothing, tf.float32) / tf.cast(vocab, tf.float32)
    label_value = 1.0 - smoothing + off_value
    targets = tf.one_hot(labels, vocab, on_value=label_value, off_value=off_value)  # [b, t, V]
    cross_entropy = tf.nn.softmax_cross_entropy_with_logits(targets, logits)  # [b, t]
    cross_entropy -= _smoothed_entropy(label_value, off_value, vocab)
    weights = tf.cast(tf.not_equal(labels, pad_id), tf.float32)  # [b, t]
    return tf.reduce_sum(cross_entropy * weights), tf.reduce_sum(weights)


# Rows of a chunk x vocabulary float32 logits stay near 16 MB: below glibc's largest mmap
# threshold (32 MB), so the allocator reuses the same memory for every chunk instead of mapping
# and page-faulting hundreds of MB of [batch, time, vocab] tensors afresh at every update.
CHUNK_ELEMENTS = 2 ** 22


def projected_label_smoothed_cross_entropy(
        labels: tf.Tensor, hidden: tf.Tensor, table: tf.Tensor, smoothing: float,
        pad_id: int = 0, chunk_elements: int = CHUNK_ELEMENTS,
        static_shapes: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
    """`label_smoothed_cross_entropy(labels, hidden @ table^T, ...)` without the [batch, time,
    vocab] logits: rows are projected `chunk_elements // vocab` at a time, and each chunk's
    gradients are computed as it goes (one fused softmax cross-entropy kernel gives
    softmax - q). Same values and gradients.

    Args:
        labels: int [batch, time], `pad_id` at padding.
        hidden: [batch, time, d_model] final decoder states, in the compute dtype.
        table: [vocab, d_model] the tied embedding matrix (cast to hidden's dtype).
        smoothing: eps_ls.
        pad_id: the padding id.
        chunk_elements: logits computed at once (rows x vocab).
        static_shapes: for XLA (`jit_compile`): every row is projected and padding masked, so
            that every tensor's shape follows from the batch's. Otherwise only real target
            tokens are gathered and projected (the projection's FLOPs shrink by the padding's
            share), a shape XLA cannot compile.

    Returns:
        (loss summed over real tokens, number of real tokens), float32 scalars.
    """
    d_model = tf.shape(hidden)[-1]
    flat_labels = tf.reshape(labels, [-1])  # [b * t]
    flat_hidden = tf.reshape(hidden, [-1, d_model])  # [b * t, d]
    weights = tf.cast(flat_labels != pad_id, tf.float32)  # [b * t]
    if not static_shapes:
        real = tf.where(flat_labels != pad_id)[:, 0]  # [n]
        flat_hidden, flat_labels = tf.gather(flat_hidden, real), tf.gather(flat_labels, real)
        weights = tf.ones_like(flat_labels, tf.float32)  # [n]
    loss_sum = _chunked_cross_entropy(flat_hidden, table, flat_labels, weights, smoothing,
                                      chunk_elements)
    return loss_sum, tf.reduce_sum(weights)


def _chunked_cross_entropy(hidden: tf.Tensor, table: tf.Tensor, labels: tf.Tensor,
                           weights: tf.Tensor, smoothing: float,
                           chunk_elements: int) -> tf.Tensor:
    """Weighted sum of the smoothed cross-entropy (KL form) of logits hidden @ table^T,
    [n, d] x [V, d] -> [n, V] a chunk of rows at a time (rows padded to whole chunks)."""

    @tf.custom_gradient
    def loss_and_gradients(hidden: tf.Tensor, table: tf.Tensor):
        rows, d_model = tf.shape(hidden)[0], tf.shape(hidden)[1]
        vocab = table.shape[0] or tf.shape(table)[0]
        weights_matrix = tf.cast(table, hidden.dtype)  # [V, d]
        off_value = tf.constant(smoothing, tf.float32) / tf.cast(vocab, tf.float32)
        label_value = 1.0 - smoothing + off_value
        chunk = max(chunk_elements // vocab, 1) if isinstance(vocab, int) else \
            tf.maximum(chunk_elements // vocab, 1)
        chunks = (rows + chunk - 1) // chunk
        padding = chunks * chunk - rows
        chunked_hidden = tf.reshape(tf.pad(hidden, [[0, padding], [0, 0]]),
                                    [chunks, chunk, d_model])  # [chunks, c, d]
        chunked_labels = tf.reshape(tf.pad(labels, [[0, padding]]), [chunks, chunk])
        chunked_weights = tf.reshape(tf.pad(weights, [[0, padding]]), [chunks, chunk])

        def body(i, loss_sum, hidden_grads, table_grad):
            chunk_hidden, chunk_weights = chunked_hidden[i], chunked_weights[i]  # [c, d], [c]
            logits = tf.cast(tf.matmul(chunk_hidden, weights_matrix, transpose_b=True),
                             tf.float32)  # [c, V]
            targets = tf.one_hot(chunked_labels[i], vocab, on_value=label_value,
                                 off_value=off_value)  # [c, V]
            cross_entropy, logits_grad = tf.raw_ops.SoftmaxCrossEntropyWithLogits(
                features=logits, labels=targets)  # [c], [c, V] = softmax - q
            logits_grad = tf.cast(logits_grad * chunk_weights[:, None], hidden.dtype)
            hidden_grads = hidden_grads.write(
                i, tf.cast(tf.matmul(logits_grad, weights_matrix), tf.float32))  # [c, d]
            table_grad += tf.cast(tf.matmul(logits_grad, chunk_hidden, transpose_a=True),
                                  tf.float32)  # [V, d]
            loss_sum += tf.reduce_sum(cross_entropy * chunk_weights)
            return i + 1, loss_sum, hidden_grads, table_grad

        _, loss_sum, hidden_grads, table_grad = tf.while_loop(
            lambda i, *_: i < chunks, body,
            (tf.constant(0), tf.constant(0.0), tf.TensorArray(tf.float32, size=chunks),
             tf.zeros(tf.shape(table), tf.float32)))
        loss_sum -= tf.reduce_sum(weights) * _smoothed_entropy(label_value, off_value, vocab)
        hidden_grad = tf.reshape(hidden_grads.stack(), [-1, d_model])[:rows]  # [n, d] float32

        def gradients(upstream: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            return (tf.cast(upstream * hidden_grad, hidden.dtype),
                    tf.cast(upstream * table_grad, table.dtype))

        return loss_sum, gradients

    return loss_and_gradients(hidden, tf.convert_to_tensor(table))  # a variable read: a tensor


def _smoothed_entropy(label_mass: tf.Tensor, other_mass: tf.Tensor, vocab: tf.Tensor) -> tf.Tensor:
    """-sum q log q for q with `label_mass` on one class and `other_mass` on the vocab - 1
    others."""
    others = tf.cast(vocab - 1, tf.float32) * tf.math.xlogy(other_mass, other_mass)
    return -(tf.math.xlogy(label_mass, label_mass) + others)
