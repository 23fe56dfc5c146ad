"""Beam search compiled whole by XLA, for small batches (the SavedModel's `xla_max_batch`).

TensorFlow's executor spends about as long dispatching each small op of a decoding step as
computing it; at batch 1 that per-op cost is most of the time (docs/decoding-speed.md). Under
XLA the encoder, every step and the search around them become one compiled program
(`static_search`, fixed-size caches). XLA compiles one program per input shape, so sources
are padded to a multiple of SOURCE_BUCKET pieces and the batch to a power of 2; at larger
batches, where finished sentences would keep many rows computing, the retiring
`keras_transformer.decoding.beam_search` runs instead.

    decode_hypotheses_compiled(model, source_ids, settings, search, xla_max_batch,
                               graph_search=None)
        -> as keras_transformer.translate.decode_hypotheses
    search = compiled_search(model, settings)  # one per model, traced once per shape

Example:
    search = compiled_search(model, settings)  # once per model
    ids, scores = decode_hypotheses_compiled(model, source_ids, settings, search,
                                             xla_max_batch=8)
    # ids int32 [batch, beam, time], scores float32 [batch, beam], best first
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf

from keras_transformer.decoding_settings import DecodingSettings
from keras_transformer.model import Transformer
from keras_transformer.static_search import static_beam_search
from keras_transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.shortlist import fixed_size
from keras_transformer.shortlist_table import Shortlist
from keras_transformer.translate import (candidate_step, decode_hypotheses, encode_for_search,
                                         search_kernel, shortlisted, vocabulary_ids)

SOURCE_BUCKET = 16  # source pieces: widths are padded to a multiple (one compile per bucket)
SearchFn = Callable[[tf.Tensor], tuple[tf.Tensor, tf.Tensor, tf.Tensor]]
GraphSearchFn = Callable[[tf.Tensor], tuple[tf.Tensor, tf.Tensor]]  # source ids -> n-best


def compiled_search(model: Transformer, settings: DecodingSettings,
                    shortlist: Shortlist | None = None) -> SearchFn:
    """An XLA-compiled fn(source_ids [batch, width]) -> (ids int32 [batch, beam, length],
    scores float32 [batch, beam], steps int32 []) as `decode_hypotheses` gives them (with
    `shortlist`: its candidates, padded to a size fixed by the batch's shape), but padded to
    `length` output positions (the sources' limit) of which the first `steps` are used."""

    @tf.function(jit_compile=True, autograph=False)
    def search(source_ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        config = model.model_config
        length = settings.output_limit(tf.shape(source_ids)[1], config.max_length)  # static
        cache, max_lengths, empty = encode_for_search(model, source_ids, settings, length)
        size = None
        if shortlist is not None:  # known when XLA compiles (one program per shape)
            size = fixed_size(shortlist.table.shape[1], shortlist.always.shape[0],
                              tf.shape(source_ids)[0], tf.shape(source_ids)[1], 0,
                              config.vocab_size)
        cache, candidate_ids = shortlisted(model, source_ids, settings, cache, shortlist,
                                           size=size)
        output_kernel = search_kernel(model, candidate_ids)  # [d_model, vocab or U]
        ids, scores, steps = static_beam_search(
            lambda last_ids, step, cache: candidate_step(model, last_ids, step, cache,
                                                         output_kernel, candidate_ids,
                                                         fixed=True,
                                                         beam_size=settings.beam_size),
            cache, max_lengths, length=length, beam_size=settings.beam_size, bos_id=BOS_ID,
            eos_id=EOS_ID, alpha=settings.alpha, pad_id=PAD_ID, stop=settings.stop)
        return (tf.where(empty[:, None, None], PAD_ID, vocabulary_ids(ids, candidate_ids)),
                tf.where(empty[:, None], 0.0, scores), steps)

    return search


def decode_hypotheses_compiled(model: Transformer, source_ids: tf.Tensor,
                               settings: DecodingSettings, search: SearchFn,
                               xla_max_batch: int, graph_search: GraphSearchFn | None = None,
                               shortlist: Shortlist | None = None
                               ) -> tuple[tf.Tensor, tf.Tensor]:
    """`decode_hypotheses` (the same n-best lists), through `search` (`compiled_search`)
    for batches of 1 to `xla_max_batch` sources, else by `graph_search` (default:
    `decode_hypotheses` with `shortlist`, the graph's retiring beam search; also where the
    shortlist is switched off, as its fixed candidate size would not hold the vocabulary)."""
    source_ids = settings.cut_source_ids(tf.cast(source_ids, tf.int32),
                                         model.model_config.max_length)  # [batch, source]
    batch, width = tf.shape(source_ids)[0], tf.shape(source_ids)[1]

    def compiled() -> tuple[tf.Tensor, tf.Tensor]:
        rows = tf.bitwise.left_shift(1, _ceil_log2(batch))  # the next power of 2
        columns = tf.maximum(1, (width + SOURCE_BUCKET - 1) // SOURCE_BUCKET) * SOURCE_BUCKET
        padded = tf.pad(source_ids, [[0, rows - batch], [0, columns - width]])
        ids, scores, steps = search(padded)  # [rows, beam, length], [rows, beam], []
        return ids[:batch, :, :steps], scores[:batch]

    graph_search = graph_search or (lambda ids: decode_hypotheses(model, ids, settings,
                                                                  shortlist=shortlist))
    enabled = True if shortlist is None else shortlist.enabled  # off: U is the vocabulary
    return tf.cond((batch > 0) & (batch <= xla_max_batch) & enabled, compiled,
                   lambda: graph_search(source_ids))


def bucket_sources(max_source_length: int) -> list[np.ndarray]:
    """One source id row [1, width] (pieces, then EOS) for each width the compiled search
    pads a source of at most `max_source_length` tokens to: requests that compile each."""
    widths = range(SOURCE_BUCKET, max_source_length + SOURCE_BUCKET, SOURCE_BUCKET)
    return [np.array([[UNK_ID] * (width - 1) + [EOS_ID]], np.int32)
            for width in widths if width - SOURCE_BUCKET < max_source_length]


def _ceil_log2(n: tf.Tensor) -> tf.Tensor:
    """int32 ceil(log2(n)) for 1 <= n < 2**31: the number of bits of n - 1."""
    powers = tf.bitwise.left_shift(1, tf.range(31))  # [31]: 1, 2, 4, ...
    return tf.reduce_sum(tf.cast(powers <= n - 1, tf.int32))
