"""keras_transformer/translate.py: decode_sources against the Translator and greedy search, and
its limits (source cut, source length + 50, empty sources)."""
import functools

import numpy as np
import pytest
import tensorflow as tf

from export.translator import Translator
from export_helpers import (BOS_ID, EOS_ID, PAD_ID, SENTENCES, make_model, output_lengths,
                            source_ids)
from keras_transformer.search_primitives import length_penalty
from keras_transformer.greedy import greedy_search
from keras_transformer.decoding_settings import DecodingSettings
from keras_transformer.translate import GREEDY, decode_sources


def graph_decode(model, source: np.ndarray, settings: DecodingSettings = DecodingSettings()):
    """`decode_sources` traced into a graph, as the exports run it: eager, a search runs op by
    op, several times slower over the 50-64 steps these limits reach (test_equals_the_translator
    and the others decode eagerly)."""
    return _graph_search(model, settings)(tf.constant(source, tf.int32))


@functools.cache
def _graph_search(model, settings: DecodingSettings):
    """`decode_sources` of `model` with `settings` as a graph function of any batch and
    source length, traced once (about 2 CPU-s a trace)."""
    return tf.function(lambda ids: decode_sources(model, ids, settings),
                       input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False)


@pytest.fixture(scope="module")
def sources(export_translator) -> np.ndarray:
    """The test sentences, then a source of EOS alone and an all-PAD row."""
    ids = source_ids(export_translator.spm_model_proto, SENTENCES)  # [n, time]
    empty = np.full([2, ids.shape[1]], PAD_ID, np.int32)
    empty[0, 0] = EOS_ID
    return np.concatenate([ids, empty])  # [n + 2, time]


@pytest.mark.parametrize("beam_size", [1, 4])
def test_equals_the_translator(export_translator, sources, beam_size):
    settings = DecodingSettings(beam_size=beam_size, max_source_length=6)
    translator = Translator(export_translator.model, export_translator.spm_model_proto, settings)
    expected = translator.translate_ids(tf.constant(sources))
    target_ids, score = decode_sources(export_translator.model, sources, settings)
    assert target_ids.dtype == tf.int32 and score.dtype == tf.float32
    np.testing.assert_array_equal(target_ids.numpy(), expected["target_ids"].numpy())
    np.testing.assert_allclose(score.numpy(), expected["score"].numpy(), rtol=1e-5)


def test_greedy_scores_are_length_penalised_log_probabilities(export_translator, sources):
    model = export_translator.model
    source = sources[:len(SENTENCES)]
    memory, memory_mask = model.encode(tf.constant(source), training=False)
    max_lengths = np.minimum(np.sum(source != PAD_ID, axis=1) + 50, 64)
    ids, log_probs = greedy_search(
        lambda ids, step, cache: model.decode_step(ids[:, -1], step, cache),
        model.init_cache(memory, memory_mask), tf.constant(max_lengths, tf.int32),
        bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID)
    target_ids, score = decode_sources(model, source, GREEDY)
    np.testing.assert_array_equal(target_ids.numpy(), ids.numpy())
    lengths = output_lengths(ids.numpy())
    assert len(set(lengths)) > 3 and all(row[n - 1] == EOS_ID for row, n in zip(ids.numpy(),
                                                                              lengths))
    np.testing.assert_allclose(score.numpy(), log_probs.numpy() / length_penalty(
        tf.constant(lengths), GREEDY.alpha).numpy(), rtol=1e-5)


def test_a_source_with_no_piece_gives_no_ids_and_score_0(export_translator, sources):
    target_ids, score = decode_sources(export_translator.model, sources)  # beam 4
    assert not target_ids.numpy()[-2:].any() and list(score.numpy()[-2:]) == [0.0, 0.0]
    alone_ids, alone_score = decode_sources(export_translator.model, sources[:-2])
    np.testing.assert_array_equal(target_ids.numpy()[:-2], alone_ids.numpy())
    np.testing.assert_allclose(score.numpy()[:-2], alone_score.numpy(), rtol=1e-5)
    empty_ids, empty_score = decode_sources(export_translator.model, sources[-2:])
    assert empty_ids.shape == (2, 0) and list(empty_score.numpy()) == [0.0, 0.0]


def test_sources_are_cut_to_max_source_length_and_the_models(export_translator, sources):
    model = export_translator.model  # max_length 64
    assert GREEDY.source_limit(64) == DecodingSettings(max_source_length=100).source_limit(64) \
        == 64
    cut_ids, cut_score = graph_decode(model, sources[:, :5], GREEDY)
    ids, score = graph_decode(model, sources, DecodingSettings(beam_size=1, max_source_length=5))
    np.testing.assert_array_equal(ids.numpy(), cut_ids.numpy())
    np.testing.assert_array_equal(score.numpy(), cut_score.numpy())
    long_source = np.tile(sources[3:4, :1], [1, 200])  # 200 tokens of one piece, no EOS
    ids, score = graph_decode(model, long_source, GREEDY)  # positions beyond 64 would fail
    cut_ids, cut_score = graph_decode(model, long_source[:, :64], GREEDY)
    np.testing.assert_array_equal(ids.numpy(), cut_ids.numpy())
    np.testing.assert_array_equal(score.numpy(), cut_score.numpy())


def test_outputs_stop_at_source_length_plus_50_and_at_the_models_max_length(export_translator):
    """An untrained model never ends with EOS: its outputs run to the limit."""
    model = make_model(export_translator.spm_model_proto)  # max_length 64
    source = source_ids(export_translator.spm_model_proto, ["sun moon star", "bird", "x"])
    source_lengths = np.sum(source != PAD_ID, axis=1)
    assert max(source_lengths) + 50 < 64
    for kwargs, expected in [({}, source_lengths + 50), ({"extra_length": 7}, source_lengths + 7),
                             ({"extra_length": 100}, [64] * 3)]:
        target_ids, _ = graph_decode(model, source, DecodingSettings(beam_size=1, **kwargs))
        assert output_lengths(target_ids.numpy()) == list(expected)
        assert not (target_ids.numpy() == EOS_ID).any()


@pytest.mark.parametrize("beam_size", [1, 4])
def test_a_graph_search_reads_each_weight_once_before_its_loops(export_translator, beam_size):
    """A weight read inside the search's loops is one more node for TensorFlow's executor to
    run in every step."""
    model = export_translator.model
    graph = _graph_search(model, DecodingSettings(beam_size=beam_size)).get_concrete_function(
    ).graph
    in_loops = [node.name for function in graph.as_graph_def().library.function
                for node in function.node_def if node.op == "ReadVariableOp"]
    assert not in_loops
    reads = [op for op in graph.get_operations() if op.type == "ReadVariableOp"]
    assert len(reads) == len(model.trainable_variables)
