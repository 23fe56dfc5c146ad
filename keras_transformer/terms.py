"""Terms as target pieces, for terminology constraints (`keras_transformer.constrained_search`):

    term_lengths(terms, pad_id=0) -> int32 [batch, terms]
    terms_found(ids, terms, pad_id=0, word_end=None) -> bool [batch, terms]: each term in ids

`terms` int [batch, terms, pieces]: each term's pieces then `pad_id` (a row of `pad_id`: no
term).
"""
from __future__ import annotations

import tensorflow as tf


def term_lengths(terms: tf.Tensor, pad_id: int = 0) -> tf.Tensor:
    """int32 [batch, terms]: the pieces of each term (0: no term)."""
    return tf.reduce_sum(tf.cast(terms != pad_id, tf.int32), axis=2)


def terms_found(ids: tf.Tensor, terms: tf.Tensor, pad_id: int = 0,
                word_end: tf.Tensor | None = None) -> tf.Tensor:
    """bool [batch, terms]: whether the pieces of each term (terms [batch, terms, pieces]) occur
    in a row of ids [batch, time] (pad_id after the end), followed by pad_id or, with
    word_end (bool [vocab]), a piece that may end it; true for no term."""
    ids, terms = tf.cast(ids, tf.int32), tf.cast(terms, tf.int32)
    width, time = tf.shape(terms)[2], tf.shape(ids)[1]
    padded = tf.pad(ids, [[0, 0], [0, width + 1]], constant_values=pad_id)  # [batch, time + w + 1]
    starts = tf.range(time + 1)[:, None] + tf.range(width)[None]  # [time + 1, width]
    windows = tf.gather(padded, starts, axis=1)  # [batch, time + 1, width]
    same = tf.reduce_all((windows[:, None] == terms[:, :, None])
                         | (terms[:, :, None] == pad_id), axis=3)  # [batch, terms, time + 1]
    if word_end is not None:
        following = tf.gather(padded, tf.range(time + 1)[None, None]
                              + term_lengths(terms, pad_id)[:, :, None], axis=1,
                              batch_dims=1)  # [batch, terms, time + 1]
        same &= (following == pad_id) | tf.gather(
            word_end, tf.clip_by_value(following, 0, tf.size(word_end) - 1))
    return tf.reduce_any(same, axis=2)  # [batch, terms]
