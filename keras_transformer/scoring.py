"""Given translations scored by a Transformer (teacher forcing): corpus filtering, reranking,
the confidence of a translation.

    score_targets(model, source_ids, target_ids, settings=DecodingSettings())
        -> TargetScores(token_log_probs, log_prob, score, length)

`source_ids` are sources as training saw them (pieces, EOS, then PAD), cut to
`settings.max_source_length` as the translator cuts them; `target_ids` are target pieces, then
PAD (no BOS or EOS: the EOS is scored after the last piece). A target has at most
`max_target_pieces(model max_length)` pieces (one position is the EOS's); `score_targets`
checks it in the graph (InvalidArgumentError naming the row's length), so nothing is cut.

The score is the one beam search gives (`keras_transformer.decoding`): the summed
log-probability divided by the GNMT length penalty of the pieces and the EOS, so that scoring a
translation of `decode_sources` gives back its score.

Example:
    scores = score_targets(model, source_ids, target_ids, settings)
    # source_ids [batch, source], target_ids [batch, target] ->
    # token_log_probs [batch, target + 1], log_prob, score [batch], length int32 [batch]
"""
from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from keras_transformer.search_primitives import length_penalty
from keras_transformer.decoding_settings import DecodingSettings, max_target_pieces
from keras_transformer.model import Transformer
from keras_transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID


class TargetScores(NamedTuple):
    token_log_probs: tf.Tensor  # float32 [batch, time + 1]: each piece's, then the EOS's; 0 after
    log_prob: tf.Tensor         # float32 [batch]: their sum
    score: tf.Tensor            # float32 [batch]: log_prob / the GNMT penalty of `length`
    length: tf.Tensor           # int32 [batch]: the pieces scored, EOS included


def target_lengths(target_ids: tf.Tensor, max_length: int) -> tf.Tensor:
    """int32 [batch]: the pieces of each row of `target_ids` (pieces, then PAD) and its EOS,
    checked in the graph to fit a model of `max_length` positions (InvalidArgumentError)."""
    length = tf.reduce_sum(tf.cast(target_ids != PAD_ID, tf.int32), axis=1) + 1
    longest = max_target_pieces(max_length)
    fits = tf.debugging.assert_less_equal(
        length - 1, longest, message=f"a target longer than the model accepts ({longest} "
        f"pieces, then EOS); the first value is the longest target's length + 1")
    with tf.control_dependencies([fits]):
        return tf.identity(length)


def score_targets(model: Transformer, source_ids: tf.Tensor, target_ids: tf.Tensor,
                  settings: DecodingSettings = DecodingSettings()) -> TargetScores:
    """The log-probability of each target given its source, piece by piece; eager or graph.

    Args:
        model: the Transformer.
        source_ids: int [batch, source]: pieces, EOS, then PAD.
        target_ids: int [batch, target]: pieces, then PAD.
        settings: its max_source_length cuts the sources, its alpha makes the score.
    """
    max_length = model.model_config.max_length
    source_ids = settings.cut_source_ids(tf.cast(source_ids, tf.int32), max_length)
    target_ids = tf.cast(target_ids, tf.int32)
    length = target_lengths(target_ids, max_length)  # [batch]
    labels = tf.pad(target_ids, [[0, 0], [0, 1]])  # [batch, time + 1]
    positions = tf.range(tf.shape(labels)[1])[None]  # [1, time + 1]
    labels = tf.where(positions == length[:, None] - 1, EOS_ID, labels)
    batch = tf.shape(labels)[0]
    decoder_input = tf.concat([tf.fill([batch, 1], BOS_ID), labels[:, :-1]], axis=1)
    logits = model({"source_ids": source_ids, "target_ids": decoder_input}, training=False)
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)  # [b, t + 1, vocab]
    vocab = tf.shape(log_probs)[2]
    flat = tf.reshape(tf.range(tf.size(labels)), tf.shape(labels)) * vocab + labels
    token_log_probs = tf.gather(tf.reshape(log_probs, [-1]), flat)  # [b, t + 1], ONNX's Gather
    token_log_probs = tf.where(positions < length[:, None], token_log_probs, 0.0)
    log_prob = tf.reduce_sum(token_log_probs, axis=1)
    return TargetScores(token_log_probs, log_prob,
                        log_prob / length_penalty(length, settings.alpha), length)
