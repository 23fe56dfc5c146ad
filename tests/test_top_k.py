"""keras_transformer/top_k.py: chunked_top_k gives tf.math.top_k's values and indices, ties
and padding included, in the graph and under XLA."""
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.top_k import CHUNK, beam_top_k, chunked_top_k, plain_top_k


def _cases() -> list[tuple[np.ndarray, int]]:
    rng = np.random.default_rng(0)
    cases = []
    for n, k in ((1, 1), (CHUNK, 8), (CHUNK + 1, 8), (5, 5), (3 * CHUNK - 7, 16), (4000, 8)):
        scores = rng.normal(size=(3, n)).astype(np.float32)
        cases.append((scores, k))
        cases.append((np.round(scores * 2) / 2, k))  # many equal values, across chunks
    flat = np.full((2, 10 * CHUNK), -1e9, np.float32)  # beam search's first step: one live beam
    flat[:, :CHUNK // 2] = rng.normal(size=(2, CHUNK // 2))
    cases.append((flat, 8))
    return cases


@pytest.mark.parametrize("scores,k", _cases())
def test_the_same_values_and_indices_as_top_k(scores: np.ndarray, k: int) -> None:
    expected = tf.math.top_k(scores, k=k)
    values, indices = chunked_top_k(tf.constant(scores), k)
    np.testing.assert_array_equal(values, expected.values)
    np.testing.assert_array_equal(indices, expected.indices)


def test_a_compiled_search_step_gives_the_same_with_unknown_shapes() -> None:
    scores = np.round(np.random.default_rng(1).normal(size=(4, 4 * 500)), 1).astype(np.float32)
    spec = tf.TensorSpec([None, None], tf.float32)
    compiled = tf.function(lambda x: chunked_top_k(x, 8), input_signature=[spec],
                           jit_compile=True, autograph=False)
    graph = tf.function(lambda x: chunked_top_k(x, 8), input_signature=[spec], autograph=False)
    expected = tf.math.top_k(scores, k=8)
    for function in (compiled, graph):
        values, indices = function(tf.constant(scores))
        np.testing.assert_array_equal(values, expected.values)
        np.testing.assert_array_equal(indices, expected.indices)


def test_graphs_traced_within_plain_top_k_take_tensorflows_topk() -> None:
    def op_types() -> list[str]:
        function = tf.function(lambda x: beam_top_k(x, 4), autograph=False,
                               input_signature=[tf.TensorSpec([None, None], tf.float32)])
        return [op.type for op in function.get_concrete_function().graph.get_operations()]

    assert "Max" in op_types() and op_types().count("TopKV2") == 3  # chunks, their order, top
    with plain_top_k():
        assert "Max" not in op_types() and op_types().count("TopKV2") == 1
    assert "Max" in op_types()
