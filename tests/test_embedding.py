import keras
import numpy as np
import tensorflow as tf

from keras_transformer.layers import SharedEmbedding


def test_scaled_lookup_and_tied_projection():
    keras.utils.set_random_seed(0)
    layer = SharedEmbedding(vocab_size=11, d_model=16)
    ids = tf.constant([[1, 5, 0]])
    x = layer(ids)
    table = layer.embeddings.numpy()
    np.testing.assert_allclose(x[0, 1], table[5] * 4.0, rtol=1e-6)  # sqrt(16) = 4
    logits = layer.logits(tf.ones([1, 2, 16]))
    assert logits.shape == (1, 2, 11) and logits.dtype == tf.float32
    # A row sum can be near 0, where a relative tolerance alone fails on float32 rounding.
    np.testing.assert_allclose(logits[0, 0], table.sum(axis=1), rtol=1e-5, atol=1e-6)
    assert len(layer.weights) == 1
    assert SharedEmbedding.from_config(layer.get_config()).vocab_size == 11


def test_the_projection_of_any_rank_through_the_transposed_kernel_is_each_rows():
    keras.utils.set_random_seed(1)
    layer = SharedEmbedding(vocab_size=11, d_model=16)
    layer.build()
    hidden = tf.random.normal([3, 1, 16])  # a decoding step: [rows, 1, d_model]
    table = layer.embeddings.numpy()
    expected = np.einsum("rtd,vd->rtv", hidden.numpy(), table)
    for logits in (layer.logits(hidden), layer.logits(hidden, layer.output_kernel())):
        assert logits.shape == (3, 1, 11)
        np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer.logits(hidden[:, 0], layer.output_kernel()), expected[:, 0],
                               rtol=1e-5, atol=1e-6)
