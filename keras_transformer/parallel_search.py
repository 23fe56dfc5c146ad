"""A batch's beam search as `parts` independent searches that TensorFlow runs side by side.

TensorFlow's executor runs one search's ops one after another, and at decoding sizes an op
split across the intra-op threads gains little over one thread (docs/decoding-speed.md). Rows
dealt out in turn (row r to part r % parts, so that every part gets long and short sources
alike) make `parts` searches with no data between them: the executor's inter-op threads run
them at once, each op on one core when the intra-op pool has one thread (TF Serving's
--tensorflow_intra_op_parallelism=1). Beam search is batch-invariant, so the n-best lists are
those of one search over the whole batch; a part with no row (a batch smaller than `parts`)
searches an empty batch.

    search = in_parallel(fn, parts)
        fn(source_ids [batch, time], *rows) -> (ids int32 [batch, beam, time],
                                                scores float32 [batch, beam])
        rows: tensors [batch, ...] dealt out with the sources (None passes through)

Example:
    search = in_parallel(lambda source_ids, prefix_ids=None: decode_hypotheses(
        model, source_ids, settings, prefix_ids), parts=2)
    ids, scores = search(source_ids, prefix_ids)  # [batch, beam, time], [batch, beam]
"""
from __future__ import annotations

from typing import Callable

import tensorflow as tf

from keras_transformer.tokenizer import PAD_ID

Search = Callable[..., tuple[tf.Tensor, tf.Tensor]]


def in_parallel(search: Search, parts: int) -> Search:
    """`search` over `parts` interleaved sub-batches of its rows, merged in row order (graph
    code; `parts` 1: `search` itself)."""
    if parts < 1:
        raise ValueError(f"parts must be at least 1, got {parts}")
    if parts == 1:
        return search

    def parallel(source_ids: tf.Tensor, *rows: tf.Tensor | None
                 ) -> tuple[tf.Tensor, tf.Tensor]:
        results = [search(*(None if t is None else t[part::parts] for t in (source_ids, *rows)))
                   for part in range(parts)]  # part p: rows p, p + parts, ...
        width = tf.reduce_max(tf.stack([tf.shape(ids)[2] for ids, _ in results]))
        ids = tf.concat([tf.pad(ids, [[0, 0], [0, 0], [0, width - tf.shape(ids)[2]]],
                                constant_values=PAD_ID) for ids, _ in results],
                        axis=0)  # [batch, beam, width], part-major
        scores = tf.concat([scores for _, scores in results], axis=0)  # [batch, beam]
        order = _row_order(tf.shape(source_ids)[0], parts)  # [batch]
        return tf.gather(ids, order), tf.gather(scores, order)

    return parallel


def _row_order(batch: tf.Tensor, parts: int) -> tf.Tensor:
    """int32 [batch]: where row r of the batch sits in the parts' outputs laid end to end
    (part p holds ceil((batch - p) / parts) rows; row r is its part's (r // parts)-th)."""
    counts = tf.maximum(0, batch - tf.range(parts) + parts - 1) // parts  # [parts]
    starts = tf.cumsum(counts, exclusive=True)  # [parts]
    rows = tf.range(batch)  # [batch]
    return tf.gather(starts, rows % parts) + rows // parts
