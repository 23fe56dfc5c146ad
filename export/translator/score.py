"""The `score` signature's graph code and reader: given translations scored by teacher forcing
(`keras_transformer.scoring`), and `score_ids`, its ids form (the source of score.onnx).

    score(text string [batch], target string [batch]) -> {"score": float32 [batch],
        "log_prob": float32 [batch], "target_ids": int32 [batch, time],
        "token_log_probs": float32 [batch, time]}

target_ids are the translation's pieces then EOS, then PAD, and token_log_probs theirs (0 at
PAD); the score is the summed log-probability divided by the GNMT length penalty, as
`translate` scores its own translations. A target of more pieces than the model scores fails
the request (InvalidArgumentError), uncut.

Example:
    outputs = score_outputs(model, settings, source_ids, target_pieces)  # graph code
    scored_batch(translator.score, [("Hello.", "Bonjour.")])  # [PairScore(...)]
"""
from __future__ import annotations

from typing import Callable

import tensorflow as tf

from export.scores import Pair, PairScore, signature_scores
from keras_transformer.decoding_settings import DecodingSettings
from keras_transformer.model import Transformer
from keras_transformer.scoring import score_targets
from keras_transformer.tokenizer import EOS_ID


def score_outputs(model: Transformer, settings: DecodingSettings, source_ids: tf.Tensor,
                  target_pieces: tf.Tensor) -> dict[str, tf.Tensor]:
    """Graph code: source ids [batch, time] and target pieces [batch, time] (then PAD) ->
    `score`'s outputs."""
    scores = score_targets(model, source_ids, target_pieces, settings)
    positions = tf.range(tf.shape(scores.token_log_probs)[1])[None]  # [1, time + 1]
    ends = positions == scores.length[:, None] - 1
    target_ids = tf.where(ends, EOS_ID, tf.pad(tf.cast(target_pieces, tf.int32),
                                               [[0, 0], [0, 1]]))  # [batch, time + 1]
    return {"score": scores.score, "log_prob": scores.log_prob, "target_ids": target_ids,
            "token_log_probs": scores.token_log_probs}


def scored_batch(score: Callable[..., dict[str, tf.Tensor]], batch: list[Pair]
                 ) -> list[PairScore]:
    """`score(text=, target=)` (the function or its signature) of one batch of pairs."""
    texts, targets = zip(*batch)
    output = score(text=tf.constant(texts), target=tf.constant(targets))
    return signature_scores({key: value.numpy() for key, value in output.items()})
