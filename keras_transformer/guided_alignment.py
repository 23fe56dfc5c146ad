"""Guided-alignment training (Garg et al., 2019, "Jointly Learning to Align and Translate with
Transformer Models"; OpenNMT-tf's `guided_alignment_type: ce`): one cross-attention head of the
alignment layer (`keras_transformer.alignment.alignment_layer`, head 0, the head CTranslate2's
`alignment_heads=1` reads) is trained towards word alignments computed beforehand.

    gold_alignment(source_ids, target_ids, links, word_marks) -> float32 [target, source]
    guided_alignment_loss(attention, gold) -> float32 scalar, summed over target pieces

The gold alignments are word pairs `I-J` (source word I, target word J, from 0; words as
`keras_transformer.alignment.piece_words` counts them). A piece pair is linked when its words
are; each target piece's row of links is normalized to a distribution over source pieces, and
the loss is the cross-entropy between that distribution and the head's attention, summed over
the target pieces that have a link (a piece without one adds nothing). The trainer divides the
sum, times `train.guided_alignment_weight`, by the update's real target tokens, as it divides
the translation loss (OpenNMT-tf divides by the target lengths too).

Example (one pair; attention rows as the model computes them for target_ids[1:]):
    gold = gold_alignment(source_ids, target_ids, "0-0 1-1", word_marks)   # [t, s]
    loss = guided_alignment_loss(attention, gold[None, 1:])
"""
from __future__ import annotations

import tensorflow as tf

from keras_transformer.alignment import piece_words

GUIDED_HEAD = 0  # the supervised head of the alignment layer
ATTENTION_FLOOR = 1e-9  # log's floor: a linked source piece with underflowed attention


def word_links(links: tf.Tensor) -> tf.Tensor:
    """int32 [links, 2] (source word, target word) from a scalar string `I-J I-J ...`."""
    items = tf.strings.split(links)  # [links]
    numbers = tf.strings.split(items, "-").flat_values  # [2 * links]
    return tf.reshape(tf.strings.to_number(numbers, tf.int32), [-1, 2])


def gold_alignment(source_ids: tf.Tensor, target_ids: tf.Tensor, links: tf.Tensor,
                   word_marks: tf.Tensor) -> tf.Tensor:
    """float32 [target, source], 1 where the words of target piece t and source piece s are
    linked in `links` (a scalar string `I-J ...`), 0 elsewhere and at BOS, EOS and PAD.
    source_ids: int [source] (pieces, EOS); target_ids: int [target] (BOS, pieces, EOS);
    word_marks: int32 [vocab] (`keras_transformer.words.word_marks`). Links naming a word a
    side does not have are left out."""
    source_words = piece_words(source_ids[None], word_marks)[0]  # [source], -1: no word
    target_words = piece_words(target_ids[None], word_marks)[0]  # [target]
    source_count = tf.maximum(tf.reduce_max(source_words) + 1, 1)
    target_count = tf.maximum(tf.reduce_max(target_words) + 1, 1)
    pairs = word_links(links)  # [links, 2]
    inside = ((pairs[:, 0] >= 0) & (pairs[:, 0] < source_count)
              & (pairs[:, 1] >= 0) & (pairs[:, 1] < target_count))
    pairs = tf.boolean_mask(pairs, inside)  # [kept, 2]
    words = tf.scatter_nd(tf.reverse(pairs, axis=[1]), tf.ones(tf.shape(pairs)[:1]),
                          tf.stack([target_count, source_count]))  # [target words, source words]
    words = tf.minimum(words, 1.0)  # a link given twice
    rows = tf.gather(words, tf.maximum(target_words, 0))  # [target, source words]
    pieces = tf.gather(rows, tf.maximum(source_words, 0), axis=1)  # [target, source]
    real = (tf.cast(target_words >= 0, tf.float32)[:, None]
            * tf.cast(source_words >= 0, tf.float32)[None, :])  # [target, source]
    return pieces * real


def guided_alignment_loss(attention: tf.Tensor, gold: tf.Tensor) -> tf.Tensor:
    """The cross-entropy between each target piece's row of `gold`, normalized to sum to 1,
    and its row of `attention`, summed over the pieces with a link: a float32 scalar.

    Args:
        attention: float [batch, target, source], the supervised head's attention (rows are
            distributions over the source).
        gold: float [batch, target, source], link weights (`gold_alignment`, rows aligned with
            attention's: those of the pieces the decoder predicts).
    """
    gold = tf.cast(gold, tf.float32)
    target = tf.math.divide_no_nan(gold, tf.reduce_sum(gold, axis=-1, keepdims=True))  # [b,t,s]
    attention = tf.maximum(tf.cast(attention, tf.float32), ATTENTION_FLOOR)
    return -tf.reduce_sum(tf.math.xlogy(target, attention))
