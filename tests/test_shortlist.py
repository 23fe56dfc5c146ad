"""The lexical shortlist: prepare's table from scripted alignments and co-occurrence
(pipelines/corpus/shortlist.py), and a batch's candidates in the graph
(keras_transformer/shortlist.py)."""
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from keras_transformer.shortlist import (STORED_PER_PIECE, Shortlist, ShortlistTable,
                                         batch_candidates, fixed_size, to_candidate_index)
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


def test_the_table_is_written_whole_from_shards_and_read_back(model_proto, tmp_path: Path):
    for name, src, tgt in (("a", "sun\nmoon\n", "SOLEIL\nLUNE\n"), ("b", "star\n", "ETOILE\n")):
        (tmp_path / f"{name}.src").write_text(src)
        (tmp_path / f"{name}.tgt").write_text(tgt)
    path = tmp_path / "shortlist.npz"
    written = write_shortlist(tmp_path, ["a", "b"], model_proto, False, path)
    read = ShortlistTable.load(path)
    assert read.pairs == 3 and read.statistic == "co-occurrence"
    np.testing.assert_array_equal(read.candidates, written.candidates)
    np.testing.assert_array_equal(read.frequent, written.frequent)
    assert best(read, model_proto, "star", 1) == [piece(model_proto, "ETOILE")]
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
    size = fixed_size(2, 4, batch=2, source=3, forced=0, vocab_size=12)
    fixed = batch_candidates(shortlist, source, 12, size=size)  # XLA's: padded with PAD
    assert fixed.ids.numpy().tolist() == [0, 1, 2, 3, 5, 6, 9, 10, 11] + [0] * (size - 9)
    assert fixed.rows.numpy()[:, 9:].sum() == 0
    index = to_candidate_index(tf.constant([[11, 5, 0]]), fixed.ids, 12)
    assert index.numpy().tolist() == [[8, 4, 0]]
