"""The lexical shortlist: prepare's table from scripted alignments and co-occurrence
(pipelines/corpus/shortlist.py), and a batch's candidates in the graph
(keras_transformer/shortlist.py)."""
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from keras_transformer.shortlist import batch_candidates, fixed_size, to_candidate_index
from keras_transformer.shortlist_table import STORED_PER_PIECE, Shortlist, ShortlistTable
from keras_transformer.tokenizer import train_sentencepiece
from pipelines.corpus.shortlist import shortlist_table, write_shortlist

# Source words and their translations; every word is a piece of the vocabulary below.
LEXICON = {"sun": "SOLEIL", "moon": "LUNE", "star": "ETOILE", "river": "RIVIERE",
           "stone": "PIERRE", "bird": "OISEAU"}


@pytest.fixture(scope="module")
def model_proto(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A vocabulary holding each word of LEXICON (both sides) as one piece, and <bt>."""
    path = tmp_path_factory.mktemp("shortlist") / "corpus.txt"
    path.write_text("\n".join([" ".join(LEXICON), " ".join(LEXICON.values())] * 200) + "\n")
    return train_sentencepiece([path], vocab_size=420, user_symbols=["<bt>"])


def piece(model_proto: bytes, word: str) -> int:
    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    ids = processor.encode(word)
    assert len(ids) == 1, (word, processor.encode(word, out_type=str))
    return ids[0]


def best(table: ShortlistTable, model_proto: bytes, word: str, count: int) -> list[int]:
    return table.candidates[piece(model_proto, word), :count].tolist()


def test_scripted_alignments_rank_each_source_pieces_links(model_proto):
    # "sun moon" always comes with "LUNE SOLEIL": only the links tell which is which.
    sources = ["sun moon"] * 3 + ["sun star"]
    targets = ["LUNE SOLEIL"] * 3 + ["ETOILE SOLEIL"]
    links = ["0-1 1-0"] * 3 + ["0-0 1-1"]  # the last pair links sun to ETOILE (a bad link)
    table = shortlist_table(sources, targets, links, model_proto)
    ids = {word: piece(model_proto, word) for word in LEXICON.values()}
    assert best(table, model_proto, "sun", 3) == [ids["SOLEIL"], ids["ETOILE"], 0]
    assert best(table, model_proto, "moon", 2) == [ids["LUNE"], 0]  # 0: PAD, no more
    assert best(table, model_proto, "star", 2) == [ids["SOLEIL"], 0]
    assert table.candidates.shape == (table.vocab_size, STORED_PER_PIECE)
    assert (table.statistic, table.pairs) == ("alignments", 4)
    assert table.frequent[:3].tolist() == [ids["SOLEIL"], ids["LUNE"], ids["ETOILE"]]
    assert table.always.tolist() == [0, 1, 2, 3, 4]  # PAD, UNK, BOS, EOS, <bt>


def test_a_link_outside_its_lines_words_is_ignored(model_proto):
    table = shortlist_table(["sun", "moon"], ["SOLEIL", "LUNE"], ["0-0 3-0 0-5", "0-0"],
                            model_proto)
    assert best(table, model_proto, "sun", 2) == [piece(model_proto, "SOLEIL"), 0]


def test_co_occurrence_ranks_by_dice_not_by_target_frequency(model_proto):
    # PIERRE is in every target; RIVIERE only with river: Dice prefers RIVIERE for river.
    sources = ["river"] * 2 + ["bird", "stone", "sun"]
    targets = ["RIVIERE PIERRE"] * 2 + ["OISEAU PIERRE", "PIERRE", "SOLEIL PIERRE"]
    table = shortlist_table(sources, targets, None, model_proto)
    ids = {word: piece(model_proto, word) for word in LEXICON.values()}
    assert best(table, model_proto, "river", 3) == [ids["RIVIERE"], ids["PIERRE"], 0]
    assert best(table, model_proto, "stone", 2) == [ids["PIERRE"], 0]
    assert table.statistic == "co-occurrence"
    assert table.frequent[0] == ids["PIERRE"]


def test_the_table_is_written_whole_from_shards_and_read_back(model_proto, tmp_path: Path,
                                                              monkeypatch):
    for name, src, tgt in (("a", "sun\nmoon\n", "SOLEIL\nLUNE\n"), ("b", "star\n", "ETOILE\n")):
        (tmp_path / f"{name}.src").write_text(src)
        (tmp_path / f"{name}.tgt").write_text(tgt)
    path = tmp_path / "shortlist.npz"
    written = write_shortlist(tmp_path, ["a", "b"], model_proto, False, path, 3)
    read = ShortlistTable.load(path)
    assert read.pairs == 3 and read.statistic == "co-occurrence"
    np.testing.assert_array_equal(read.candidates, written.candidates)
    np.testing.assert_array_equal(read.frequent, written.frequent)
    assert best(read, model_proto, "star", 1) == [piece(model_proto, "ETOILE")]
    monkeypatch.setattr("pipelines.corpus.shortlist.MAX_PAIRS", 2)  # every second pair
    sampled = write_shortlist(tmp_path, ["a", "b"], model_proto, False, path, 3)
    assert sampled.pairs == 2 and best(sampled, model_proto, "moon", 1) == [0]
    assert best(sampled, model_proto, "star", 1) == [piece(model_proto, "ETOILE")]
    (tmp_path / "bad.npz").write_bytes(b"not a table")
    with pytest.raises(ValueError, match="bad.npz: not a shortlist table"):
        ShortlistTable.load(tmp_path / "bad.npz")


def test_select_keeps_k_candidates_and_the_n_most_frequent_pieces():
    table = ShortlistTable(np.array([[5, 6, 7]] * 9, np.int32), np.array(
        [8, 4, 7, 0, 1, 2, 3, 5, 6], np.int32), np.array([0, 1, 2, 3], np.int32), "x", 1)
    shortlist = table.select(k=2, n=2)
    assert shortlist.table.tolist() == [[5, 6]] * 9
    assert shortlist.always.tolist() == [0, 1, 2, 3, 4, 8]


def test_batch_candidates_are_the_union_and_each_row_its_own():
    table = np.zeros([12, 2], np.int32)
    table[5], table[6] = [9, 10], [11, 0]
    shortlist = Shortlist(table, np.array([0, 1, 2, 3], np.int32))
    source = tf.constant([[5, 3, 0], [6, 3, 0]])  # pieces, EOS, PAD
    batch = batch_candidates(shortlist, source, 12)
    assert batch.ids.numpy().tolist() == [0, 1, 2, 3, 5, 6, 9, 10, 11]
    assert batch.rows.numpy().tolist() == [[1, 1, 1, 1, 1, 0, 1, 1, 0],
                                           [1, 1, 1, 1, 0, 1, 0, 0, 1]]
    forced = batch_candidates(shortlist, source, 12, forced_ids=tf.constant([[7], [0]]))
    assert forced.ids.numpy().tolist() == [0, 1, 2, 3, 5, 6, 7, 9, 10, 11]
    assert forced.rows.numpy()[:, 6].tolist() == [True, False]
    size = int(fixed_size(2, 4, batch=2, source=3, forced=0, vocab_size=12))
    fixed = batch_candidates(shortlist, source, 12, size=size)  # XLA's: padded with PAD
    assert fixed.ids.numpy().tolist() == [0, 1, 2, 3, 5, 6, 9, 10, 11] + [0] * (size - 9)
    assert fixed.rows.numpy()[:, 9:].sum() == 0
    index = to_candidate_index(tf.constant([[11, 5, 0]]), fixed.ids, 12)
    assert index.numpy().tolist() == [[8, 4, 0]]


@pytest.fixture(scope="module")
def search_setup(tmp_path_factory: pytest.TempPathFactory):
    """An untrained tiny model (one layer a side: a trace or an XLA compile costs about 60% of
    two layers') of export_helpers' 300-piece vocabulary, its sentences' source ids, and a
    random shortlist of 3 candidates per piece and 6 frequent pieces."""
    from export_helpers import SENTENCES, make_model, source_ids, train_spm
    from tiny_run import ONE_LAYER_A_SIDE

    model_proto = train_spm(tmp_path_factory.mktemp("search"))
    model = make_model(model_proto, seed=3, **ONE_LAYER_A_SIDE)
    vocab = model.model_config.vocab_size
    rng = np.random.default_rng(0)
    table = ShortlistTable(rng.integers(4, vocab, [vocab, STORED_PER_PIECE]).astype(np.int32),
                           rng.permutation(vocab).astype(np.int32),
                           np.arange(4, dtype=np.int32), "test", 0)
    return model, source_ids(model_proto, SENTENCES[:6]), table.select(k=3, n=6)


def graph_search(model, settings, shortlist: Shortlist | None):
    """decode_hypotheses in one graph for any batch (traced once: eager loops are slow)."""
    from keras_transformer.translate import decode_hypotheses

    return tf.function(lambda source: decode_hypotheses(model, source, settings,
                                                        shortlist=shortlist),
                       input_signature=[tf.TensorSpec([None, None], tf.int32)],
                       autograph=False)


@pytest.fixture(scope="module")
def beam_3_search(search_setup):
    """search_setup's model searching its shortlist with beam 3 (`graph_search`), traced once
    for the tests that compare other searches with it (about 2 CPU-s a trace)."""
    from keras_transformer.decoding_settings import DecodingSettings

    model, _, shortlist = search_setup
    return graph_search(model, DecodingSettings(beam_size=3), shortlist)


def candidates_of(shortlist: Shortlist, row: np.ndarray) -> set[int]:
    return {*shortlist.table[row].ravel().tolist(), *row.tolist(), *shortlist.always.tolist()}


def test_a_shortlisted_rows_translation_is_its_own_alone_and_among_companions(search_setup,
                                                                             beam_3_search):
    from keras_transformer.decoding_settings import DecodingSettings

    model, source, shortlist = search_setup
    search = beam_3_search
    ids, scores = (t.numpy() for t in search(source))
    full_ids, _ = graph_search(model, DecodingSettings(beam_size=3), None)(source)
    assert not np.array_equal(ids, full_ids.numpy())  # the shortlist changed translations
    for row in range(len(source)):
        alone_ids, alone_scores = search(source[row:row + 1])
        width = alone_ids.shape[2]
        np.testing.assert_array_equal(ids[row, :, :width], alone_ids.numpy()[0])
        assert not ids[row, :, width:].any()
        np.testing.assert_allclose(scores[row], alone_scores.numpy()[0], atol=1e-5)
        assert set(ids[row].ravel().tolist()) <= candidates_of(shortlist, source[row])


def test_a_shortlist_of_every_piece_searches_as_the_whole_vocabulary(search_setup):
    from keras_transformer.decoding_settings import DecodingSettings

    model, source, _ = search_setup
    vocab = model.model_config.vocab_size
    everything = Shortlist(np.zeros([vocab, 1], np.int32), np.arange(vocab, dtype=np.int32))
    settings = DecodingSettings(beam_size=2)
    ids, scores = graph_search(model, settings, everything)(source)
    full_ids, full_scores = graph_search(model, settings, None)(source)
    np.testing.assert_array_equal(ids.numpy(), full_ids.numpy())
    np.testing.assert_allclose(scores.numpy(), full_scores.numpy(), atol=1e-5)


def test_a_forced_prefix_or_term_outside_the_shortlist_is_produced(search_setup):
    from keras_transformer.decoding_settings import DecodingSettings
    from keras_transformer.translate import decode_hypotheses, decode_with_terms

    model, source, shortlist = search_setup
    outside = [piece for piece in range(4, model.model_config.vocab_size)
               if all(piece not in candidates_of(shortlist, row) for row in source)][:2]
    settings = DecodingSettings(beam_size=2)
    prefix = np.zeros([len(source), 2], np.int32)
    prefix[1] = outside  # row 1 forced to begin with two pieces no row's shortlist holds
    ids_spec = tf.TensorSpec([None, None], tf.int32)  # any batch, as the Translator's
    ids, _ = tf.function(lambda source, prefix: decode_hypotheses(
        model, source, settings, prefix, shortlist=shortlist), autograph=False,
        input_signature=[ids_spec, ids_spec])(source, prefix)
    assert ids.numpy()[1, 0, :2].tolist() == outside
    terms = np.zeros([len(source), 1, 2], np.int32)
    terms[2, 0] = outside
    decoded = tf.function(lambda source, terms: decode_with_terms(
        model, source, settings, terms, shortlist=shortlist), autograph=False,
        input_signature=[ids_spec, tf.TensorSpec([None, None, None], tf.int32)])(source, terms)
    assert decoded.term_found.numpy().all() and decoded.terms_fit.numpy().all()
    row = decoded.target_ids.numpy()[2].tolist()
    assert any(row[i:i + 2] == outside for i in range(len(row) - 1))


@pytest.mark.slow  # XLA compiles two programs (about 20 s)
def test_the_xla_search_keeps_the_graph_searchs_shortlist(search_setup):
    from keras_transformer.compiled_search import compiled_search, decode_hypotheses_compiled
    from keras_transformer.decoding_settings import DecodingSettings

    model, source, shortlist = search_setup
    settings = DecodingSettings(beam_size=2).for_model(model.model_config.max_length)
    search = compiled_search(model, settings, shortlist)
    compiled = tf.function(lambda rows: decode_hypotheses_compiled(
        model, rows, settings, search, 4, shortlist=shortlist), autograph=False)
    graph = graph_search(model, settings, shortlist)
    for rows in (source[:1], source[:3]):
        ids, scores = compiled(tf.constant(rows))
        graph_ids, graph_scores = graph(rows)
        np.testing.assert_array_equal(ids.numpy(), graph_ids.numpy())
        np.testing.assert_allclose(scores.numpy(), graph_scores.numpy(), atol=1e-4)


def test_an_ensemble_of_two_copies_searches_its_shortlist_as_the_model(search_setup,
                                                                       beam_3_search):
    """Each member's output kernel is cut to the batch's candidates (`search_kernel`)."""
    from keras_transformer.decoding_settings import DecodingSettings
    from keras_transformer.ensemble import Ensemble

    model, source, shortlist = search_setup
    ids, scores = beam_3_search(source)
    ensemble_ids, ensemble_scores = graph_search(Ensemble([model, model]),
                                                 DecodingSettings(beam_size=3),
                                                 shortlist)(source)
    np.testing.assert_array_equal(ensemble_ids.numpy(), ids.numpy())
    np.testing.assert_allclose(ensemble_scores.numpy(), scores.numpy(), rtol=1e-5)
