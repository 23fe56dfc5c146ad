import math

import numpy as np
import tensorflow as tf

from keras_transformer.layers import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from keras_transformer.layers.positional_encoding import sinusoidal_table


def test_sinusoid_matches_paper_formula_at_hand_computed_points():
    d_model = 512
    table = sinusoidal_table(tf.range(100), d_model).numpy()
    assert table.shape == (100, d_model)
    assert table[0, 0] == 0.0 and table[0, 1] == 1.0  # sin(0), cos(0)
    assert math.isclose(table[1, 0], math.sin(1.0), rel_tol=1e-6)
    assert math.isclose(table[1, 1], math.cos(1.0), rel_tol=1e-6)
    # PE(pos=7, 2i=10) = sin(7 / 10000^(10/512)); PE(7, 11) = cos of the same angle.
    angle = 7 / 10000 ** (10 / 512)
    assert math.isclose(table[7, 10], math.sin(angle), rel_tol=1e-5)
    assert math.isclose(table[7, 11], math.cos(angle), rel_tol=1e-5)
    # The last pair has wavelength 2*pi*10000^(510/512): nearly constant over 100 positions.
    assert math.isclose(table[99, 511], math.cos(99 / 10000 ** (510 / 512)), rel_tol=1e-5)


def test_an_odd_d_model_keeps_its_last_sine():
    table = sinusoidal_table(tf.range(4), 7).numpy()  # pairs (sin, cos) x 3, then a sine
    assert table.shape == (4, 7)
    np.testing.assert_allclose(table[:, 6], np.sin(np.arange(4) / 10000 ** (6 / 7)), rtol=1e-6)


def test_a_graph_of_unknown_time_adds_the_eager_encoding():
    layer = SinusoidalPositionalEncoding()
    spec = [tf.TensorSpec([None, None, 6]), tf.TensorSpec([], tf.int32)]
    encode = tf.function(lambda x, start: layer(x, start=start), input_signature=spec,
                         autograph=False)
    x = tf.random.normal([2, 5, 6], seed=1)
    np.testing.assert_allclose(encode(x, tf.constant(3)), layer(x, start=3), atol=1e-6)


def test_sinusoid_offset_equals_slice():
    x = tf.zeros([2, 3, 8])
    full = SinusoidalPositionalEncoding()(tf.zeros([2, 8, 8]))
    shifted = SinusoidalPositionalEncoding()(x, start=5)
    np.testing.assert_allclose(shifted, full[:, 5:8], atol=1e-6)


def test_a_table_of_max_length_positions_gives_the_sinusoids_then_its_last_row():
    """With max_length a decoding step gathers a row of a constant table (a graph folds it):
    the computed sinusoids up to the last position, which later positions read."""
    bounded, computed = SinusoidalPositionalEncoding(max_length=10), SinusoidalPositionalEncoding()
    x = tf.random.normal([2, 4, 6], seed=2)
    np.testing.assert_allclose(bounded(x, start=tf.constant(6)), computed(x, start=6),
                               atol=1e-6)  # sin of a longer vector: an ulp apart at most
    step = tf.function(lambda x, start: bounded(x, start=start), autograph=False)
    last = computed(x[:, :1], start=9)
    np.testing.assert_allclose(step(x[:, :1], tf.constant(9)), last, atol=1e-6)
    np.testing.assert_allclose(step(x[:, :1], tf.constant(12)), last, atol=1e-6)
    assert SinusoidalPositionalEncoding.from_config(bounded.get_config()).max_length == 10


def test_learned_positions_are_weights_and_offset():
    layer = LearnedPositionalEmbedding(max_length=16)
    full = layer(tf.zeros([1, 6, 4]))
    step = layer(tf.zeros([1, 1, 4]), start=4)
    assert len(layer.trainable_weights) == 1
    np.testing.assert_allclose(step[:, 0], full[:, 4], atol=1e-6)
    restored = LearnedPositionalEmbedding.from_config(layer.get_config())
    assert restored.max_length == 16


def test_one_positions_encoding_is_calls_step_squeezed():
    """at_position (a decoding step's [batch, d_model]) adds what `call` adds to x[:, None] at
    that start, within the table and past it (its last row), traced with a scalar step."""
    learned = LearnedPositionalEmbedding(max_length=8)
    learned(tf.zeros([1, 1, 6]))  # built
    x = tf.random.normal([3, 6], seed=3)
    for layer in (SinusoidalPositionalEncoding(max_length=8), SinusoidalPositionalEncoding(),
                  learned):
        at = tf.function(lambda x, step: layer.at_position(x, step), autograph=False)
        for step in (0, 5, 11):
            np.testing.assert_array_equal(at(x, tf.constant(step)),
                                          layer(x[:, None], start=step)[:, 0])
