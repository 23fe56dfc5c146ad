"""Text -> the source ids the exported graphs read: `Translator.translate` and the TF Serving
warm-up requests of `translate_ids` encode lines so (`keras_transformer.tokenizer.Tokenizer`);
a multilingual model's lines first take their target-language token (`language_text`).

    encode_text(text string [batch], model_proto, max_source_length) -> int32 [batch, time]
    language_text(text string [batch], target_lang string [batch], languages) -> string [batch]

Each line's pieces, whitespace runs read as one space, cut to `max_source_length` tokens with
the EOS, then PAD; a blank line is its EOS alone. A guard line is encoded with every batch and
dropped, so that a batch of only blank lines (or none) converts to ONNX.

Example:
    ids = encode_text(tf.constant(["Hello.", ""]), spm_model_proto, max_source_length=128)
    # int32 [2, time]: [[pieces of "Hello.", EOS (3)], [3, PAD (0), ...]]
    language_text(tf.constant(["Hello.", " "]), tf.constant(["fr", "de"]), ("fr", "de"))
    # [b"<2fr> Hello.", b" "]
"""
from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from keras_transformer.languages import with_language
from keras_transformer.tokenizer import PAD_ID, SPACES, Tokenizer

# Encoded with every batch and dropped: tf2onnx's ragged-to-dense conversion divides by the
# longest row's length, so a batch of only blank lines (or none) must not reach it alone.
GUARD_LINE = "."


def encode_text(text: tf.Tensor, model_proto: bytes, max_source_length: int) -> tf.Tensor:
    """Strings [batch] -> source ids int32 [batch, time]: the pieces of each line, whitespace
    runs read as one space, cut to `max_source_length` tokens with the EOS (the source cut of
    `DecodingSettings.max_source_pieces`), then PAD (a blank line: EOS alone)."""
    guarded = tf.concat([[GUARD_LINE], text], axis=0)  # [1 + batch]
    ids = Tokenizer(model_proto).tokenize(guarded, add_eos=True, max_length=max_source_length)
    return ids.to_tensor(PAD_ID)[1:]  # [batch, time]


def language_text(text: tf.Tensor, target_lang: tf.Tensor,
                  languages: Sequence[str]) -> tf.Tensor:
    """Lines [batch] and their target languages [batch] -> the lines as a model translating
    into `languages` reads them: each after its language's token and a space
    (`keras_transformer.languages.with_language`, one text join: the tokenizer reads the token
    as one id, as training did); a blank line (no piece) as it is, so that it translates to
    nothing, as in a bilingual model. A code not among `languages` fails the request (its
    prefix gathered out of range: ONNX Runtime's "indices element out of data bounds"); the
    SavedModel's signatures name it first (`signatures.checked_languages`). The codes are
    compared one language at a time and a guard line (a blank one in the first language) is
    joined and dropped: onnxruntime-extensions' StringEqual neither broadcasts a [batch, 1]
    column against a row nor takes an empty batch."""
    prefixes = tf.constant([with_language("", language) for language in languages])  # [n]
    guarded_lang = tf.concat([tf.constant(languages[:1]), target_lang], axis=0)  # [1 + batch]
    guarded_text = tf.concat([[""], text], axis=0)  # [1 + batch]
    index = tf.fill(tf.shape(guarded_lang), len(languages))  # [1 + batch]: out of range
    for position in reversed(range(len(languages))):
        index = tf.where(tf.equal(guarded_lang, languages[position]), position, index)
    blank = tf.equal(tf.strings.regex_replace(guarded_text, SPACES, ""), "")  # [1 + batch]
    prefix = tf.where(blank, "", tf.gather(prefixes, index))  # [1 + batch]
    return tf.strings.join([prefix, guarded_text])[1:]  # [batch]
