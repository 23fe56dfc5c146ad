"""Terms as target pieces, for terminology constraints (`keras_transformer.constrained_search`):

    term_lengths(terms, pad_id=0) -> int32 [batch, terms]
    terms_found(ids, terms, pad_id=0, word_end=None) -> bool [batch, terms]: each term in ids
    prefix_overlaps(terms) -> bool [batch, terms, pieces, pieces]: where a term repeats its start
    matched_after(matched, token, terms, lengths, overlaps) -> int32: pieces matched after one more

`terms` int [batch, terms, pieces]: each term's pieces then `pad_id` (a row of `pad_id`: no
term).

Example:
    terms = tf.constant([[[5, 6], [9, 0]]])    # [batch 1, terms 2, pieces 2]
    term_lengths(terms)                        # [[2, 1]]
    terms_found(tf.constant([[4, 5, 6, 3, 0]]), terms)  # [[True, False]]
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


def prefix_overlaps(terms: tf.Tensor) -> tf.Tensor:
    """bool [batch, terms, j, n] (j, n < pieces): whether the last n of a term's first j pieces
    are its first n (n <= j; n = 0: true); `matched_after`'s table, computed once per batch."""
    terms = tf.cast(terms, tf.int32)
    width = tf.shape(terms)[2]
    index = tf.range(width)
    shifted_index = index[:, None] + index[None]  # [s, i]: s + i
    shifted = tf.gather(terms, tf.minimum(shifted_index, width - 1), axis=2)  # [b, t, s, i]
    differs = (shifted != terms[:, :, None]) | (shifted_index >= width)  # [batch, terms, s, i]
    starts = tf.math.cumsum(tf.cast(differs, tf.int32), axis=3,
                            exclusive=True) == 0  # [batch, terms, s, n]: pieces s.. are the first n
    shift = index[:, None] - index[None]  # [j, n]: j - n
    flat = tf.reshape(starts, [tf.shape(terms)[0], tf.shape(terms)[1], width * width])
    return tf.gather(flat, tf.maximum(shift, 0) * width + index[None], axis=2) & (shift >= 0)


def matched_after(matched: tf.Tensor, token: tf.Tensor, terms: tf.Tensor, lengths: tf.Tensor,
                  overlaps: tf.Tensor) -> tf.Tensor:
    """int32 [batch, m, terms]: the pieces of each term matched once `token` (int [batch, m])
    follows an output whose last `matched` (int32 [batch, m, terms], at most the term's length
    in `lengths` [batch, terms], below `terms`' pieces: pad them a column) pieces are the term's
    first; `overlaps` is `prefix_overlaps(terms)`. The longest start of the term the
    output then ends with (the automaton of Knuth-Morris-Pratt: a broken match of a term that
    repeats its own start, "a a b" in "a a a b", keeps what still matches)."""
    terms = tf.cast(terms, tf.int32)
    width = tf.shape(terms)[2]
    rows = tf.minimum(tf.transpose(matched, [0, 2, 1]), width - 1)  # [batch, terms, m]
    still = tf.transpose(tf.gather(overlaps, rows, axis=2, batch_dims=2),
                         [0, 2, 1, 3])  # [batch, m, terms, n]: the last n pieces match
    n = tf.range(width)
    extends = (still & (terms[:, None] == tf.cast(token, tf.int32)[:, :, None, None])
               & (n < lengths[:, None, :, None]))  # [batch, m, terms, n]: piece n is token
    return tf.reduce_max(tf.where(extends, n + 1, 0), axis=3)
