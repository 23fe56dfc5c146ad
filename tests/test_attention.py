import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import MultiHeadAttention
from keras_transformer.layers.attention import onnx_step_form


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


def _step_inputs(groups: int, rows: int = 8):
    """A step's query rows [rows, 8] and keys/values [rows / groups, 2, 5, 4] with a mask."""
    rng = np.random.default_rng(2)
    query = tf.constant(rng.normal(size=(rows, 8)).astype(np.float32))
    key, value = (tf.constant(rng.normal(size=(rows // groups, 2, 5, 4)).astype(np.float32))
                  for _ in range(2))
    mask = np.ones((rows // groups, 1, 1, 5), bool)
    mask[0, ..., 2:] = False
    return query, key, value, tf.constant(mask)


@pytest.mark.parametrize("groups", [1, 4])
def test_a_step_attends_as_onnx_form_and_as_the_sequence(groups):
    query, key, value, mask = _step_inputs(groups)
    layer = MultiHeadAttention(num_heads=2, key_dim=4, value_dim=4)
    step = layer(query, key=key, value=value, attention_mask=mask, queries_per_key=groups)
    with onnx_step_form():
        onnx_form = layer(query, key=key, value=value, attention_mask=mask,
                          queries_per_key=groups)
    rows_key, rows_value, rows_mask = (tf.repeat(t, groups, axis=0) for t in (key, value, mask))
    sequence = layer(query[:, None], key=rows_key, value=rows_value, attention_mask=rows_mask)
    assert step.shape == (8, 8)
    np.testing.assert_allclose(step, onnx_form, atol=1e-6)
    np.testing.assert_allclose(step, sequence[:, 0], atol=1e-6)


def _step_op_types(layer: MultiHeadAttention, groups: int) -> set[str]:
    query, key, value, mask = _step_inputs(groups)
    attend = tf.function(lambda q: layer(q, key=key, value=value, attention_mask=mask,
                                         queries_per_key=groups), autograph=False)
    return {op.type for op in attend.get_concrete_function(query).graph.get_operations()}


@pytest.mark.parametrize("groups", [1, 4])
def test_a_float32_step_has_no_op_that_onednn_takes_and_onnx_form_has_the_fused_pattern(groups):
    """TensorFlow runs BatchMatMulV2, Softmax and Transpose as oneDNN's kernels on AVX-512
    and AMX CPUs, at ten times a step's product per call; `export.onnx_attention` fuses
    BatchMatMulV2 (MatMul), Softmax and the groups' Transposes."""
    layer = MultiHeadAttention(num_heads=2, key_dim=4, value_dim=4)
    kinds = _step_op_types(layer, groups)
    assert "BatchMatMulV3" in kinds
    assert not {"BatchMatMulV2", "Softmax", "Transpose"} & kinds
    with onnx_step_form():
        onnx_kinds = _step_op_types(layer, groups)
    assert {"BatchMatMulV2", "Softmax"} <= onnx_kinds
    assert ("Transpose" in onnx_kinds) == (groups > 1)
    assert "BatchMatMulV3" not in onnx_kinds


def test_a_bfloat16_step_keeps_the_products_onednn_runs():
    """Eigen emulates bfloat16 products: slower than oneDNN's from batch 32 on."""
    layer = MultiHeadAttention(num_heads=2, key_dim=4, value_dim=4, dtype="mixed_bfloat16")
    kinds = _step_op_types(layer, 4)
    assert "BatchMatMulV2" in kinds
    assert not {"BatchMatMulV3", "Softmax", "Transpose"} & kinds
