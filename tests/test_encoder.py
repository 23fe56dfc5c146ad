import numpy as np
import tensorflow as tf

from keras_transformer.layers import EncoderLayer

ARGS = dict(num_heads=2, key_dim=4, value_dim=4, d_ff=16, dropout=0.1)


def test_shape_masking_and_config():
    layer = EncoderLayer(**ARGS)
    x = tf.random.normal([2, 5, 8], seed=0)
    mask = tf.constant([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    y = layer(x, attention_mask=mask)
    assert y.shape == (2, 5, 8)
    # Padded positions cannot influence real ones.
    noisy = tf.concat([x[:, :3], x[:, 3:] + 10.0], axis=1)
    np.testing.assert_allclose(layer(noisy, attention_mask=mask)[1, :3], y[1, :3], atol=1e-5)
    assert EncoderLayer.from_config(layer.get_config()).get_config() == layer.get_config()


def test_dropout_is_active_only_in_training():
    layer = EncoderLayer(**{**ARGS, "dropout": 0.5})
    x = tf.random.normal([1, 4, 8], seed=1)
    np.testing.assert_allclose(layer(x), layer(x, training=False))
    assert np.abs(layer(x, training=True) - layer(x)).max() > 1e-3
