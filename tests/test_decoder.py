import numpy as np
import tensorflow as tf

from keras_transformer.layers import DecoderLayer
from keras_transformer.model import causal_mask


def test_step_with_cache_matches_full_pass():
    layer = DecoderLayer(num_heads=2, key_dim=4, value_dim=3, d_ff=16, dropout=0.0,
                         norm_first=True)
    x = tf.random.normal([2, 4, 8], seed=0)
    memory = tf.random.normal([2, 6, 8], seed=1)
    memory_mask = tf.constant([[True] * 6, [True] * 2 + [False] * 4])[:, None, None, :]
    full = layer(x, memory, attention_mask=causal_mask(4), memory_mask=memory_mask)
    cache = layer.init_cache(memory)
    assert cache["self_key"].shape == (2, 2, 0, 4)
    assert cache["cross_value"].shape == (2, 2, 6, 3)
    outputs = []
    for t in range(4):
        y, cache = layer.step(x[:, t], cache, memory_mask)
        outputs.append(y)
    assert cache["self_value"].shape == (2, 2, 4, 3)
    np.testing.assert_allclose(tf.stack(outputs, axis=1), full, atol=1e-5)
    assert DecoderLayer.from_config(layer.get_config()).get_config() == layer.get_config()
