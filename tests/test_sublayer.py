import numpy as np
import tensorflow as tf

from keras_transformer.layers import ResidualSublayer


def layer_norm(x, eps=1e-6):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)


def test_post_norm_and_pre_norm():
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype(np.float32)
    double = lambda h: 2.0 * h  # noqa: E731
    post = ResidualSublayer(dropout=0.5)(tf.constant(x), sublayer=double, training=False)
    np.testing.assert_allclose(post, layer_norm(3 * x), atol=1e-4)
    pre = ResidualSublayer(dropout=0.5, norm_first=True)(tf.constant(x), sublayer=double)
    np.testing.assert_allclose(pre, x + 2 * layer_norm(x), atol=1e-4)


def test_dropout_applies_to_sublayer_output_in_training_only():
    x = tf.ones([1, 4, 64])
    block = ResidualSublayer(dropout=0.5, norm_first=True)
    zero = lambda h: tf.zeros_like(h) + 1.0  # noqa: E731
    trained = block(x, sublayer=zero, training=True).numpy()
    assert set(np.unique(trained)) == {1.0, 3.0}  # 1 + dropout(1) with 1/(1-0.5) scaling
    np.testing.assert_allclose(block(x, sublayer=zero, training=False), 2 * np.ones([1, 4, 64]))
