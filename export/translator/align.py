"""The aligning signatures' graph code and readers: `align` (a given translation's word
alignment) and `translate_aligned` (beam search, then the word alignment of its best
hypothesis, in one request), both read from the alignment layer's cross-attention
(`keras_transformer.alignment.align_targets`).

    align(text string [batch], target string [batch]) -> {"alignment": string [batch]}
    translate_aligned(text string [batch]) -> {"translation": string [batch],
        "score": float32 [batch], "alignment": string [batch]}

An alignment is `I-J ...`: source word I aligned to target word J (whitespace words of the line
and of the translation), a pair per target word in order; "" where either side has no word.
`translate_aligned`'s translation and score are `translate`'s; its alignment is read from a
teacher-forced pass over the search's own pieces (its EOS left out), as CTranslate2's
`return_attention` reads them during its search. `align` aligns a translation that it
tokenizes again: the same pairs wherever SentencePiece cuts the translation's text into the
pieces the search chose. A target of more pieces than the model's positions fails the request
(InvalidArgumentError). A multilingual model's source words count from its line's first
(`skip_source_words` 1: its target-language token's word is left out).

Example:
    outputs = aligned_translation(model, spm_model_proto, source_ids, target_ids, score)
    translated_aligned_in_batches(translator.translate_aligned, lines, batch_size=32)
"""
from __future__ import annotations

from typing import Callable, Sequence

import tensorflow as tf

from export.lines import translate_in_batches
from export.translator.translate import translation_outputs
from keras_transformer.alignment import align_targets
from keras_transformer.model import Transformer
from keras_transformer.tokenizer import EOS_ID, PAD_ID
from keras_transformer.words import vocabulary_word_marks


def alignment_outputs(model: Transformer, spm_model_proto: bytes, source_ids: tf.Tensor,
                      target_pieces: tf.Tensor, skip_source_words: int = 0
                      ) -> dict[str, tf.Tensor]:
    """Graph code: `align`'s outputs of source ids [batch, time] and the given translations'
    pieces [batch, time] (then PAD)."""
    return {"alignment": align_targets(model, source_ids, target_pieces,
                                       tf.constant(vocabulary_word_marks(spm_model_proto)),
                                       skip_source_words)}


def search_alignment(model: Transformer, spm_model_proto: bytes, source_ids: tf.Tensor,
                     target_ids: tf.Tensor, skip_source_words: int = 0) -> tf.Tensor:
    """Graph code: string [batch], the `I-J ...` alignment of each searched translation;
    target_ids [batch, time]: a search's output (pieces, EOS where it ended, PAD)."""
    pieces = tf.where(target_ids == EOS_ID, PAD_ID, target_ids)  # [batch, time]
    return align_targets(model, source_ids, pieces,
                         tf.constant(vocabulary_word_marks(spm_model_proto)),
                         skip_source_words)


def aligned_translation(model: Transformer, spm_model_proto: bytes, source_ids: tf.Tensor,
                        target_ids: tf.Tensor, score: tf.Tensor, skip_source_words: int = 0
                        ) -> dict[str, tf.Tensor]:
    """Graph code: `translate_aligned`'s outputs of the sources [batch, source] and their best
    translations [batch, time] (pieces, EOS, PAD) and scores [batch]."""
    return {**translation_outputs(spm_model_proto, target_ids, score),
            "alignment": search_alignment(model, spm_model_proto, source_ids, target_ids,
                                          skip_source_words)}


def aligned_in_batches(align: Callable[..., dict[str, tf.Tensor]], translations: Sequence[str],
                       lines: Sequence[str], batch_size: int) -> list[tuple[str, str]]:
    """(translation, `I-J ...`) of each line and its given translation, in order:
    `align(text=, target=)` (the function or the `align` signature), in batches."""
    def align_batch(batch: list[tuple[str, str]]) -> list[tuple[str, str]]:
        texts, targets = zip(*batch)
        output = align(text=tf.constant(texts), target=tf.constant(targets))
        return [(target, text.decode("utf-8"))
                for target, text in zip(targets, output["alignment"].numpy())]

    return translate_in_batches(align_batch, list(zip(lines, translations)), batch_size,
                                length=lambda pair: len(pair[1]))


def translated_aligned_in_batches(translate_aligned: Callable[..., dict[str, tf.Tensor]],
                                  lines: Sequence[str], batch_size: int
                                  ) -> list[tuple[str, str]]:
    """(translation, `I-J ...`) of each line in order: `translate_aligned(text=)` (the
    function or its signature), in batches of similar lines."""
    def translate_batch(batch: list[str]) -> list[tuple[str, str]]:
        output = translate_aligned(text=tf.constant(batch, tf.string))
        return [(text.decode("utf-8"), pairs.decode("utf-8")) for text, pairs in
                zip(output["translation"].numpy(), output["alignment"].numpy())]

    return translate_in_batches(translate_batch, lines, batch_size)
