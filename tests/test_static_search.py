"""keras_transformer/static_search.py and compiled_search.py: the fixed-shape beam search
against `beam_search` (table-driven scoring, then the tiny model compiled by XLA), the
fixed-size decoder cache against the growing one, and the padding to compiled shapes."""
import numpy as np
import pytest
import tensorflow as tf

from export_helpers import EOS_ID, PAD_ID, SENTENCES, source_ids
from keras_transformer.tokenizer import UNK_ID
from keras_transformer.compiled_search import (SOURCE_BUCKET, bucket_sources, compiled_search,
                                               decode_hypotheses_compiled)
from keras_transformer.decoding import beam_search
from keras_transformer.decoding_settings import DecodingSettings
from keras_transformer.layers import DecoderLayer
from keras_transformer.static_search import static_beam_search
from keras_transformer.translate import decode_hypotheses
from test_decoding import BOS, EOS, PrefixTable, make_cache

LENGTH = 12  # the fixed output positions of the table-driven searches


def fixed_cache(cache: dict) -> dict:
    """make_cache's cache with its growing keys replaced by LENGTH fixed positions."""
    batch = cache["bias"].shape[0]
    return {**cache, "layer_0": {"keys": tf.zeros([batch, 1, LENGTH, 1])}}


def from_fixed_cache(table: PrefixTable):
    """PrefixTable.from_cache over a fixed-size cache: the last token written at `step` (a
    one-hot blend, so that it runs without XLA), the prefix read back from the cache."""
    def fn(last_ids: tf.Tensor, step: tf.Tensor, cache: dict) -> tuple[tf.Tensor, dict]:
        written = tf.cast(tf.range(LENGTH) == step, tf.float32)[None, None, :, None]
        keys = (cache["layer_0"]["keys"] * (1 - written)
                + tf.cast(last_ids, tf.float32)[:, None, None, None] * written)
        prefixes = tf.cast(keys[:, 0, :, 0], tf.int32)[:, :step + 1]  # [n, step + 1]
        bias = cache["bias"] + tf.reduce_mean(cache["memory"], axis=1, keepdims=True)
        return table.logits(prefixes, bias), {**cache, "layer_0": {"keys": keys}}
    return fn


@pytest.mark.parametrize("beam_size,stop,alpha", [(1, "full", 0.6), (2, "full", 0.0),
                                                  (4, "full", 0.6), (4, "bound", 0.6),
                                                  (4, "best", 0.6)])
def test_equals_beam_search(beam_size, stop, alpha):
    table = PrefixTable(3, vocab=9, eos_boost=0.5)
    cache = make_cache(vocab=9, batch=5, seed=2)
    max_lengths = tf.constant([LENGTH, 0, 3, 7, LENGTH])  # each sentence its own limit
    settings = dict(beam_size=beam_size, bos_id=BOS, eos_id=EOS, alpha=alpha, pad_id=-1,
                    stop=stop)
    expected_ids, expected_scores = beam_search(table.from_cache, cache, max_lengths, **settings)
    ids, scores, steps = static_beam_search(from_fixed_cache(table), fixed_cache(cache),
                                            max_lengths, length=LENGTH, **settings)
    assert ids.shape == (5, beam_size, LENGTH)
    np.testing.assert_array_equal(ids[:, :, :int(steps)], expected_ids)
    assert np.all(ids[:, :, int(steps):] == -1)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-6)


def test_compiles_with_xla_in_one_shape():
    table = PrefixTable(4, vocab=7)
    cache = fixed_cache(make_cache(vocab=7, batch=3, seed=1))
    max_lengths = tf.constant([LENGTH, 4, 9])
    search = tf.function(lambda cache, max_lengths: static_beam_search(
        from_fixed_cache(table), cache, max_lengths, length=LENGTH, beam_size=3, bos_id=BOS,
        eos_id=EOS), jit_compile=True, autograph=False)
    ids, scores, steps = search(cache, max_lengths)
    expected_ids, expected_scores = beam_search(
        table.from_cache, make_cache(vocab=7, batch=3, seed=1), max_lengths, beam_size=3,
        bos_id=BOS, eos_id=EOS)
    np.testing.assert_array_equal(ids[:, :, :int(steps)], expected_ids)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-5)


def test_fixed_size_decoder_cache_equals_the_growing_one():
    layer = DecoderLayer(num_heads=2, key_dim=4, value_dim=3, d_ff=16, dropout=0.0,
                         norm_first=True)
    x = tf.random.normal([2, 4, 8], seed=0)
    memory = tf.random.normal([2, 6, 8], seed=1)
    memory_mask = tf.constant([[True] * 6, [True] * 2 + [False] * 4])[:, None, None, :]
    layer.build(x.shape, memory.shape)
    cache, growing = layer.init_cache(memory), []
    for t in range(4):
        y, cache = layer.step(x[:, t], cache, memory_mask)
        growing.append(y)

    # the fixed cache's in-place write runs under XLA
    @tf.function(jit_compile=True, autograph=False)
    def fixed_steps(x: tf.Tensor, memory: tf.Tensor) -> tf.Tensor:
        cache = layer.init_cache(memory, length=7)
        outputs = []
        for t in range(4):
            y, cache = layer.step(x[:, t], cache, memory_mask, position=tf.constant(t))
            outputs.append(y)
        return tf.stack(outputs, axis=1)

    np.testing.assert_allclose(fixed_steps(x, memory), tf.stack(growing, axis=1), atol=1e-5)


@pytest.fixture(scope="module")
def compiled(export_translator):
    """(model, settings, the compiled search) of the tiny model; beam 4, sources cut to 40."""
    model, settings = export_translator.model, export_translator.settings
    return model, settings, compiled_search(model, settings)


@pytest.mark.parametrize("rows", [[0], [9, 2, 0, 5, 7]])
def test_compiled_search_equals_decode_hypotheses(compiled, export_translator, rows):
    """2 and 6 sources with an empty one (padded to 2 and 8 rows), and the same batches
    above xla_max_batch, which beam_search decodes."""
    model, settings, search = compiled
    lines = [SENTENCES[i] for i in rows] + ["  "]
    source = tf.constant(source_ids(export_translator.spm_model_proto, lines))
    expected_ids, expected_scores = decode_hypotheses(model, source, settings)
    for xla_max_batch in (8, 2):
        ids, scores = decode_hypotheses_compiled(model, source, settings, search, xla_max_batch)
        np.testing.assert_array_equal(ids, expected_ids)
        np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-6)


def test_an_empty_batch_and_a_source_without_time_steps(compiled):
    model, settings, search = compiled
    for source in (tf.zeros([0, 5], tf.int32), tf.zeros([2, 0], tf.int32)):
        ids, scores = decode_hypotheses_compiled(model, source, settings, search, 8)
        assert ids.shape[:2] == (source.shape[0], settings.beam_size)
        assert np.all(ids.numpy() == PAD_ID) and np.all(scores.numpy() == 0)


def test_bucket_sources_cover_every_padded_width():
    assert [ids.shape for ids in bucket_sources(40)] == [(1, 16), (1, 32), (1, 48)]
    assert [ids.shape[1] for ids in bucket_sources(SOURCE_BUCKET)] == [SOURCE_BUCKET]
    assert all(ids[0, -1] == EOS_ID and np.all(ids[0, :-1] == UNK_ID) for ids in bucket_sources(64))
