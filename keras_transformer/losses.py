"""Label-smoothed cross-entropy (section 5.4), summed over real target tokens: on logits, or
fused with the tied pre-softmax projection and computed in chunks of rows for training."""
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
        pad_id: int = 0, chunk_elements: int = CHUNK_ELEMENTS) -> tuple[tf.Tensor, tf.Tensor]:
    """`label_smoothed_cross_entropy(labels, hidden @ table^T, ...)` without the [batch, time,
    vocab] logits: only real target tokens are projected, `chunk_elements // vocab` rows at a
    time, and each chunk's gradients are computed as it goes (one fused softmax cross-entropy
    kernel gives softmax - q). Same values and gradients; the projection's FLOPs shrink by the
    padding's share.

    Args:
        labels: int [batch, time], `pad_id` at padding.
        hidden: [batch, time, d_model] final decoder states, in the compute dtype.
        table: [vocab, d_model] the tied embedding matrix (cast to hidden's dtype).
        smoothing: eps_ls.
        pad_id: the padding id.
        chunk_elements: logits computed at once (rows x vocab).

    Returns:
        (loss summed over real tokens, number of real tokens), float32 scalars.
    """
    d_model = tf.shape(hidden)[-1]
    real = tf.where(tf.reshape(labels, [-1]) != pad_id)[:, 0]  # [n]
    real_hidden = tf.gather(tf.reshape(hidden, [-1, d_model]), real)  # [n, d]
    real_labels = tf.gather(tf.reshape(labels, [-1]), real)  # [n]
    loss_sum = _chunked_cross_entropy(real_hidden, table, real_labels, smoothing, chunk_elements)
    return loss_sum, tf.cast(tf.size(real_labels), tf.float32)


def _chunked_cross_entropy(hidden: tf.Tensor, table: tf.Tensor, labels: tf.Tensor,
                           smoothing: float, chunk_elements: int) -> tf.Tensor:
    """Summed smoothed cross-entropy (KL form) of logits hidden @ table^T, [n, d] x [V, d]."""

    @tf.custom_gradient
    def loss_and_gradients(hidden: tf.Tensor, table: tf.Tensor):
        rows, vocab = tf.shape(hidden)[0], tf.shape(table)[0]
        weights = tf.cast(table, hidden.dtype)  # [V, d]
        off_value = tf.constant(smoothing, tf.float32) / tf.cast(vocab, tf.float32)
        label_value = 1.0 - smoothing + off_value
        chunk = tf.maximum(chunk_elements // vocab, 1)
        chunks = (rows + chunk - 1) // chunk

        def body(i, loss_sum, hidden_grads, table_grad):
            chunk_hidden = hidden[i * chunk:(i + 1) * chunk]  # [c, d]
            logits = tf.cast(tf.matmul(chunk_hidden, weights, transpose_b=True),
                             tf.float32)  # [c, V]
            targets = tf.one_hot(labels[i * chunk:(i + 1) * chunk], vocab,
                                 on_value=label_value, off_value=off_value)  # [c, V]
            cross_entropy, logits_grad = tf.raw_ops.SoftmaxCrossEntropyWithLogits(
                features=logits, labels=targets)  # [c], [c, V] = softmax - q
            logits_grad = tf.cast(logits_grad, hidden.dtype)
            hidden_grads = hidden_grads.write(
                i, tf.cast(tf.matmul(logits_grad, weights), tf.float32))  # [c, d]
            table_grad += tf.cast(tf.matmul(logits_grad, chunk_hidden, transpose_a=True),
                                  tf.float32)  # [V, d]
            return i + 1, loss_sum + tf.reduce_sum(cross_entropy), hidden_grads, table_grad

        _, loss_sum, hidden_grads, table_grad = tf.while_loop(
            lambda i, *_: i < chunks, body,
            (tf.constant(0), tf.constant(0.0), tf.TensorArray(tf.float32, size=chunks,
                                                              infer_shape=False),
             tf.zeros(tf.shape(table), tf.float32)))
        loss_sum -= tf.cast(rows, tf.float32) * _smoothed_entropy(label_value, off_value, vocab)
        hidden_grad = tf.reshape(hidden_grads.concat(), tf.shape(hidden))  # [n, d] float32

        def gradients(upstream: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            return (tf.cast(upstream * hidden_grad, hidden.dtype),
                    tf.cast(upstream * table_grad, table.dtype))

        return loss_sum, gradients

    return loss_and_gradients(hidden, tf.convert_to_tensor(table))  # a variable read: a tensor


def _smoothed_entropy(label_mass: tf.Tensor, other_mass: tf.Tensor, vocab: tf.Tensor) -> tf.Tensor:
    """-sum q log q for q with `label_mass` on one class and `other_mass` on the vocab - 1 others."""
    others = tf.cast(vocab - 1, tf.float32) * tf.math.xlogy(other_mass, other_mass)
    return -(tf.math.xlogy(label_mass, label_mass) + others)
