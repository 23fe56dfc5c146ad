"""The `translate_terms` signature's graph code and reader: target terms tokenized in the
graph with the export's own SentencePiece model, then constrained beam search
(`keras_transformer.translate.decode_with_terms`).

    translate_terms(text string [batch], terms string [batch, terms]) ->
        {"translation": string [batch], "score": float32 [batch],
         "terms_fit": bool [batch], "term_found": bool [batch, terms],
         "alignment": string [batch]}

`terms` holds each line's target terms, "" as padding (a row of "": as `translate`); a term
is met as whole words: its pieces, then a piece that starts a word or punctuation, or the end
(`ends_term`), so that "hill" is not met by "hills". A line whose terms have more pieces in all
than its output limit (source length + extra_length, at most the model's positions) is
translated without them, with `terms_fit` false: the request does not fail, so that one line
cannot fail a batch TF Serving merged; `term_found` tells, per term, whether the translation
holds its pieces (true for ""); `alignment` is each translation's word alignment, as
`translate_aligned` gives it (`export.translator.align`).

Example:
    outputs = termed_translation(model, spm_model_proto, settings, source_ids, terms)
    termed_in_batches(translator.translate_terms, lines, [["maison"], []], batch_size=32)
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

import tensorflow as tf

from export.glossary import TermTranslation, padded_terms
from export.lines import translate_in_batches
from export.translator.align import search_alignment
from export.translator.translate import translation_outputs
from keras_transformer.decoding_settings import DecodingSettings
from keras_transformer.model import Transformer
from keras_transformer.shortlist_table import Shortlist
from keras_transformer.tokenizer import PAD_ID, Tokenizer, vocabulary
from keras_transformer.words import starts_word
from keras_transformer.translate import decode_with_terms

WORD_CHARACTER = re.compile(r"\w")
BYTE_PIECE = re.compile(r"<0x([0-9A-F]{2})>")


def ends_term(piece: str) -> bool:
    """Whether a piece may follow a term's last piece, the term staying whole words: it starts
    a word, or with a character that is not a letter, digit or underscore (punctuation, a
    control piece such as </s>, an ASCII byte such as <0x2E>); a byte of a multi-byte
    character does not (it may be a letter)."""
    byte = BYTE_PIECE.fullmatch(piece)
    first = chr(int(byte.group(1), 16)) if byte else piece[:1]
    return starts_word(piece) or (first < "\x80" and not WORD_CHARACTER.match(first))


def termed_translation(model: Transformer, spm_model_proto: bytes, settings: DecodingSettings,
                       source_ids: tf.Tensor, terms: tf.Tensor, skip_source_words: int = 0,
                       shortlist: Shortlist | None = None) -> dict[str, tf.Tensor]:
    """Graph code: `translate_terms`' outputs (module docstring) of source ids [batch, source]
    and each one's terms string [batch, terms] (`skip_source_words`: the alignment's,
    `export.translator.align`; `shortlist`: the search's, the terms' pieces among each
    sentence's candidates)."""
    tokenizer = Tokenizer(spm_model_proto)
    pieces = tokenizer.tokenize(tf.reshape(terms, [-1])).to_tensor(PAD_ID)  # [batch * terms, p]
    term_ids = tf.reshape(pieces, tf.concat([tf.shape(terms), tf.shape(pieces)[1:]], axis=0))
    word_end = tf.constant([ends_term(piece) for piece, _ in
                            vocabulary(spm_model_proto)])  # bool [vocab]
    decoded = decode_with_terms(model, source_ids, settings, term_ids, word_end, shortlist)
    return {**translation_outputs(spm_model_proto, decoded.target_ids, decoded.score),
            "terms_fit": decoded.terms_fit, "term_found": decoded.term_found,
            "alignment": search_alignment(model, spm_model_proto, source_ids,
                                          decoded.target_ids, skip_source_words)}


def termed_in_batches(translate_terms: Callable[..., dict[str, tf.Tensor]],
                      lines: Sequence[str], terms: Sequence[Sequence[str]],
                      batch_size: int) -> list[TermTranslation]:
    """`translate_terms(text=, terms=)` (the function or its signature) over `lines` and each
    one's target terms, in batches of similar lines; the results in order."""
    def translate_batch(batch: list[tuple[str, Sequence[str]]]) -> list[TermTranslation]:
        texts, batch_terms = zip(*batch)
        padded = padded_terms(batch_terms)
        output = translate_terms(text=tf.constant(texts, tf.string), terms=tf.constant(
            padded, tf.string, [len(texts), len(padded[0])]))
        found = output["term_found"].numpy()
        # "": an export made before translate_terms gave alignments (`translate` refuses
        # --glossary with --alignments or --markup on it: SavedModelTranslator.check_output)
        alignments = (output["alignment"].numpy() if "alignment" in output
                      else [b""] * len(texts))
        return [TermTranslation(text.decode("utf-8"), float(score), bool(fit),
                                tuple(bool(value) for value in row[:len(line_terms)]),
                                pairs.decode("utf-8"))
                for text, score, fit, row, line_terms, pairs in zip(
                    output["translation"].numpy(), output["score"].numpy(),
                    output["terms_fit"].numpy(), found, batch_terms, alignments)]

    return translate_in_batches(translate_batch, list(zip(lines, terms)), batch_size,
                                length=lambda pair: len(pair[0]))
