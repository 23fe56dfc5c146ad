"""Beam search in the graph (tf.while_loop) over a scoring function, independent of the model
(its types, stop rules and length penalty: `keras_transformer.search_primitives`; a
Transformer's scoring function: `keras_transformer.translate`).

    beam_search(fn, initial_cache, max_decode_lengths, *, beam_size, bos_id, eos_id,
                alpha=0.6, pad_id=0, stop="full", vocab_size=None)
        -> ids int32 [batch, beam, time], scores float32 [batch, beam], best first

`max_decode_lengths` int32 [batch] bounds each sentence's output length; a hypothesis that
reaches it is finished without EOS. Returned ids exclude BOS, include EOS where the
hypothesis ended with it and are padded with `pad_id` after it; `time` is the number of steps
the loop ran. Beam scores are summed log-probabilities divided by the GNMT length penalty
((5 + length) / 6) ** alpha, length counting the generated tokens including EOS.

As tensor2tensor, the alive and finished sets of `beam_size` hypotheses are both fed from the
2 * beam_size best extensions of the alive set; as in fairseq, a hypothesis is finished only
from among the beam_size best extensions. Beam size 1 is greedy search
(`keras_transformer.greedy`, as in tensor2tensor and OpenNMT), its score length-penalised like
a beam's. A sentence that stops (`search_primitives.sentences_done`) leaves the search: an
inner loop steps the active sentences until one is done, then its final beams are written
into the output and every tensor of the others (the cache too) is gathered to the rows that
remain; an outer loop repeats this until no sentence is active. With stop "bound", beam
search is exact when beam_size covers every extension at every step.

Its graph converts to ONNX: no TensorArray (beams are gathered with tf.gather's batch
dimension, GatherND in ONNX), and no cache tensor passes through a Reshape. A step computes no
shape and no length penalty: what every step of a round reads (int64 reshape targets, row
offsets, maximum lengths, the logits' width under a shortlist, the penalty of each length) is
built before the round's inner loop (the op inventory and
the reasons: docs/decoding-speed.md, "Beam search in the graph: its ops and costs
(`keras_transformer/decoding.py`)").

Example:
    ids, scores = beam_search(fn, cache, max_lengths, beam_size=4, bos_id=BOS_ID,
                              eos_id=EOS_ID)  # [batch, 4, time], [batch, 4]
"""
from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from keras_transformer.greedy import greedy_search
from keras_transformer.decoding_settings import check_stop_rule
from keras_transformer.search_primitives import (DEFAULTS, NEG_INF, Cache, SymbolsToLogitsFn,
                                                 best_hypotheses, cache_invariants,
                                                 length_penalty, log_probs_step, map_cache,
                                                 penalty_table, reorder_cache,
                                                 sentences_done, start_beams)
from keras_transformer.top_k import beam_top_k


class BeamState(NamedTuple):
    step: tf.Tensor             # int32 []: tokens generated so far
    alive_seq: tf.Tensor        # int32 [batch, beam, step + 1], starting with BOS
    alive_log_probs: tf.Tensor  # float32 [batch, beam], best first
    finished_seq: tf.Tensor     # int32 [batch, beam, step + 1]
    finished_scores: tf.Tensor  # float32 [batch, beam], best first, NEG_INF where empty
    cache: Cache                # [batch * beam, ...], row b * beam + k follows alive beam k


class SearchState(NamedTuple):
    """Beam search over the sentences still active (`beams`: batch = active there) and the
    final beams of the sentences already done (`output_*`, rows of the whole batch)."""
    beams: BeamState
    sentence: tf.Tensor       # int32 [active]: each active sentence's row in the batch
    max_lengths: tf.Tensor    # int32 [active]
    output_seq: tf.Tensor     # int32 [batch, beam, width], starting with BOS; PAD after
    output_scores: tf.Tensor  # float32 [batch, beam]


def beam_search(symbols_to_logits_fn: SymbolsToLogitsFn, initial_cache: Cache,
                max_decode_lengths: tf.Tensor, *, beam_size: int, bos_id: int, eos_id: int,
                alpha: float = DEFAULTS.alpha, pad_id: int = 0, stop: str = DEFAULTS.stop,
                vocab_size: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
    """Beam search with the GNMT length penalty (section 6.1: beam 4, alpha 0.6).

    Args:
        symbols_to_logits_fn: fn(ids [batch * beam, step + 1], step, cache) -> (logits, cache).
        initial_cache: nested dict of tensors [batch, ...], its per-row ones tiled here to
            [batch * beam, ...] (`search_primitives.start_beams`).
        max_decode_lengths: int32 [batch], each sentence's maximum output length.
        beam_size: hypotheses kept per sentence (a Python int).
        bos_id, eos_id, pad_id: the start, end and padding ids.
        alpha: the length penalty exponent, >= 0 (0: plain log-probabilities).
        stop: when a sentence's search ends, one of STOP_RULES (`search_primitives`).
        vocab_size: int32 [], the logits' width where the function's output does not say it
            (a shortlist's union of candidates), so that no step computes it.

    Returns:
        ids int32 [batch, beam, time] (no BOS, `pad_id` after EOS) and their length-penalised
        scores float32 [batch, beam], best first.
    """
    check_stop_rule(stop)
    max_lengths = tf.cast(max_decode_lengths, tf.int32)  # [batch]
    if beam_size == 1:  # as in tensor2tensor and OpenNMT: beam 1 is greedy search
        ids, log_probs = greedy_search(symbols_to_logits_fn, initial_cache, max_lengths,
                                       bos_id=bos_id, eos_id=eos_id, pad_id=pad_id)
        lengths = _output_lengths(ids, max_lengths, eos_id)  # [batch]
        return ids[:, None], (log_probs / length_penalty(lengths, alpha))[:, None]
    batch = tf.shape(max_lengths)[0]
    alive_log_probs, finished_scores, cache = start_beams(initial_cache, batch, beam_size)
    beams = BeamState(
        step=tf.constant(0),
        alive_seq=tf.fill([batch, beam_size, 1], bos_id),
        alive_log_probs=alive_log_probs,
        finished_seq=tf.fill([batch, beam_size, 1], pad_id),
        finished_scores=finished_scores,
        cache=cache)
    state = _retire(SearchState(beams=beams, sentence=tf.range(batch), max_lengths=max_lengths,
                                output_seq=tf.fill([batch, beam_size, 1], pad_id),
                                output_scores=tf.zeros([batch, beam_size])),
                    beam_size=beam_size, alpha=alpha, pad_id=pad_id, stop=stop)  # length 0
    beams_shape = tf.TensorShape([None, beam_size])
    seqs_shape = tf.TensorShape([None, beam_size, None])
    beam_invariants = BeamState(tf.TensorShape([]), seqs_shape, beams_shape, seqs_shape,
                                beams_shape, cache_invariants(initial_cache))
    invariants = SearchState(beam_invariants, tf.TensorShape([None]), tf.TensorShape([None]),
                             seqs_shape, beams_shape)

    def steps_until_one_is_done(state: SearchState) -> tuple[SearchState]:
        invariants = _RoundInvariants.of(state.max_lengths, beam_size, alpha,
                                         vocab_size)  # outside the steps

        def none_done(beams: BeamState) -> tf.Tensor:
            return ~tf.reduce_any(sentences_done(beams, state.max_lengths, alpha, stop,
                                                 invariants.penalties))

        def step(beams: BeamState) -> tuple[BeamState]:
            return (_beam_step(beams, symbols_to_logits_fn, invariants, beam_size=beam_size,
                               eos_id=eos_id, pad_id=pad_id),)

        (beams,) = tf.while_loop(none_done, step, (state.beams,),
                                 shape_invariants=(beam_invariants,))
        return (_retire(state._replace(beams=beams), beam_size=beam_size, alpha=alpha,
                        pad_id=pad_id, stop=stop),)

    (state,) = tf.while_loop(lambda state: tf.size(state.sentence) > 0, steps_until_one_is_done,
                             (state,), shape_invariants=(invariants,))
    return state.output_seq[:, :, 1:], state.output_scores


def _retire(state: SearchState, *, beam_size: int, alpha: float, pad_id: int,
            stop: str) -> SearchState:
    """Writes the final beams of the sentences that are done into the output and drops them
    from the search: every tensor of the active sentences (their cache too: its rows, and its
    per-sentence tensors) is gathered."""
    beams = state.beams
    done = sentences_done(beams, state.max_lengths, alpha, stop)  # [active]
    seq, scores = best_hypotheses(  # [active, beam, step + 1], [active, beam]
        beams.alive_seq, beams.alive_log_probs, beams.finished_seq, beams.finished_scores,
        tf.minimum(beams.step, state.max_lengths), alpha)
    width = tf.shape(seq)[2] - tf.shape(state.output_seq)[2]
    output_seq = tf.pad(state.output_seq, [[0, 0], [0, 0], [0, width]],
                        constant_values=pad_id)  # [batch, beam, step + 1]
    retired = tf.where(done)[:, 0]  # int64 [retired]
    rows = tf.gather(state.sentence, retired)[:, None]  # [retired, 1]: rows of the batch
    keep = tf.cast(tf.where(~done)[:, 0], tf.int32)  # [active']
    keep_rows = tf.reshape(keep[:, None] * beam_size + tf.range(beam_size), [-1])
    return SearchState(
        beams=BeamState(
            step=beams.step,
            alive_seq=tf.gather(beams.alive_seq, keep),
            alive_log_probs=tf.gather(beams.alive_log_probs, keep),
            finished_seq=tf.gather(beams.finished_seq, keep),
            finished_scores=tf.gather(beams.finished_scores, keep),
            cache=map_cache(beams.cache, lambda t: tf.gather(t, keep_rows),
                            lambda t: tf.gather(t, keep))),
        sentence=tf.gather(state.sentence, keep),
        max_lengths=tf.gather(state.max_lengths, keep),
        output_seq=tf.tensor_scatter_nd_update(output_seq, rows, tf.gather(seq, retired)),
        output_scores=tf.tensor_scatter_nd_update(state.output_scores, rows,
                                                  tf.gather(scores, retired)))


def _output_lengths(ids: tf.Tensor, max_lengths: tf.Tensor, eos_id: int) -> tf.Tensor:
    """Generated tokens per row of ids [batch, time], EOS included; max length without EOS.
    An EOS is appended so that no reduction runs over an empty time axis (a batch whose
    maximum lengths are all 0)."""
    batch = tf.shape(ids)[0]
    ended = tf.concat([ids, tf.fill([batch, 1], eos_id)], axis=1)  # [batch, time + 1]
    first_eos = tf.argmax(tf.cast(tf.equal(ended, eos_id), tf.int32), axis=1,
                          output_type=tf.int32) + 1  # [batch], time + 1 without EOS
    return tf.minimum(first_eos, max_lengths)


class _RoundInvariants(NamedTuple):
    """What every step of a round reads and none changes (the active sentences' maximum
    lengths, reshape targets, row offsets, the length penalties), built before the round's
    inner loop, which captures them: no step computes a shape or a penalty (in ONNX they are
    read from outside its body)."""
    max_lengths: tf.Tensor  # int32 [batch, 1]
    rows: tf.Tensor         # int64 [2]: (batch * beam, -1), int64 as ONNX's Reshape takes it
    beams: tf.Tensor        # int64 [3]: (batch, beam, -1)
    extensions: tf.Tensor   # int64 [2]: (batch, -1)
    first_rows: tf.Tensor   # int32 [batch, 1]: each sentence's first row, b * beam
    penalties: tf.Tensor    # float32 [longest + 2]: the length penalty by length
    vocab_size: tf.Tensor | None  # int32 []: the logits' width, if the step's shape lacks it

    @classmethod
    def of(cls, max_lengths: tf.Tensor, beam_size: int, alpha: float,
           vocab_size: tf.Tensor | None = None) -> _RoundInvariants:
        batch = tf.size(max_lengths, out_type=tf.int64)
        return cls(max_lengths=tf.expand_dims(max_lengths, 1),
                   rows=tf.stack([batch * beam_size, -1]), beams=tf.stack([batch, beam_size, -1]),
                   extensions=tf.stack([batch, -1]),
                   first_rows=tf.expand_dims(tf.range(tf.size(max_lengths)), 1) * beam_size,
                   penalties=penalty_table(max_lengths, alpha), vocab_size=vocab_size)


def _beam_step(state: BeamState, symbols_to_logits_fn: SymbolsToLogitsFn,
               invariants: _RoundInvariants, *, beam_size: int, eos_id: int,
               pad_id: int) -> BeamState:
    """Extends the alive set by one token and updates both sets and the cache."""
    flat_seq = tf.reshape(state.alive_seq, invariants.rows)  # [batch * beam, step + 1]
    log_probs, cache = log_probs_step(symbols_to_logits_fn, flat_seq, state.step, state.cache)
    static_vocab = log_probs.shape[1]  # None under a shortlist: its union's size
    vocab = static_vocab or invariants.vocab_size
    if vocab is None:
        vocab = tf.shape(log_probs)[1]
    log_probs = tf.reshape(log_probs, invariants.beams)  # [batch, beam, vocab]
    log_probs.set_shape([None, beam_size, static_vocab])  # the captured shape tells none
    log_probs += tf.expand_dims(state.alive_log_probs, 2)  # [batch, beam, vocab]
    extensions = tf.reshape(log_probs, invariants.extensions)  # [batch, beam * vocab]
    extensions.set_shape([None, static_vocab and beam_size * static_vocab])
    candidate_log_probs, flat_index = beam_top_k(  # [batch, 2 * beam]
        extensions, k=2 * beam_size, width=None if static_vocab else beam_size * vocab)
    origin = flat_index // vocab  # [batch, 2 * beam]: the alive beam extended
    tokens = flat_index - origin * vocab  # [batch, 2 * beam]
    candidate_seq = tf.concat([_gather_beams(state.alive_seq, origin),
                               tf.expand_dims(tokens, 2)], axis=2)  # [batch, 2 * beam, step + 2]

    length = state.step + 1
    max_lengths = invariants.max_lengths  # [batch, 1]
    ends = (tokens == eos_id) | (length >= max_lengths)  # [batch, 2 * beam]
    finishes = (ends & (tf.range(2 * beam_size) < beam_size)  # among the beam best
                & (candidate_log_probs > NEG_INF / 2) & (length <= max_lengths))
    candidate_scores = tf.where(finishes,
                                candidate_log_probs / tf.gather(invariants.penalties, length),
                                NEG_INF)  # [batch, 2 * beam]
    padded_finished_seq = tf.pad(state.finished_seq, [[0, 0], [0, 0], [0, 1]],
                                 constant_values=pad_id)  # [batch, beam, step + 2]
    finished_scores, finished_index = tf.math.top_k(  # int64: the index ONNX's gather takes
        tf.concat([state.finished_scores, candidate_scores], axis=1), k=beam_size,
        index_type=tf.int64)
    finished_seq = _gather_beams(tf.concat([padded_finished_seq, candidate_seq], axis=1),
                                 finished_index)  # [batch, beam, step + 2]

    alive_log_probs, alive_index = tf.math.top_k(
        tf.where(ends, NEG_INF, candidate_log_probs), k=beam_size,
        index_type=tf.int64)  # [batch, beam]
    alive_origin = _gather_beams(origin, alive_index)  # [batch, beam]
    cache_index = tf.reshape(alive_origin + invariants.first_rows, [-1])  # [batch * beam]
    return BeamState(
        step=length,
        alive_seq=_gather_beams(candidate_seq, alive_index),  # [batch, beam, step + 2]
        alive_log_probs=alive_log_probs,
        finished_seq=finished_seq,
        finished_scores=finished_scores,
        cache=reorder_cache(cache, state.cache, cache_index))


def _gather_beams(tensor: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
    """tensor [batch, n, ...] and index [batch, m] -> [batch, m, ...] (one GatherV2 with a
    batch dimension)."""
    return tf.gather(tensor, index, batch_dims=1)
