import numpy as np
import tensorflow as tf

from keras_transformer.layers import DecoderLayer
from keras_transformer.model import causal_mask
from keras_transformer.search_primitives import SENTENCE_KEY


def test_step_with_cache_matches_full_pass():
    layer = DecoderLayer(num_heads=2, key_dim=4, value_dim=3, d_ff=16, dropout=0.0,
                         norm_first=True)
    x = tf.random.normal([2, 4, 8], seed=0)
    memory = tf.random.normal([2, 6, 8], seed=1)
    memory_mask = tf.constant([[True] * 6, [True] * 2 + [False] * 4])[:, None, None, :]
    full = layer(x, memory, attention_mask=causal_mask(4), memory_mask=memory_mask)
    cache = layer.init_cache(memory)
    assert cache["self_key"].shape == (2, 2, 0, 4)
    assert cache[SENTENCE_KEY]["cross_value"].shape == (2, 2, 6, 3)
    outputs = []
    for t in range(4):
        y, cache = layer.step(x[:, t], cache, memory_mask)
        outputs.append(y)
    assert cache["self_value"].shape == (2, 2, 4, 3)
    np.testing.assert_allclose(tf.stack(outputs, axis=1), full, atol=1e-5)
    assert DecoderLayer.from_config(layer.get_config()).get_config() == layer.get_config()


def test_a_sentences_rows_read_its_memory_once_as_its_copies():
    """Three rows per sentence (a beam search's beams, each its own prefix) over the memory's
    keys and values held once per sentence (`queries_per_key` 3) decode as over a copy for
    each row: outputs and self-attention caches."""
    layer = DecoderLayer(num_heads=2, key_dim=4, value_dim=3, d_ff=16, dropout=0.0)
    beams, memory = 3, tf.random.normal([2, 6, 8], seed=1)
    memory_mask = tf.constant([[True] * 6, [True] * 2 + [False] * 4])[:, None, None, :]
    x = tf.random.normal([2 * beams, 3, 8], seed=0)  # row b * beams + k
    layer(x, tf.repeat(memory, beams, axis=0))  # built
    shared = layer.init_cache(memory)
    shared = {**shared, "self_key": tf.repeat(shared["self_key"], beams, axis=0),
              "self_value": tf.repeat(shared["self_value"], beams, axis=0)}
    copies = layer.init_cache(tf.repeat(memory, beams, axis=0))
    copied_mask = tf.repeat(memory_mask, beams, axis=0)
    for t in range(3):
        y_shared, shared = layer.step(x[:, t], shared, memory_mask, queries_per_key=beams)
        y_copies, copies = layer.step(x[:, t], copies, copied_mask)
        np.testing.assert_allclose(y_shared, y_copies, atol=1e-5)
    assert shared[SENTENCE_KEY]["cross_key"].shape == (2, 2, 6, 4)
    np.testing.assert_allclose(shared["self_value"], copies["self_value"], atol=1e-5)
