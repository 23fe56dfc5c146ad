import numpy as np
import tensorflow as tf

from keras_transformer.layers import MultiHeadAttention


def test_matches_eq_1_per_head():
    rng = np.random.default_rng(0)
    query = rng.normal(size=(2, 3, 8)).astype(np.float32)
    memory = rng.normal(size=(2, 5, 8)).astype(np.float32)
    mask = np.ones((2, 1, 1, 5), bool)
    mask[1, ..., 3:] = False  # the second memory has 3 real positions
    layer = MultiHeadAttention(num_heads=2, key_dim=4, value_dim=3)
    out, layer_weights = layer(tf.constant(query), tf.constant(memory),
                               attention_mask=tf.constant(mask), return_attention_scores=True)
    assert out.shape == (2, 3, 8)

    def project(dense, x, depth):
        y = x @ dense.kernel.numpy() + dense.bias.numpy()
        return y.reshape(*x.shape[:2], 2, depth).transpose(0, 2, 1, 3)

    q = project(layer.query_dense, query, 4)
    k = project(layer.key_dense, memory, 4)
    v = project(layer.value_dense, memory, 3)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(4)
    scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    context = (weights @ v).transpose(0, 2, 1, 3).reshape(2, 3, 6)
    expected = context @ layer.output_dense.kernel.numpy() + layer.output_dense.bias.numpy()
    np.testing.assert_allclose(out, expected, atol=1e-5)
    np.testing.assert_allclose(layer_weights, weights, atol=1e-6)
    assert np.all(layer_weights.numpy()[1, ..., 3:] == 0)


def test_precomputed_keys_values_give_same_output():
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=(1, 4, 8)).astype(np.float32))
    layer = MultiHeadAttention(num_heads=2, key_dim=4, value_dim=4)
    direct = layer(x)
    key, value = layer.project_key_value(x)
    assert key.shape == (1, 2, 4, 4)
    np.testing.assert_allclose(layer(x, key=key, value=value), direct, atol=1e-6)
    assert MultiHeadAttention.from_config(layer.get_config()).num_heads == 2
