"""Beam search with one shape at every step, so that XLA compiles the whole loop
(`keras_transformer.compiled_search` runs it under `jit_compile`).

The search of `keras_transformer.decoding.beam_search` (the same candidates, finished and alive
sets, stop rules, length penalty and outputs: `keras_transformer.search_primitives`), but every
tensor keeps its shape: sequences live in buffers of `length` positions written at the step's
position, the scoring function gets a fixed-size cache (`Transformer.decode_step(...,
fixed=True)`), and a sentence that is done stays in the batch, frozen, until every sentence is
(no retiring: where finished sentences would keep many rows computing, at large batches,
`beam_search` is faster on TensorFlow's own kernels).

    static_beam_search(fn, initial_cache, max_decode_lengths, *, length, beam_size, bos_id,
                       eos_id, alpha=0.6, pad_id=0, stop="full")
        -> ids int32 [batch, beam, length], scores float32 [batch, beam], steps int32 []

fn(last_ids [n], step, cache) -> (logits [n, vocab], cache): n = batch * beam (row b * beam
+ k), `last_ids` the last token of each row (BOS at step 0). `ids` hold PAD after each
hypothesis (and after `steps`, the number of steps the loop ran: `beam_search` returns
ids[:, :, :steps]).

Example:
    ids, scores, steps = static_beam_search(
        lambda last_ids, step, cache: model.decode_step(last_ids, step, cache, fixed=True,
                                                        rows_per_sentence=4),
        cache, max_lengths, length=length, beam_size=4, bos_id=BOS_ID, eos_id=EOS_ID,
        pad_id=PAD_ID)  # cache: model.init_cache(memory, memory_mask, length)
    ids[:, :, :steps]  # int32 [batch, beam, steps], as beam_search returns them
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import tensorflow as tf

from keras_transformer.decoding_settings import check_stop_rule
from keras_transformer.search_primitives import (DEFAULTS, NEG_INF, Cache, best_hypotheses,
                                                 length_penalty, log_probs_step,
                                                 reorder_cache, sentences_done, start_beams)
from keras_transformer.top_k import beam_top_k

LastTokenFn = Callable[[tf.Tensor, tf.Tensor, Cache], tuple[tf.Tensor, Cache]]


class StaticBeams(NamedTuple):
    step: tf.Tensor             # int32 []: tokens generated so far
    last_ids: tf.Tensor         # int32 [batch * beam]: each alive row's last token
    alive_seq: tf.Tensor        # int32 [batch, beam, length]: tokens, PAD from `step` on
    alive_log_probs: tf.Tensor  # float32 [batch, beam], best first
    finished_seq: tf.Tensor     # int32 [batch, beam, length]
    finished_scores: tf.Tensor  # float32 [batch, beam], best first, NEG_INF where empty
    done: tf.Tensor             # bool [batch]: the sentence's search ended (state frozen)
    cache: Cache                # [batch * beam, ...], fixed shapes


def static_beam_search(symbols_to_logits_fn: LastTokenFn, initial_cache: Cache,
                       max_decode_lengths: tf.Tensor, *, length: tf.Tensor | int,
                       beam_size: int, bos_id: int, eos_id: int, alpha: float = DEFAULTS.alpha,
                       pad_id: int = 0, stop: str = DEFAULTS.stop
                       ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Beam search over fixed shapes: as `beam_search` (beam 1 included), within `length`
    output positions (max_decode_lengths are cut to it)."""
    check_stop_rule(stop)
    max_lengths = tf.minimum(tf.cast(max_decode_lengths, tf.int32), length)  # [batch]
    batch = tf.shape(max_lengths)[0]
    alive_log_probs, finished_scores, cache = start_beams(initial_cache, batch, beam_size)
    state = StaticBeams(
        step=tf.constant(0),
        last_ids=tf.fill([batch * beam_size], bos_id),
        alive_seq=tf.fill([batch, beam_size, length], pad_id),
        alive_log_probs=alive_log_probs,
        finished_seq=tf.fill([batch, beam_size, length], pad_id),
        finished_scores=finished_scores,
        done=max_lengths <= 0,
        cache=cache)
    positions = tf.range(length)  # [length]

    def step(beams: StaticBeams) -> tuple[StaticBeams]:
        log_probs, cache = log_probs_step(symbols_to_logits_fn, beams.last_ids, beams.step,
                                          beams.cache)  # [n, vocab]
        vocab = tf.shape(log_probs)[1]
        log_probs = tf.reshape(log_probs, [batch, beam_size, vocab])
        log_probs += beams.alive_log_probs[:, :, None]  # [batch, beam, vocab]
        candidate_log_probs, flat_index = beam_top_k(
            tf.reshape(log_probs, [batch, beam_size * vocab]), k=2 * beam_size)
        origin = flat_index // vocab  # [batch, 2 * beam]: the alive beam extended
        tokens = flat_index - origin * vocab  # [batch, 2 * beam]
        written = tf.cast(positions == beams.step, tf.int32)  # [length]: one-hot
        candidate_seq = (tf.gather(beams.alive_seq, origin, batch_dims=1) * (1 - written)
                         + tokens[:, :, None] * written)  # [batch, 2 * beam, length]

        length_now = beams.step + 1
        ends = (tokens == eos_id) | (length_now >= max_lengths[:, None])  # [batch, 2 * beam]
        finishes = (ends & (tf.range(2 * beam_size) < beam_size)
                    & (candidate_log_probs > NEG_INF / 2))
        candidate_scores = tf.where(
            finishes, candidate_log_probs / length_penalty(length_now, alpha), NEG_INF)
        finished_scores, finished_index = tf.math.top_k(
            tf.concat([beams.finished_scores, candidate_scores], axis=1), k=beam_size)
        finished_seq = tf.gather(tf.concat([beams.finished_seq, candidate_seq], axis=1),
                                 finished_index, batch_dims=1)  # [batch, beam, length]
        alive_log_probs, alive_index = tf.math.top_k(
            tf.where(ends, NEG_INF, candidate_log_probs), k=beam_size)  # [batch, beam]
        alive_origin = tf.gather(origin, alive_index, batch_dims=1)  # [batch, beam]
        cache_index = tf.reshape(alive_origin + tf.range(batch)[:, None] * beam_size, [-1])

        frozen = beams.done  # [batch]: a done sentence keeps its sets
        updated = StaticBeams(
            step=length_now,
            last_ids=tf.reshape(tf.gather(tokens, alive_index, batch_dims=1), [-1]),
            alive_seq=tf.where(frozen[:, None, None], beams.alive_seq,
                               tf.gather(candidate_seq, alive_index, batch_dims=1)),
            alive_log_probs=tf.where(frozen[:, None], beams.alive_log_probs, alive_log_probs),
            finished_seq=tf.where(frozen[:, None, None], beams.finished_seq, finished_seq),
            finished_scores=tf.where(frozen[:, None], beams.finished_scores, finished_scores),
            done=frozen,
            cache=reorder_cache(cache, beams.cache, cache_index))
        return (updated._replace(done=frozen | sentences_done(updated, max_lengths, alpha,
                                                              stop)),)

    (state,) = tf.while_loop(lambda beams: ~tf.reduce_all(beams.done), step, (state,),
                             maximum_iterations=length)
    seq, scores = best_hypotheses(  # alive ones only for a length-0 sentence
        state.alive_seq, state.alive_log_probs, state.finished_seq, state.finished_scores,
        tf.minimum(state.step, max_lengths), alpha)
    return seq, scores, state.step

