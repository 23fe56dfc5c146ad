"""The `translate_terms` signature's graph code (`export.translator.Translator`): target terms
tokenized in the graph with the export's own SentencePiece model, then constrained beam search
(`keras_transformer.translate.decode_with_terms`).

    translate_terms(text string [batch], terms string [batch, terms]) ->
        {"translation": string [batch], "score": float32 [batch],
         "terms_fit": bool [batch], "term_found": bool [batch, terms],
         "alignment": string [batch]}

`terms` holds each line's target terms, "" as padding (a row of "": as `translate`); a term
is met as whole words: its pieces, then a piece that starts a word or punctuation, or the end
(`ends_term`), so that "hill" is not met by "hills". A line
whose terms have more pieces in all than its output limit (source length + extra_length, at
most the model's positions) is translated without them, with `terms_fit` false: the request
does not fail, so that one line cannot fail a batch TF Serving merged; `term_found` tells, per
term, whether the translation holds its pieces (true for ""); `alignment` is each
translation's word alignment, as `translate_aligned` gives it (`export.aligned_translation`).
"""
from __future__ import annotations

import re
from typing import Protocol

import tensorflow as tf

from export.aligned_translation import search_alignment
from export.word_alignment import starts_word

from keras_transformer.decoding_settings import DecodingSettings
from keras_transformer.model import Transformer
from keras_transformer.tokenizer import PAD_ID, Tokenizer, vocabulary
from keras_transformer.translate import decode_with_terms

TERMS_SPEC = tf.TensorSpec([None, None], tf.string, name="terms")
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


class EncodingTranslator(Protocol):
    model: Transformer
    settings: DecodingSettings
    spm_model_proto: bytes

    def encode(self, text: tf.Tensor) -> tf.Tensor: ...


def translate_with_terms(translator: EncodingTranslator, text: tf.Tensor,
                         terms: tf.Tensor) -> dict[str, tf.Tensor]:
    """Graph code: `translate_terms`'s outputs (module docstring); a `terms` of another batch
    size than `text` fails the request (InvalidArgumentError)."""
    terms = tf.ensure_shape(terms, TERMS_SPEC.shape)  # TF Serving does not check
    same_batch = tf.debugging.assert_equal(tf.shape(text)[:1], tf.shape(terms)[:1], message=
                                           "text and terms need the same batch size")
    with tf.control_dependencies([same_batch]):
        source_ids = translator.encode(text)
    tokenizer = Tokenizer(translator.spm_model_proto)
    pieces = tokenizer.tokenize(tf.reshape(terms, [-1])).to_tensor(PAD_ID)  # [batch * terms, p]
    term_ids = tf.reshape(pieces, tf.concat([tf.shape(terms), tf.shape(pieces)[1:]], axis=0))
    word_end = tf.constant([ends_term(piece) for piece, _ in
                            vocabulary(translator.spm_model_proto)])  # bool [vocab]
    decoded = decode_with_terms(translator.model, source_ids, translator.settings, term_ids,
                                word_end)
    return {"translation": tokenizer.detokenize(decoded.target_ids), "score": decoded.score,
            "terms_fit": decoded.terms_fit, "term_found": decoded.term_found,
            "alignment": search_alignment(translator.model, translator.spm_model_proto,
                                          source_ids, decoded.target_ids)}
