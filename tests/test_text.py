"""export/text.py: in-graph encoding and decoding against SentencePiece itself."""
import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from export.text import DecodingTables, decode_ids, encode_text
from export_helpers import EOS_ID, PAD_ID, SENTENCES, train_spm


@pytest.fixture(scope="module")
def model_proto(tmp_path_factory) -> bytes:
    return train_spm(tmp_path_factory.mktemp("text"))


def test_encode_matches_sentencepiece_then_eos_and_cuts_long_lines(model_proto):
    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    lines = SENTENCES + ["", "   ", "moon\tsun \n star", "tree " * 2000]
    ids = encode_text(tf.constant(lines), model_proto, max_length=12).numpy()
    for line, row in zip(lines, ids):
        pieces = processor.encode(" ".join(line.split()))[:11]
        assert list(row[:len(pieces) + 1]) == pieces + [EOS_ID]
        assert not row[len(pieces) + 1:].any()  # PAD after EOS
    assert ids.shape[1] == 12  # the 2,000-word line: 11 pieces, then EOS


def test_decode_matches_sentencepiece_on_random_ids(model_proto):
    """Random pieces, byte pieces included (invalid UTF-8 gives U+FFFD), decode row by row as
    SentencePiece decodes them, up to the first EOS; generated line breaks become spaces."""
    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    tables = DecodingTables.of(model_proto)
    line_break, carriage_return, space = tables.line_break, tables.carriage_return, tables.space
    rng = np.random.default_rng(0)
    ids = rng.integers(4, processor.get_piece_size(), size=(64, 12)).astype(np.int32)
    ids[:8] = rng.integers(4, 4 + 256, size=(8, 12))  # byte pieces only
    ids[8, 3] = EOS_ID
    ids[9, 5:] = PAD_ID
    ids[10, 2], ids[10, 4] = line_break, carriage_return
    ids[11] = PAD_ID
    decoded = [text.decode("utf-8") for text in decode_ids(tf.constant(ids), model_proto).numpy()]
    for row, text in zip(ids, decoded):
        row = list(row[:list(row).index(EOS_ID)] if EOS_ID in row else row)
        row = [space if i in (line_break, carriage_return) else i for i in row]
        assert text == processor.decode(row)
    assert decoded[11] == "" and "\n" not in "".join(decoded)
    assert "\ufffd" in "".join(decoded[:8])


def test_encode_then_decode_gives_the_text_back(model_proto):
    ids = encode_text(tf.constant(SENTENCES), model_proto, max_length=64)
    assert [t.decode("utf-8") for t in decode_ids(ids, model_proto).numpy()] == SENTENCES


def test_a_model_without_byte_fallback_is_refused(tmp_path):
    (tmp_path / "text").write_text("abc def\n" * 50)
    spm.SentencePieceTrainer.train(input=str(tmp_path / "text"), model_prefix=str(tmp_path / "m"),
                                   vocab_size=10, minloglevel=2)
    with pytest.raises(ValueError, match="byte-fallback"):
        DecodingTables.of((tmp_path / "m.model").read_bytes())
