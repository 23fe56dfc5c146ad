"""export/text.py: the source ids of text that the exported graphs read."""
import sentencepiece as spm
import tensorflow as tf

from export.text import encode_text
from export_helpers import EOS_ID, SENTENCES, train_spm


def test_encode_gives_pieces_then_eos_then_pad_and_cuts_long_lines(tmp_path):
    model_proto = train_spm(tmp_path)
    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    lines = SENTENCES + ["", "   ", "moon\tsun \n star", "tree " * 2000]
    ids = encode_text(tf.constant(lines), model_proto, max_source_length=12)
    assert ids.dtype == tf.int32
    for line, row in zip(lines, ids.numpy()):
        pieces = processor.encode(" ".join(line.split()))[:11]
        assert list(row[:len(pieces) + 1]) == pieces + [EOS_ID]
        assert not row[len(pieces) + 1:].any()  # PAD after EOS
    assert ids.shape[1] == 12  # the 2,000-word line: 11 pieces, then EOS
