import math
import re

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.losses import (label_smoothed_cross_entropy,
                                      projected_label_smoothed_cross_entropy)


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


@pytest.mark.parametrize("chunk_elements", [7 * 3, 5 * 7, 10_000])  # 3 rows, 5 rows, all rows
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_projected_loss_matches_loss_on_logits(chunk_elements, eps):
    rng = np.random.default_rng(0)
    hidden = tf.constant(rng.normal(size=(3, 4, 6)).astype(np.float32))
    table = tf.Variable(rng.normal(size=(7, 6)).astype(np.float32))
    labels = tf.constant([[1, 4, 6, 0], [2, 3, 0, 0], [5, 5, 5, 1]])  # 9 real tokens
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(hidden)
        logits = tf.matmul(hidden, table, transpose_b=True)
        expected, expected_count = label_smoothed_cross_entropy(labels, logits, eps)
        loss, count = projected_label_smoothed_cross_entropy(labels, hidden, table, eps,
                                                             chunk_elements=chunk_elements)
        scaled, expected_scaled = 3.0 * loss, 3.0 * expected  # an upstream gradient of 3
    assert float(count) == float(expected_count) == 9
    np.testing.assert_allclose(float(loss), float(expected), rtol=1e-5)
    for got, want in zip(tape.gradient(scaled, [hidden, table]),
                         tape.gradient(expected_scaled, [hidden, table])):
        np.testing.assert_allclose(tf.convert_to_tensor(got), tf.convert_to_tensor(want),
                                   rtol=1e-5, atol=1e-6)


def test_projected_loss_in_graph_and_bfloat16_hidden(bfloat16_runs):
    rng = np.random.default_rng(1)
    hidden = tf.constant(rng.normal(size=(2, 3, 4)).astype(np.float32))
    table = tf.constant(rng.normal(size=(9, 4)).astype(np.float32))
    labels = tf.constant([[1, 2, 3], [4, 0, 0]])
    expected, _ = label_smoothed_cross_entropy(labels, tf.matmul(hidden, table, transpose_b=True),
                                               0.1)
    compiled = tf.function(lambda h: projected_label_smoothed_cross_entropy(
        labels, h, table, 0.1, chunk_elements=18)[0], autograph=False)
    np.testing.assert_allclose(float(compiled(hidden)), float(expected), rtol=1e-5)
    low = float(compiled(tf.cast(hidden, tf.bfloat16)))
    np.testing.assert_allclose(low, float(expected), rtol=2e-2)


def _largest_vocab_tensor(hlo: str, vocab: int) -> int:
    """Elements of the largest f32 tensor with a vocab-sized dimension in HLO text."""
    sizes = [math.prod(int(d) for d in dims.split(","))
             for dims in re.findall(r"f32\[([\d,]+)\]", hlo) if str(vocab) in dims.split(",")]
    return max(sizes)


def test_under_xla_no_tensor_holds_every_rows_logits():
    """jit_compile's loss: chunks of rows as without XLA, never [batch, time, vocab] logits
    (nor their one-hot targets); the whole-logits loss does hold them (the check can fail)."""
    rng = np.random.default_rng(2)
    batch, time, d_model, vocab = 16, 125, 32, 8000  # 2,000 rows, chunks of 524
    hidden = tf.constant(rng.normal(size=(batch, time, d_model)).astype(np.float32))
    table = tf.constant(rng.normal(size=(vocab, d_model)).astype(np.float32) * 0.1)
    labels = rng.integers(1, vocab, (batch, time)).astype(np.int32)
    labels[:, 100:] = 0  # padding
    labels = tf.constant(labels)

    def gradients(loss_fn):
        def compute(hidden, table):
            with tf.GradientTape() as tape:
                tape.watch([hidden, table])
                loss, _ = loss_fn(hidden, table)
            return loss, tape.gradient(loss, [hidden, table])
        return tf.function(compute, jit_compile=True, autograph=False)

    chunked = gradients(lambda h, t: projected_label_smoothed_cross_entropy(
        labels, h, t, 0.1, static_shapes=True, chunk_elements=2 ** 22))
    whole = gradients(lambda h, t: label_smoothed_cross_entropy(
        labels, tf.matmul(h, t, transpose_b=True), 0.1))
    rows_logits = batch * time * vocab
    hlo = chunked.experimental_get_compiler_ir(hidden, table)(stage="optimized_hlo")
    assert _largest_vocab_tensor(hlo, vocab) <= 2 ** 22
    whole_hlo = whole.experimental_get_compiler_ir(hidden, table)(stage="optimized_hlo")
    assert _largest_vocab_tensor(whole_hlo, vocab) >= rows_logits
    (loss, grads), (expected, expected_grads) = chunked(hidden, table), whole(hidden, table)
    np.testing.assert_allclose(float(loss), float(expected), rtol=1e-5)
    for got, want in zip(grads, expected_grads):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
