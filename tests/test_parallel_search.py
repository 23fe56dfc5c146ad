"""keras_transformer.parallel_search: rows dealt out to parts and merged back in order, and the
tiny model's n-best lists unchanged by the split (beam 4, forced prefixes too)."""
import numpy as np
import pytest
import tensorflow as tf

from export_helpers import SENTENCES, source_ids
from keras_transformer.parallel_search import in_parallel
from keras_transformer.tokenizer import PAD_ID
from keras_transformer.translate import decode_hypotheses


def _row_echo(source_ids: tf.Tensor, extra: tf.Tensor | None = None):
    """A fake search: each row's n-best list holds its first source id, in a time axis whose
    width depends on the rows it got (as parts' searches stop at different steps)."""
    batch = tf.shape(source_ids)[0]
    width = 1 + batch  # [batch, 2, width]
    ids = tf.tile(source_ids[:, :1, None], [1, 2, width])
    scores = tf.cast(source_ids[:, :2], tf.float32) + (0.0 if extra is None else extra)
    return ids, scores


@pytest.mark.parametrize("parts", [2, 3])
@pytest.mark.parametrize("batch", [0, 1, 2, 3, 5, 7])
def test_rows_come_back_in_order(parts, batch):
    source = tf.constant(np.arange(1, batch + 1)[:, None].repeat(3, axis=1), tf.int32)
    offsets = tf.range(batch, dtype=tf.float32)[:, None] * 100.0  # a second row-aligned input
    ids, scores = tf.function(in_parallel(_row_echo, parts), autograph=False)(source, offsets)
    assert ids.shape[:2] == (batch, 2)
    first = ids.numpy()[:, :, 0]  # [batch, 2]
    np.testing.assert_array_equal(first, np.arange(1, batch + 1)[:, None].repeat(2, axis=1))
    expected = np.arange(1, batch + 1) + 100.0 * np.arange(batch)  # [batch]
    np.testing.assert_array_equal(scores, expected[:, None].repeat(2, axis=1))
    assert ids.shape[2] == 1 + len(range(0, batch, parts))  # part 0's: it has the most rows
    for index, row in enumerate(ids.numpy()):  # its part's width of its id, then PAD
        used = 1 + len(range(index % parts, batch, parts))
        np.testing.assert_array_equal(row[:, :used], index + 1)
        np.testing.assert_array_equal(row[:, used:], PAD_ID)


def test_one_part_is_the_search_itself_and_zero_is_refused():
    assert in_parallel(_row_echo, 1) is _row_echo
    with pytest.raises(ValueError, match="parts must be at least 1, got 0"):
        in_parallel(_row_echo, 0)


def test_the_split_keeps_each_sentences_nbest_list(export_translator):
    """The tiny model, 10 sentences and an empty one, in 3 parts (4, 4 and 3 rows), with a
    forced prefix for two of them: the same ids and scores as one beam search over the batch
    (2 parts: tests/test_serving.py)."""
    model, settings = export_translator.model, export_translator.settings
    source = tf.constant(source_ids(export_translator.spm_model_proto, SENTENCES + [" "]))
    prefix = np.zeros([len(SENTENCES) + 1, 2], np.int32)
    prefix[3, :] = source.numpy()[0, :2]
    prefix[8, 0] = source.numpy()[1, 0]

    def search(ids, prefix_ids=None):
        return decode_hypotheses(model, ids, settings, prefix_ids)

    expected_ids, expected_scores = tf.function(search, autograph=False)(source, prefix)
    ids, scores = tf.function(in_parallel(search, 3), autograph=False)(source, prefix)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-6)
