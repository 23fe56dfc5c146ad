import numpy as np
import tensorflow as tf

from keras_transformer.layers import PositionwiseFeedForward


def test_is_eq_2_applied_per_position():
    layer = PositionwiseFeedForward(d_ff=12)
    x = np.random.default_rng(0).normal(size=(2, 5, 4)).astype(np.float32)
    y = layer(tf.constant(x)).numpy()
    w1, b1 = layer.inner_dense.kernel.numpy(), layer.inner_dense.bias.numpy()
    w2, b2 = layer.outer_dense.kernel.numpy(), layer.outer_dense.bias.numpy()
    np.testing.assert_allclose(y, np.maximum(0, x @ w1 + b1) @ w2 + b2, atol=1e-5)
    config = PositionwiseFeedForward.from_config(layer.get_config()).get_config()
    assert config["d_ff"] == 12
