"""keras_transformer/constrained_search.py and terms.py against table-driven scoring functions
(no model): terms forced in, as whole words; unconstrained search reproduced without terms."""
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.constrained_search import constrained_beam_search
from keras_transformer.decoding import beam_search
from keras_transformer.search_primitives import NEG_INF
from keras_transformer.terms import (matched_after, prefix_overlaps, term_lengths,
                                     terms_found)
from test_decoding import BOS, EOS, PrefixTable, make_cache

VOCAB = 12


def search(table: PrefixTable, cache: dict, max_lengths, terms, beam_size: int = 4,
           stop: str = "full"):
    return constrained_beam_search(table.from_cache, cache, tf.cast(max_lengths, tf.int32),
                                   tf.cast(terms, tf.int32), beam_size=beam_size,
                                   bos_id=BOS, eos_id=EOS, pad_id=-1, stop=stop)


@pytest.mark.parametrize("beam_size, stop", [(4, "full"), (3, "bound"), (3, "best"),
                                             (1, "full")])
def test_without_terms_it_is_beam_search_exactly(beam_size, stop):
    table = PrefixTable(seed=3, vocab=VOCAB, eos_boost=1.0)
    cache = make_cache(VOCAB, batch=5, seed=1)
    max_lengths = [7, 0, 12, 3, 9]
    expected_ids, expected_scores = beam_search(
        table.from_cache, cache, tf.constant(max_lengths), beam_size=beam_size, bos_id=BOS,
        eos_id=EOS, pad_id=-1, stop=stop)
    for terms in (np.zeros([5, 0, 0]), np.full([5, 2, 3], -1)):  # none, or padding only
        ids, scores = search(table, cache, max_lengths, terms, beam_size, stop)
        if beam_size == 1:  # greedy search there: the same best translation
            ids, scores = ids[:, :1], scores[:, :1]
        np.testing.assert_array_equal(ids.numpy(), expected_ids.numpy())
        np.testing.assert_allclose(scores.numpy(), expected_scores.numpy(), rtol=1e-6)


def test_a_term_the_model_hates_is_forced_into_every_finished_hypothesis():
    table = PrefixTable(seed=5, vocab=VOCAB, eos_boost=2.0)
    table.table[:, 7] -= 30.0  # token 7 is never likely
    cache = make_cache(VOCAB, batch=2, seed=2)
    plain, _ = search(table, cache, [10, 10], np.zeros([2, 0, 0]))
    assert not (plain.numpy() == 7).any()
    terms = [[[7, -1]], [[7, 7]]]  # one piece; the same piece twice
    ids, scores = search(table, cache, [10, 10], terms)
    assert (scores.numpy() > NEG_INF / 2).all()
    for sentence, row_terms in zip(ids.numpy(), terms):
        for hypothesis in sentence:
            assert EOS in hypothesis or len(hypothesis) == 10
            assert _contains(hypothesis, [t for t in row_terms[0] if t != -1])


def test_multi_piece_terms_and_two_terms_per_sentence_all_appear():
    table = PrefixTable(seed=7, vocab=VOCAB, eos_boost=1.5)
    cache = make_cache(VOCAB, batch=3, seed=4)
    terms = np.array([[[4, 9, 2], [6, -1, -1]],
                      [[11, 3, -1], [-1, -1, -1]],
                      [[-1, -1, -1], [-1, -1, -1]]])  # the last sentence has none
    ids, scores = search(table, cache, [15, 15, 15], terms)
    found = terms_found(ids[:, 0], tf.constant(terms), pad_id=-1).numpy()
    assert found.all()
    for sentence, sentence_terms, sentence_scores in zip(ids.numpy(), terms, scores.numpy()):
        assert (np.diff(sentence_scores) <= 0).all() and (sentence_scores > NEG_INF / 2).all()
        for hypothesis in sentence:
            assert all(_contains(hypothesis, [t for t in term if t != -1])
                       for term in sentence_terms)
    unconstrained, _ = search(table, tf.nest.map_structure(lambda t: t[2:], cache), [15],
                              terms[2:])
    np.testing.assert_array_equal(ids.numpy()[2, :, :unconstrained.shape[2]],
                                  unconstrained.numpy()[0])


@pytest.mark.parametrize("static", [True, False], ids=["static", "unknown"])
def test_in_a_graph_of_static_or_unknown_shapes_it_searches_as_eagerly(static):
    """A tf.function's trace with the batch and term shapes known (a fixed-shape export) or
    not gives the eager search's ids and scores."""
    table = PrefixTable(seed=7, vocab=VOCAB, eos_boost=1.5)
    cache = make_cache(VOCAB, batch=3, seed=4)
    terms = tf.constant([[[4, 9, 2], [6, -1, -1]], [[11, 3, -1], [-1, -1, -1]],
                         [[-1, -1, -1], [-1, -1, -1]]], tf.int32)
    max_lengths = tf.constant([10, 10, 10], tf.int32)
    eager_ids, eager_scores = search(table, cache, max_lengths, terms)
    graph = tf.function(lambda max_lengths, terms: search(table, cache, max_lengths, terms),
                        input_signature=[tf.TensorSpec([3] if static else [None], tf.int32),
                                         tf.TensorSpec([3, 2, 3] if static else [None] * 3,
                                                       tf.int32)], autograph=False)
    ids, scores = graph(max_lengths, terms)
    np.testing.assert_array_equal(ids.numpy(), eager_ids.numpy())
    np.testing.assert_allclose(scores.numpy(), eager_scores.numpy(), rtol=1e-6)


def test_terms_fill_the_length_limit_exactly_or_are_reported_missing():
    table = PrefixTable(seed=9, vocab=VOCAB, eos_boost=3.0)
    cache = make_cache(VOCAB, batch=2, seed=5)
    terms = np.array([[[5, 6, 8]], [[5, 6, 8]]])
    ids, scores = search(table, cache, [3, 2], terms)  # 3 pieces fit in 3, not in 2
    found = terms_found(ids[:, 0], tf.constant(terms), pad_id=-1).numpy()
    assert list(found[:, 0]) == [True, False]
    assert list(ids.numpy()[0, 0]) == [5, 6, 8] and scores.numpy()[0, 0] > NEG_INF / 2
    assert scores.numpy()[1, 0] < NEG_INF / 2  # no hypothesis could finish


def test_a_term_is_met_only_when_a_piece_that_may_end_it_follows():
    table = PrefixTable(seed=11, vocab=VOCAB, eos_boost=1.0)
    table.table[:, 6] += 4.0  # piece 6, which continues a word, is always likely
    cache = make_cache(VOCAB, batch=2, seed=6)
    word_end = tf.constant([token != 6 for token in range(VOCAB)])
    terms = tf.constant([[[5, -1]], [[5, 8]]])
    ids, scores = constrained_beam_search(
        table.from_cache, cache, tf.constant([12, 12]), terms, beam_size=4, bos_id=BOS,
        eos_id=EOS, pad_id=-1, word_end=word_end)
    assert (scores.numpy() > NEG_INF / 2).all()
    for beam in range(4):
        assert terms_found(ids[:, beam], terms, -1, word_end).numpy().all()
    loose, _ = search(table, cache, [12, 12], terms)  # any piece may end a term
    assert not terms_found(loose[:, 0], terms, -1, word_end).numpy().all()


def test_terms_found_matches_whole_piece_sequences():
    ids = tf.constant([[4, 9, 2, 1, -1], [9, 4, 2, 1, -1]])
    terms = tf.constant([[[4, 9, 2], [2, 1, -1], [-1, -1, -1]],
                         [[4, 9, 2], [2, -1, -1], [3, -1, -1]]])
    assert terms_found(ids, terms, pad_id=-1).numpy().tolist() == [[True, True, True],
                                                                   [False, True, False]]
    word_end = tf.constant([token != 1 for token in range(12)])  # 1 continues a word
    assert terms_found(ids, terms, -1, word_end).numpy().tolist() == [[False, True, True],
                                                                      [False, False, False]]


def test_a_term_that_repeats_its_own_start_is_found_where_a_match_broke():
    script = tf.constant([4, 4, 4, 5, EOS, EOS])  # the model's one likely output: a a a b

    def scripted(ids, step, cache):
        return 10.0 * tf.one_hot(tf.fill([tf.shape(ids)[0]], script[step]), VOCAB), cache

    ids, scores = constrained_beam_search(
        scripted, {"bias": tf.zeros([1, VOCAB])}, tf.constant([5]), tf.constant([[[4, 4, 5]]]),
        beam_size=2, bos_id=BOS, eos_id=EOS, pad_id=-1)
    # "a a b" ends at the fourth piece: nothing is forced, the output is the model's.
    assert list(ids.numpy()[0, 0]) == [4, 4, 4, 5, EOS] and scores.numpy()[0, 0] > -1.0


def test_matched_after_is_the_longest_start_of_the_term_the_output_ends_with():
    rng = np.random.default_rng(0)
    terms = np.full([1, 30, 6], -1)  # pieces from {1, 2}: many that repeat their start
    for row in terms[0]:
        length = rng.integers(1, 6)
        row[:length] = rng.integers(1, 3, size=length)
    lengths = term_lengths(tf.constant(terms), pad_id=-1)
    overlaps = prefix_overlaps(tf.constant(terms))
    output = rng.integers(1, 3, size=40)
    matched = np.zeros([1, 1, 30], np.int32)
    for end in range(1, len(output) + 1):
        matched = matched_after(tf.constant(matched), tf.constant([[output[end - 1]]]),
                                tf.constant(terms), lengths, overlaps).numpy()
        for term, length, got in zip(terms[0], lengths.numpy()[0], matched[0, 0]):
            expected = max(n for n in range(length + 1)
                           if list(output[end - n:end]) == list(term[:n]))
            assert got == expected


def _contains(hypothesis: np.ndarray, term: list[int]) -> bool:
    return any(list(hypothesis[i:i + len(term)]) == term for i in range(len(hypothesis)))
