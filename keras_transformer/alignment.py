"""Word alignments from the model's own cross-attention: for each target piece, the attention of
one decoder layer over the source pieces, averaged over its heads (or, for a model trained with
guided alignment, its head 0 alone: `ModelConfig.alignment_heads`), in a teacher-forced pass
over a given translation (as `keras_transformer.scoring` scores one), then summed over the
pieces of each word; a target word is aligned to the source word it attends to most.

    alignment_layer(config) -> the decoder layer whose cross-attention aligns
    alignment_head_count(config) -> how many of its heads, from head 0, are averaged
    target_attention(model, source_ids, target_ids) -> float32 [batch, target, source]
    piece_words(ids, word_marks) -> int32 [batch, time]: each piece's word, -1 for none
    word_alignment(attention, source_ids, target_ids, word_marks, skip_source_words=0)
        -> int32 [batch, words]
    align_targets(model, source_ids, target_ids, word_marks, skip_source_words=0)
        -> string [batch] "I-J ..."

The layer is the penultimate one (the only one of a one-layer decoder): of a Transformer's
layers, its averaged cross-attention agrees best with human alignments (Garg et al., 2019,
"Jointly Learning to Align and Translate with Transformer Models", table 1); guided-alignment
training (`keras_transformer.guided_alignment`) supervises its head 0, and such a model's
config says `alignment_heads=1`. The CTranslate2 export declares the same layer and heads
(`export.ctranslate2`).

Words are the decoded text's whitespace-separated words, counted from pieces as
`keras_transformer.words` says (by id: `word_marks`, each piece's `word_mark`); pieces of
whitespace alone, PAD, BOS and EOS belong to no word, so no word is aligned to the source's
EOS. A multilingual model's source begins with its target-language token
(`keras_transformer.languages`), a word of its own that is not the line's: with
`skip_source_words=1` it is aligned to nothing and the line's words count from 0.

Example:
    marks = tf.constant(vocabulary_word_marks(spm_model_proto))  # int32 [vocab] (words.py)
    align_targets(model, source_ids, target_ids, marks)  # [batch, source], [batch, target]
    # -> string [batch], e.g. [b"0-0 1-2 2-1", b""]
"""
from __future__ import annotations

import tensorflow as tf

from keras_transformer.config import ModelConfig
from keras_transformer.model import Transformer
from keras_transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID
from keras_transformer.words import WORD_SPACE, WORD_START


def alignment_layer(config: ModelConfig) -> int:
    """The index of the decoder layer whose cross-attention gives the alignments."""
    return max(config.num_decoder_layers - 2, 0)


def alignment_head_count(config: ModelConfig) -> int:
    """How many heads of `alignment_layer`, from head 0, are averaged: `alignment_heads`, all
    of them for 0 (CTranslate2's rule)."""
    return config.alignment_heads or config.num_heads


def target_attention(model: Transformer, source_ids: tf.Tensor,
                     target_ids: tf.Tensor) -> tf.Tensor:
    """float32 [batch, target, source]: row j is the attention of `alignment_layer` over the
    source, averaged over its first `alignment_head_count` heads, at the step that predicts
    target piece j (its input: BOS then the pieces before j). source_ids: pieces, EOS, PAD;
    target_ids: pieces then PAD."""
    target_ids = tf.cast(target_ids, tf.int32)
    batch = tf.shape(target_ids)[0]
    decoder_input = tf.concat([tf.fill([batch, 1], BOS_ID), target_ids[:, :-1]], axis=1)
    config = model.model_config
    layer = model.cross_attention_weights(tf.cast(source_ids, tf.int32), decoder_input,
                                          alignment_layer(config))  # [b, h, t, s]
    heads = layer[:, :alignment_head_count(config)]  # [batch, heads averaged, target, source]
    return tf.reduce_mean(tf.cast(heads, tf.float32), axis=1)  # [batch, target, source]


def piece_words(ids: tf.Tensor, word_marks: tf.Tensor) -> tf.Tensor:
    """int32 [batch, time]: the word (from 0) of each piece of `ids` [batch, time], -1 for PAD,
    BOS, EOS and a piece that is whitespace alone; `word_marks`: int32 [vocab], each piece's
    `keras_transformer.words.word_mark` (WORD_START 1, WORD_SPACE 2), whose `word_groups` is
    the same rule in Python."""
    ids = tf.cast(ids, tf.int32)
    marks = tf.gather(word_marks, ids)  # [batch, time]
    real = (ids != PAD_ID) & (ids != BOS_ID) & (ids != EOS_ID)  # [batch, time]
    text = real & (marks != WORD_SPACE)
    before = tf.pad(tf.where(real, marks, -1)[:, :-1], [[0, 0], [1, 0]], constant_values=-1)
    after_space = before == WORD_SPACE  # [batch, time]
    first = real & (tf.cumsum(tf.cast(real, tf.int32), axis=1, exclusive=True) == 0)
    starts = text & ((marks == WORD_START) | after_space | first)
    return tf.where(text, tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1, -1)


def word_alignment(attention: tf.Tensor, source_ids: tf.Tensor, target_ids: tf.Tensor,
                   word_marks: tf.Tensor, skip_source_words: int = 0) -> tf.Tensor:
    """int32 [batch, target words]: for each target word, the source word with the highest
    attention summed over both words' pieces; -1 past a row's last word and in a row whose
    source has no word. attention: float32 [batch, target, source] (`target_attention`).
    The source's first `skip_source_words` words belong to no word (a multilingual model's
    target-language token). The sums are float32 whatever the model's dtype, under the name
    scope `word_alignment`."""
    with tf.name_scope("word_alignment"):
        source_words = piece_words(source_ids, word_marks)  # [batch, source]
        source_words = tf.where(source_words >= skip_source_words,
                                source_words - skip_source_words, -1)  # [batch, source]
        target_words = piece_words(target_ids, word_marks)  # [batch, target]: attention's rows
        # At least one source column, for argmax where no source has a word (an empty batch's
        # maximum is the smallest int32).
        source_onehot = tf.one_hot(source_words, tf.maximum(tf.reduce_max(source_words) + 1, 1))
        target_onehot = tf.one_hot(target_words, tf.maximum(tf.reduce_max(target_words) + 1, 0))
        summed = tf.matmul(target_onehot, tf.matmul(attention, source_onehot),
                           transpose_a=True)  # [batch, target words, source words]
        best = tf.argmax(summed, axis=2, output_type=tf.int32)  # [batch, target words]
        words = tf.range(tf.shape(best)[1])[None]  # [1, target words]
        real = ((words <= tf.reduce_max(target_words, axis=1, keepdims=True))
                & (tf.reduce_max(source_words, axis=1, keepdims=True) >= 0))
        return tf.where(real, best, -1)


def align_targets(model: Transformer, source_ids: tf.Tensor, target_ids: tf.Tensor,
                  word_marks: tf.Tensor, skip_source_words: int = 0) -> tf.Tensor:
    """string [batch]: `I-J ...`, source word I aligned to target word J, a pair per target
    word in order ("" where either side has no word). source_ids: pieces, EOS, PAD;
    target_ids: pieces then PAD, of at most the model's max_length pieces (its positions:
    the steps that predict them; a search's longest output without its EOS), checked in the
    graph (InvalidArgumentError); `word_marks`: int32 [vocab]; the source's first
    `skip_source_words` words are not the line's (`word_alignment`)."""
    target_ids = tf.cast(target_ids, tf.int32)
    max_length = model.model_config.max_length
    pieces = tf.reduce_sum(tf.cast(target_ids != PAD_ID, tf.int32), axis=1)  # [batch]
    fits = tf.debugging.assert_less_equal(
        pieces, max_length, message=f"a target longer than the model aligns ({max_length} "
        f"pieces); the first value is the longest target's length")
    with tf.control_dependencies([fits]):
        # Pieces come first: at most max_length steps, and at least one (a row if time is 0).
        no_time = tf.maximum(0, 1 - tf.shape(target_ids)[1])
        target_ids = tf.pad(target_ids[:, :max_length], [[0, 0], [0, no_time]])
    attention = target_attention(model, source_ids, target_ids)  # [batch, time, source]
    source_words = word_alignment(attention, source_ids, target_ids, word_marks,
                                  skip_source_words)  # [batch, target words]
    target_words = tf.strings.as_string(tf.range(tf.shape(source_words)[1]))  # [words]
    pairs = tf.strings.join([tf.strings.as_string(source_words), "-",
                             tf.broadcast_to(target_words, tf.shape(source_words))])
    pairs = tf.ragged.boolean_mask(pairs, source_words >= 0)  # [batch, (words)]
    return tf.strings.reduce_join(pairs, axis=1, separator=" ")
