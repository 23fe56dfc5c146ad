import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import Projection


@pytest.mark.parametrize("shape", [(3, 4), (2, 5, 4), (2, 3, 5, 4)])
def test_projects_as_keras_dense_at_every_rank(shape):
    x = tf.constant(np.random.default_rng(0).normal(size=shape).astype(np.float32))
    projection = Projection(6, activation="relu", name="inner")
    dense = keras.layers.Dense(6, activation="relu")
    dense.build(shape)
    projection.build(shape)
    projection.set_weights(dense.get_weights())
    y = projection(x)
    assert y.shape == (*shape[:-1], 6)
    np.testing.assert_allclose(y.numpy(), dense(x).numpy(), atol=1e-6)
    config = Projection.from_config(projection.get_config()).get_config()
    assert (config["units"], config["activation"], config["name"]) == (6, "relu", "inner")


def test_a_sequence_is_one_matrix_product_without_tensordots_shape_arithmetic():
    """Keras's Dense multiplies a [batch, time, in] input by tf.tensordot: its shape
    arithmetic (Gather, Prod, Transpose) around the MatMul is in every traced graph."""
    projection = Projection(6)
    projection.build((None, None, 4))
    graph = tf.function(projection, autograph=False).get_concrete_function(
        tf.TensorSpec([None, None, 4])).graph
    kinds = [op.type for op in graph.get_operations()]
    assert kinds.count("MatMul") == 1
    assert not {"GatherV2", "Prod", "Transpose", "BatchMatMulV2"} & set(kinds)
    assert graph.outputs[0].shape.as_list() == [None, None, 6]


def test_restores_a_keras_dense_checkpoint(tmp_path):
    """Runs trained when the projections were keras.layers.Dense restore into Projection: the
    same checkpoint keys, every value read."""
    dense = keras.layers.Dense(6)
    dense.build((None, 4))
    prefix = tf.train.Checkpoint(layer=dense).write(str(tmp_path / "ckpt"))
    projection = Projection(6)
    projection.build((None, 4))
    tf.train.Checkpoint(layer=projection).read(prefix).assert_consumed()
    for restored, saved in zip(projection.get_weights(), dense.get_weights(), strict=True):
        np.testing.assert_array_equal(restored, saved)
