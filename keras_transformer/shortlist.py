"""The lexical shortlist in a search: a batch's candidates (the union of its rows', each
row's own), and candidate indices <-> vocabulary ids (the table: `shortlist_table`).

A sentence's candidates are the k best of each of its source pieces, the source pieces
themselves (names and numbers copied), the n frequent pieces, the pieces always allowed, and
any piece it is forced to produce (a prefix's, a term's). A batch's search projects the
decoder's output onto the union of its rows' candidates only (U columns of the tied output
kernel instead of the vocabulary), and masks each row to its own candidates before the
softmax, so that a row's log-probabilities, hence its translation and score, are those it
has alone (batch invariance). The union is sorted by id, so the special ids (0 to 3) keep
their positions: the search runs in candidate indices, with PAD, BOS and EOS as themselves,
and `BatchCandidates.ids` maps its output back to vocabulary ids.

    shortlist = ShortlistTable.load(Path("runs/demo/vocab/shortlist.npz")).select(50, 100)
    batch = batch_candidates(shortlist, source_ids, vocab_size)  # ids [U], rows [batch, U]
    kernel = tf.transpose(tf.gather(model.embedding.table(), batch.ids))  # [d_model, U]

Example:
    batch = batch_candidates(Shortlist(tf.constant(table), tf.constant(always)),
                             tf.constant([[57, 3, 0]]), vocab_size=8000)
    batch.ids  # int32 [U]: 0, 1, 2, 3, ..., ascending
    batch.rows  # bool [1, U]: the row's own candidates
"""
from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from keras_transformer.shortlist_table import Shortlist
from keras_transformer.tokenizer import PAD_ID

# The name of the op that gathers the candidates' rows of the embedding matrix, to be
# transposed into the output kernel's columns (`keras_transformer.translate.search_kernel`): its
# output is no weight, which ONNX Runtime's int8 quantization must leave alone
# (`export.onnx_quantize`).
KERNEL_OP = "shortlist_kernel"


class BatchCandidates(NamedTuple):
    """A batch's candidates: ids int32 [U], ascending (the union of its rows'; the special
    ids first, at their own positions), rows bool [batch, U] (each row's own)."""
    ids: tf.Tensor
    rows: tf.Tensor


def batch_candidates(shortlist: Shortlist, source_ids: tf.Tensor, vocab_size: int,
                     forced_ids: tf.Tensor | None = None, size: tf.Tensor | None = None
                     ) -> BatchCandidates:
    """Graph code: the candidates of a batch of sources int32 [batch, source] (pieces, EOS,
    PAD), with each row's `forced_ids` int32 [batch, m] (pieces it must be able to produce,
    then PAD). `size` (XLA's fixed shapes): ids padded to exactly `size` with PAD, padding
    in no row (`size` at least the union's; `fixed_size` gives a bound)."""
    source_ids = tf.cast(source_ids, tf.int32)
    batch = tf.shape(source_ids)[0]
    table = tf.convert_to_tensor(shortlist.table, tf.int32)
    always = tf.convert_to_tensor(shortlist.always, tf.int32)
    pieces = [tf.gather(table, source_ids), source_ids]  # [batch, source, k], [batch, source]
    if forced_ids is not None:
        pieces.append(tf.cast(forced_ids, tf.int32))  # [batch, ...]
    pairs = tf.concat([_row_pairs(ids) for ids in pieces], axis=0)  # [m, 2]: (row, id)
    hits = tf.scatter_nd(pairs, tf.ones(tf.shape(pairs)[:1], tf.int32), [batch, vocab_size])
    allowed = tf.scatter_nd(always[:, None], tf.ones_like(always), [vocab_size]) > 0  # [vocab]
    allowed |= ~tf.convert_to_tensor(shortlist.enabled, tf.bool)  # off: every piece
    member = (hits > 0) | allowed[None]  # [batch, vocab]
    union = tf.reduce_any(member, axis=0) | allowed  # [vocab]
    if size is None:
        candidate_ids = tf.cast(tf.where(union)[:, 0], tf.int32)  # [U], ascending
        return BatchCandidates(candidate_ids, tf.gather(member, candidate_ids, axis=1))
    keys = tf.where(union, vocab_size - tf.range(vocab_size), -1)  # [vocab]: low ids high
    top = tf.math.top_k(keys, k=size).values  # [size]: the union ascending, then -1
    real = top >= 0  # [size]
    candidate_ids = tf.where(real, vocab_size - top, PAD_ID)  # [size]
    return BatchCandidates(candidate_ids,
                           tf.gather(member, candidate_ids, axis=1) & real[None])


def fixed_size(table_width: int, always: int, batch: tf.Tensor | int,
               source: tf.Tensor | int, forced: int, vocab_size: int) -> tf.Tensor:
    """A bound on the union of `batch_candidates` (int32 []) from shapes only, so that XLA
    knows it when it compiles: every row's table rows, source pieces and forced pieces, with
    the pieces always allowed (at most the vocabulary)."""
    return tf.minimum(vocab_size, batch * (source * (table_width + 1) + forced) + always)


def to_candidate_index(ids: tf.Tensor, candidate_ids: tf.Tensor, vocab_size: int) -> tf.Tensor:
    """Graph code: vocabulary ids (any shape, each among `candidate_ids` int32 [U]) -> their
    indices in it; PAD stays 0 (PAD is candidate 0)."""
    positions = tf.range(tf.shape(candidate_ids)[0])  # [U]
    first = (positions == 0) | (candidate_ids != PAD_ID)  # [U]: XLA's PAD padding is not
    inverse = tf.scatter_nd(candidate_ids[:, None], tf.where(first, positions, 0),
                            [vocab_size])  # [vocab]
    return tf.gather(inverse, tf.cast(ids, tf.int32))


def _row_pairs(ids: tf.Tensor) -> tf.Tensor:
    """int32 [batch, ...] -> int32 [m, 2]: (row, id) of each id. Not through a [batch, -1]
    reshape, which tf2onnx writes [0, -1] and ONNX Runtime cannot do for a batch of 0 rows."""
    rows = tf.range(tf.shape(ids)[0])[(...,) + (None,) * (ids.shape.rank - 1)]  # [batch, 1...]
    pairs = tf.stack([tf.broadcast_to(rows, tf.shape(ids)), ids], axis=-1)  # [batch, ..., 2]
    return tf.reshape(pairs, [-1, 2])
