"""Label-smoothed cross-entropy (section 5.4), summed over real target tokens."""
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
    log_probs = tf.nn.log_softmax(logits, axis=-1)  # [b, t, V]
    on_value = 1.0 - smoothing
    off_value = tf.constant(smoothing, tf.float32) / tf.cast(vocab, tf.float32)
    nll = -tf.gather(log_probs, labels, batch_dims=2)  # [b, t]
    uniform_nll = -tf.reduce_mean(log_probs, axis=-1)  # [b, t]
    cross_entropy = on_value * nll + smoothing * uniform_nll
    cross_entropy -= _smoothed_entropy(on_value + off_value, off_value, vocab)
    weights = tf.cast(tf.not_equal(labels, pad_id), tf.float32)  # [b, t]
    return tf.reduce_sum(cross_entropy * weights), tf.reduce_sum(weights)


def _smoothed_entropy(label_mass: tf.Tensor, other_mass: tf.Tensor, vocab: tf.Tensor) -> tf.Tensor:
    """-sum q log q for q with `label_mass` on one class and `other_mass` on the vocab - 1 others."""
    others = tf.cast(vocab - 1, tf.float32) * tf.math.xlogy(other_mass, other_mass)
    return -(tf.math.xlogy(label_mass, label_mass) + others)
