"""The `translate_aligned` signature's graph code (`export.translator.Translator`): beam search,
then the word alignment of the best hypothesis from the alignment layer's cross-attention
(`keras_transformer.alignment.align_targets`), in one request.

    translate_aligned(text string [batch]) -> {"translation": string [batch],
        "score": float32 [batch], "alignment": string [batch]}

The translation and score are `translate`'s. The alignment is `I-J ...` (source word I aligned
to target word J, whitespace words of the line and of the translation), read from a
teacher-forced pass over the search's own pieces (its EOS left out), as CTranslate2's
`return_attention` reads them during its search. The `align` signature aligns a translation
that it tokenizes again: the same pairs wherever SentencePiece cuts the translation's text into
the pieces the search chose.
"""
from __future__ import annotations

from typing import Protocol

import tensorflow as tf

from export.word_alignment import starts_word
from keras_transformer.alignment import align_targets
from keras_transformer.model import Transformer
from keras_transformer.tokenizer import EOS_ID, PAD_ID, Tokenizer, vocabulary


class SearchingTranslator(Protocol):
    model: Transformer
    spm_model_proto: bytes

    def encode(self, text: tf.Tensor) -> tf.Tensor: ...

    def search(self, source_ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]: ...


def word_starts(spm_model_proto: bytes) -> tf.Tensor:
    """bool [vocab]: whether each piece of the SentencePiece model starts a word
    (`export.word_alignment.starts_word`)."""
    return tf.constant([starts_word(piece) for piece, _ in vocabulary(spm_model_proto)])


def search_alignment(model: Transformer, spm_model_proto: bytes, source_ids: tf.Tensor,
                     target_ids: tf.Tensor) -> tf.Tensor:
    """Graph code: string [batch], the `I-J ...` alignment of each searched translation;
    target_ids [batch, time]: a search's output (pieces, EOS where it ended, PAD)."""
    pieces = tf.where(target_ids == EOS_ID, PAD_ID, target_ids)  # [batch, time]
    return align_targets(model, source_ids, pieces, word_starts(spm_model_proto))


def translate_with_alignment(translator: SearchingTranslator,
                             text: tf.Tensor) -> dict[str, tf.Tensor]:
    """Graph code: `translate_aligned`'s outputs (module docstring)."""
    source_ids = translator.encode(text)  # [batch, source]
    target_ids, score = translator.search(source_ids)  # [batch, time]: pieces, EOS, PAD
    return {"translation": Tokenizer(translator.spm_model_proto).detokenize(target_ids),
            "score": score, "alignment": search_alignment(
                translator.model, translator.spm_model_proto, source_ids, target_ids)}
