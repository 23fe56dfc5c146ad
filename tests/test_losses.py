import math

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.losses import label_smoothed_cross_entropy


def reference(labels, logits, eps):
    """Smoothed cross-entropy minus the entropy of the smoothed target, by hand."""
    total, count = 0.0, 0
    vocab = logits.shape[-1]
    for b in range(labels.shape[0]):
        for t in range(labels.shape[1]):
            if labels[b, t] == 0:
                continue
            log_p = logits[b, t] - np.log(np.exp(logits[b, t]).sum())
            q = np.full(vocab, eps / vocab)
            q[labels[b, t]] += 1 - eps
            total += -(q * log_p).sum() + (q * np.log(np.where(q > 0, q, 1))).sum()
            count += 1
    return total, count


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_matches_hand_computation(eps):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5)).astype(np.float32)
    labels = np.array([[1, 4, 0], [2, 0, 0]])
    loss, count = label_smoothed_cross_entropy(tf.constant(labels), tf.constant(logits), eps)
    expected, expected_count = reference(labels, logits, eps)
    assert float(count) == expected_count == 3
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)


def test_uniform_prediction_point():
    # Uniform logits over 4 classes, eps 0.1: q = (0.925, 0.025, 0.025, 0.025); the smoothed
    # cross-entropy is log 4 and the entropy of q is subtracted.
    logits = tf.zeros([1, 1, 4])
    loss, _ = label_smoothed_cross_entropy(tf.constant([[2]]), logits, 0.1)
    entropy = -(0.925 * math.log(0.925) + 3 * 0.025 * math.log(0.025))
    assert math.isclose(float(loss), math.log(4) - entropy, rel_tol=1e-5)


def test_perfect_prediction_of_smoothed_target_scores_zero():
    q = np.full((1, 1, 4), 0.025, np.float32)
    q[0, 0, 3] = 0.925
    loss, _ = label_smoothed_cross_entropy(tf.constant([[3]]), tf.constant(np.log(q)), 0.1)
    assert abs(float(loss)) < 1e-5
