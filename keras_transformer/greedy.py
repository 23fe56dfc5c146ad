"""Greedy search in the graph (tf.while_loop), with the scoring function of
`keras_transformer.search_primitives` (fn(ids, step, cache) -> (logits, cache)): the most
likely token at each step, or the one a `pick` function draws (`keras_transformer.sampling`).
Beam search with beam size 1 runs it (its score then length-penalised).

    greedy_search(fn, initial_cache, max_decode_lengths, *, bos_id, eos_id, pad_id=0,
                  pick=None)
        -> ids int32 [batch, time] (no BOS, pad_id after EOS), summed log-probs float32 [batch]

Example:
    cache, max_lengths, _ = encode_for_search(model, source_ids, settings)  # translate.py
    ids, log_probs = greedy_search(fn, cache, max_lengths, bos_id=BOS_ID, eos_id=EOS_ID,
                                   pad_id=PAD_ID)  # ids [batch, time], log_probs [batch]
    # fn(ids [batch, step + 1], step, cache) -> (logits [batch, vocab], cache)
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import tensorflow as tf

from keras_transformer.search_primitives import (Cache, SymbolsToLogitsFn, cache_invariants,
                                                 log_probs_step)

PickFn = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]  # (log_probs, step) -> tokens


class GreedyState(NamedTuple):
    step: tf.Tensor       # int32 []: tokens generated so far
    seq: tf.Tensor        # int32 [batch, step + 1], starting with BOS
    log_probs: tf.Tensor  # float32 [batch]
    finished: tf.Tensor   # bool [batch]
    cache: Cache          # [batch, ...]


def greedy_search(symbols_to_logits_fn: SymbolsToLogitsFn, initial_cache: Cache,
                  max_decode_lengths: tf.Tensor, *, bos_id: int, eos_id: int,
                  pad_id: int = 0, pick: PickFn | None = None) -> tuple[tf.Tensor, tf.Tensor]:
    """Decodes the most likely token at each step (or the one `pick` chooses).

    Args:
        symbols_to_logits_fn: fn(ids [batch, step + 1], step, cache) -> (logits, cache).
        initial_cache: nested dict of tensors [batch, ...].
        max_decode_lengths: int32 [batch], each sentence's maximum output length.
        bos_id, eos_id, pad_id: the start, end and padding ids.
        pick: fn(log_probs float32 [batch, vocab], step) -> int32 tokens [batch]; the
            default takes the most likely (`keras_transformer.sampling` samples).

    Returns:
        ids int32 [batch, time] (no BOS, `pad_id` after EOS) and the summed log-probabilities
        float32 [batch].
    """
    max_lengths = tf.cast(max_decode_lengths, tf.int32)  # [batch]
    batch = tf.shape(max_lengths)[0]
    state = GreedyState(
        step=tf.constant(0),
        seq=tf.fill([batch, 1], bos_id),
        log_probs=tf.zeros([batch]),
        finished=max_lengths <= 0,
        cache=initial_cache)
    invariants = GreedyState(tf.TensorShape([]), tf.TensorShape([None, None]),
                             tf.TensorShape([None]), tf.TensorShape([None]),
                             cache_invariants(initial_cache))

    def body(state: GreedyState) -> tuple[GreedyState]:
        log_probs, cache = log_probs_step(symbols_to_logits_fn, state.seq, state.step, state.cache)
        if pick is None:
            tokens = tf.argmax(log_probs, axis=1, output_type=tf.int32)  # [batch]
            chosen = tf.reduce_max(log_probs, axis=1)  # [batch]
        else:
            tokens = pick(log_probs, state.step)  # [batch]
            chosen = tf.gather(log_probs, tokens, axis=1, batch_dims=1)  # [batch]
        tokens = tf.where(state.finished, pad_id, tokens)
        step_log_probs = tf.where(state.finished, 0.0, chosen)
        step = state.step + 1
        return (GreedyState(
            step=step,
            seq=tf.concat([state.seq, tf.expand_dims(tokens, 1)], axis=1),  # [batch, step + 1]
            log_probs=state.log_probs + step_log_probs,
            finished=state.finished | (tokens == eos_id) | (step >= max_lengths),
            cache=cache),)

    (state,) = tf.while_loop(lambda state: ~tf.reduce_all(state.finished), body, (state,),
                             shape_invariants=(invariants,))
    return state.seq[:, 1:], state.log_probs

