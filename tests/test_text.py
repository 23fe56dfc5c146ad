"""export/text.py: the source ids of text that the exported graphs read, a multilingual
model's lines joined to their language's token; export/lines.py's Python twins."""
import re

import pytest
import sentencepiece as spm
import tensorflow as tf

from export.lines import by_language, language_line, line_languages
from export.text import encode_text, language_text
from export_helpers import EOS_ID, SENTENCES, train_spm
from keras_transformer.languages import missing_language_message, unknown_language_message


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


def test_a_multilingual_line_takes_its_languages_token_as_the_python_join_does():
    """language_text: each line after its language's token (a blank one as it is), in any
    batch (an empty one too); export.lines.language_line is its Python twin; an unknown code
    fails (the gather of its prefix)."""
    lines = ["Hello.", " \t", "moon", "", "x"]
    languages = ["fr", "de", "de", "fr", "pt-BR"]
    joined = language_text(tf.constant(lines), tf.constant(languages), ("fr", "de", "pt-BR"))
    assert [text.decode() for text in joined.numpy()] == \
        [language_line(line, language) for line, language in zip(lines, languages)] == \
        ["<2fr> Hello.", " \t", "<2de> moon", "", "<2pt-BR> x"]
    empty = language_text(tf.constant([], tf.string), tf.constant([], tf.string), ("fr",))
    assert empty.shape == [0]
    with pytest.raises(tf.errors.InvalidArgumentError):
        language_text(tf.constant(["a"]), tf.constant(["es"]), ("fr", "de"))


def test_line_languages_are_one_code_per_line_checked_and_grouped():
    assert line_languages("fr", 2, ("fr", "de")) == ["fr", "fr"]
    assert line_languages(["de", "fr"], 2, ("fr", "de")) == ["de", "fr"]
    assert line_languages(None, 2, ()) == [None, None]
    for target_lang, known, message in [
            ("es", ("fr",), unknown_language_message("es", ("fr",))),
            (None, ("fr",), missing_language_message(("fr",))),
            ("fr", (), unknown_language_message("fr", ())),
            (["fr"], ("fr",), "1 target languages for 2 lines")]:
        with pytest.raises(ValueError, match=re.escape(message)):
            line_languages(target_lang, 2, known)
    assert by_language(lambda lines, language: [f"{language}:{line}" for line in lines],
                       ["a", "b", "c"], ["fr", None, "fr"]) == ["fr:a", "None:b", "fr:c"]
