"""tf.math.top_k over long rows (beam search's beam * vocab candidates), in two short passes.

    values, indices = chunked_top_k(scores [batch, n], k)  # as tf.math.top_k(scores, k)

TensorFlow's CPU TopK keeps a heap per row and compares every element, a large share of a
decoding step over beam x vocab candidates (docs/decoding-speed.md). Here each row is cut into
chunks of CHUNK elements; one vectorized max per chunk, the k chunks of largest maximum, then
TopK over those k * CHUNK elements only. An element among the k largest lies in one of those
chunks (k chunk maxima at least as large would otherwise rank it k + 1-th or lower), so the
result is TopK's, ties included: the chosen chunks are read in index order, and TopK returns the
lower index first among equal values at both passes.

Beam search calls `beam_top_k`: the chunked form, or TopK itself in graphs traced within
`plain_top_k()` (export/onnx.py: ONNX Runtime's TopK is fast, and the chunked form's extra
nodes slow model.onnx down: docs/decoding-speed.md).

Example:
    values, indices = chunked_top_k(scores, k=8)  # scores [batch, beam * vocab] -> [batch, 8]
    with plain_top_k():  # while tracing the graph to export to ONNX
        values, indices = beam_top_k(scores, k=8)  # tf.math.top_k itself
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

import tensorflow as tf

CHUNK = 64  # elements a chunk: 8,000-piece vocabularies x beam 4 -> 500 chunks a row
_PLAIN = contextvars.ContextVar("plain_top_k", default=False)


@contextlib.contextmanager
def plain_top_k() -> Iterator[None]:
    """Within it, graphs being traced take tf.math.top_k for `beam_top_k`."""
    token = _PLAIN.set(True)
    try:
        yield
    finally:
        _PLAIN.reset(token)


def beam_top_k(scores: tf.Tensor, k: int,
               width: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
    """tf.math.top_k(scores, k), chunked unless within `plain_top_k()` (`width`: as
    chunked_top_k's)."""
    return tf.math.top_k(scores, k=k) if _PLAIN.get() else chunked_top_k(scores, k, width)


def chunked_top_k(scores: tf.Tensor, k: int,
                  width: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
    """tf.math.top_k(scores, k) for float scores [batch, n], n >= k: the k largest values
    [batch, k], largest first, and their int32 indices [batch, k]. `width`: n (int32 []) where
    the scores' static shape lacks it, so that a search's step computes no shape."""
    n = scores.shape[1] or width  # static (no shortlist): the chunking is too
    if n is None:
        n = tf.shape(scores)[1]
    needed = (n + CHUNK - 1) // CHUNK
    chunks = max(needed, k) if isinstance(n, int) else tf.maximum(needed, k)  # k: TopK's k
    padded = tf.pad(scores, [[0, 0], [0, chunks * CHUNK - n]],
                    constant_values=float("-inf"))  # after every real element: ranked last
    blocks = tf.reshape(padded, [-1, chunks, CHUNK])  # [batch, chunks, CHUNK]
    _, best = tf.math.top_k(tf.reduce_max(blocks, axis=2), k=k)  # [batch, k]
    best = -tf.math.top_k(-best, k=k).values  # index order, so that ties keep TopK's order
    candidates = tf.reshape(tf.gather(blocks, best, batch_dims=1),
                            [-1, k * CHUNK])  # [batch, k * CHUNK]
    values, position = tf.math.top_k(candidates, k=k)  # [batch, k]
    return values, tf.gather(best, position // CHUNK, batch_dims=1) * CHUNK + position % CHUNK
