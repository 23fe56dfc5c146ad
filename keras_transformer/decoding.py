"""Beam search in the graph (tf.while_loop), independent of the model (greedy search, its
reference: keras_transformer.greedy).

The model is reached only through a scoring function::

    fn(ids, step, cache) -> (logits, new_cache)
      ids:    int32 [n, step + 1], the decoded prefix starting with BOS (a model reads ids[:, -1])
      step:   int32 scalar, the position of the last token of `ids` (0 for BOS)
      cache:  nested dict of tensors with leading dimension n; a tensor may grow along any
              axis from step to step (self-attention keys/values grown with tf.concat)
      logits: float [n, vocab] for the next token (any float dtype; scored in float32)

n is batch * beam (batch-major: row b * beam + k); the batch for greedy search.
`initial_cache` always has leading dimension batch; beam search tiles it.
`keras_transformer.translate.decode_sources` runs them over a Transformer.

    beam_search(fn, initial_cache, max_decode_lengths, *, beam_size, bos_id, eos_id,
                alpha=0.6, pad_id=0, stop="full")
        -> ids int32 [batch, beam, time], scores float32 [batch, beam], best first

`max_decode_lengths` int32 [batch] bounds each sentence's output length; a hypothesis that
reaches it is finished without EOS. Returned ids exclude BOS, include EOS where the
hypothesis ended with it and are padded with `pad_id` after it; `time` is the number of steps
the loop ran. Beam scores are summed
log-probabilities divided by the GNMT length penalty ((5 + length) / 6) ** alpha, length
counting the generated tokens including EOS (`length_penalty`).

Beam search keeps tensor2tensor's alive and finished sets of `beam_size` hypotheses, both fed
from the 2 * beam_size best extensions of the alive set; as in fairseq, a hypothesis is
finished only from among the beam_size best extensions. Beam size 1 is greedy search (as in
tensor2tensor and OpenNMT), its score length-penalised like a beam's. A sentence stops when it
reaches its maximum length, or by the `stop` rule: "full" (fairseq's, the default) when its
finished set is full; "bound" (tensor2tensor's) when, moreover, its best alive
log-probability divided by the penalty at its maximum length (a bound on anything the alive
set can still reach for alpha >= 0) cannot beat its worst finished score, which no later
step could then change (on the demo model "bound" decoded 1.3-1.6x slower at batch 32, for a
BLEU within 0.01: README, "Decoding speed"). A sentence that stops leaves the search: an
inner loop steps the active sentences until one is done, then its final beams
are written into the output and every tensor of the others (the cache too) is gathered to
the rows that remain, so a long sentence no longer keeps its batch's finished ones computing;
an outer loop repeats this until no sentence is active. With stop "bound", beam search is
exact when beam_size covers every extension at every step.
A finished slot that was never filled holds score NEG_INF; a sentence whose finished set is
empty (a maximum length of 0) returns its alive hypotheses.

Graph ops: While (nested in beam search), TopKV2 on float32 (and on int32: the chunked TopK of
`keras_transformer.top_k` orders its chunks), GatherV2 on flat batch * beam
indices, ConcatV2, Tile, Reshape, Pad, SelectV2, Where and TensorScatterUpdate (retiring
sentences), LogSoftmax, Pow and reductions; no TensorArray, no gather_nd,
no batch_dims. Every loop variable but the step has unknown dimensions except
beam, so the cache may grow and batch and source length may be unknown. A cache tensor that
the scoring function returns unchanged (the same tensor object: encoder-decoder keys/values,
the memory mask) keeps the tiled value of every beam of its sentence, so reordering beams
cannot change it and it is not gathered (about 10% of a step at batch 32); every other cache
tensor is reordered with one tf.gather per step. Cache tensors never pass through a Reshape
(ONNX reads a 0 in a runtime shape as "keep the input's dimension", which breaks on an empty
cache at time 0).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf

from keras_transformer.decoding_settings import STOP_RULES, DecodingSettings
from keras_transformer.greedy import (Cache, SymbolsToLogitsFn, cache_invariants, greedy_search,
                                      log_probs_step)
from keras_transformer.top_k import beam_top_k


NEG_INF = -1e9  # the score of an impossible hypothesis: finite, so no NaN from inf - inf
DEFAULTS = DecodingSettings()  # alpha and the stop rule, unless given


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


def length_penalty(length: tf.Tensor | int, alpha: float) -> tf.Tensor:
    """GNMT's ((5 + length) / 6) ** alpha (Wu et al., 2016), float32 of `length`'s shape."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def beam_search(symbols_to_logits_fn: SymbolsToLogitsFn, initial_cache: Cache,
                max_decode_lengths: tf.Tensor, *, beam_size: int, bos_id: int, eos_id: int,
                alpha: float = DEFAULTS.alpha, pad_id: int = 0,
                stop: str = DEFAULTS.stop) -> tuple[tf.Tensor, tf.Tensor]:
    """Beam search with the GNMT length penalty (section 6.1: beam 4, alpha 0.6).

    Args:
        symbols_to_logits_fn: fn(ids [batch * beam, step + 1], step, cache) -> (logits, cache).
        initial_cache: nested dict of tensors [batch, ...], tiled here to [batch * beam, ...].
        max_decode_lengths: int32 [batch], each sentence's maximum output length.
        beam_size: hypotheses kept per sentence (a Python int).
        bos_id, eos_id, pad_id: the start, end and padding ids.
        alpha: the length penalty exponent, >= 0 (0: plain log-probabilities).
        stop: when a sentence's search ends, one of STOP_RULES (module docstring).

    Returns:
        ids int32 [batch, beam, time] (no BOS, `pad_id` after EOS) and their length-penalised
        scores float32 [batch, beam], best first.
    """
    if stop not in STOP_RULES:
        raise ValueError(f"stop must be one of {', '.join(STOP_RULES)}; got {stop!r}")
    max_lengths = tf.cast(max_decode_lengths, tf.int32)  # [batch]
    if beam_size == 1:  # as in tensor2tensor and OpenNMT: beam 1 is greedy search
        ids, log_probs = greedy_search(symbols_to_logits_fn, initial_cache, max_lengths,
                                       bos_id=bos_id, eos_id=eos_id, pad_id=pad_id)
        lengths = _output_lengths(ids, max_lengths, eos_id)  # [batch]
        return ids[:, None], (log_probs / length_penalty(lengths, alpha))[:, None]
    batch = tf.shape(max_lengths)[0]
    first_beam_only = tf.constant([[0.0] + [NEG_INF] * (beam_size - 1)])  # [1, beam]
    beams = BeamState(
        step=tf.constant(0),
        alive_seq=tf.fill([batch, beam_size, 1], bos_id),
        alive_log_probs=tf.tile(first_beam_only, [batch, 1]),
        finished_seq=tf.fill([batch, beam_size, 1], pad_id),
        finished_scores=tf.fill([batch, beam_size], NEG_INF),
        cache=tf.nest.map_structure(lambda t: _tile_beams(t, beam_size), initial_cache))
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
        def none_done(beams: BeamState) -> tf.Tensor:
            return ~tf.reduce_any(beam_done(beams, state.max_lengths, alpha, stop))

        def step(beams: BeamState) -> tuple[BeamState]:
            return (_beam_step(beams, symbols_to_logits_fn, state.max_lengths,
                               beam_size=beam_size, eos_id=eos_id, alpha=alpha, pad_id=pad_id),)

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
    from the search: every tensor of the active sentences (their cache too) is gathered."""
    beams = state.beams
    done = beam_done(beams, state.max_lengths, alpha, stop)  # [active]
    has_finished = beams.finished_scores[:, 0] > NEG_INF / 2  # [active]
    alive_scores = beams.alive_log_probs / length_penalty(beams.step, alpha)  # [active, beam]
    seq = tf.where(has_finished[:, None, None], beams.finished_seq,
                   beams.alive_seq)  # [active, beam, step + 1]
    scores = tf.where(has_finished[:, None], beams.finished_scores, alive_scores)
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
            cache=tf.nest.map_structure(lambda t: tf.gather(t, keep_rows), beams.cache)),
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


def beam_done(state: BeamState | Any, max_lengths: tf.Tensor, alpha: float,
              stop: str) -> tf.Tensor:
    """bool [batch]: the sentence reached its maximum length, or its finished set is full and,
    with stop "bound", no alive hypothesis can still beat the worst finished one
    (tensor2tensor's bound). `state`: a BeamState, or any state with its step,
    alive_log_probs and finished_scores (`keras_transformer.static_search`)."""
    worst_finished = tf.reduce_min(state.finished_scores, axis=1)  # [batch], NEG_INF if any empty
    if stop == "full":
        return (state.step >= max_lengths) | (worst_finished > NEG_INF / 2)
    best_alive = state.alive_log_probs[:, 0] / length_penalty(max_lengths, alpha)  # [batch]
    return (state.step >= max_lengths) | (worst_finished > best_alive)


def _beam_step(state: BeamState, symbols_to_logits_fn: SymbolsToLogitsFn,
               max_lengths: tf.Tensor, *, beam_size: int, eos_id: int, alpha: float,
               pad_id: int) -> BeamState:
    """Extends the alive set by one token and updates both sets and the cache."""
    batch = tf.shape(state.alive_seq)[0]
    flat_seq = tf.reshape(state.alive_seq, [batch * beam_size, -1])  # [batch * beam, step + 1]
    log_probs, cache = log_probs_step(symbols_to_logits_fn, flat_seq, state.step, state.cache)
    vocab = tf.shape(log_probs)[1]
    log_probs = tf.reshape(log_probs, [batch, beam_size, vocab])
    log_probs += state.alive_log_probs[:, :, None]  # [batch, beam, vocab]
    candidate_log_probs, flat_index = beam_top_k(
        tf.reshape(log_probs, [batch, beam_size * vocab]), k=2 * beam_size)  # [batch, 2 * beam]
    origin = flat_index // vocab  # [batch, 2 * beam]: the alive beam extended
    tokens = flat_index - origin * vocab  # [batch, 2 * beam]
    candidate_seq = tf.concat([_gather_beams(state.alive_seq, origin), tokens[:, :, None]],
                              axis=2)  # [batch, 2 * beam, step + 2]

    length = state.step + 1
    ends = (tokens == eos_id) | (length >= max_lengths[:, None])  # [batch, 2 * beam]
    finishes = (ends & (tf.range(2 * beam_size) < beam_size)  # among the beam best
                & (candidate_log_probs > NEG_INF / 2) & (length <= max_lengths[:, None]))
    candidate_scores = tf.where(finishes, candidate_log_probs / length_penalty(length, alpha),
                                NEG_INF)  # [batch, 2 * beam]
    padded_finished_seq = tf.pad(state.finished_seq, [[0, 0], [0, 0], [0, 1]],
                                 constant_values=pad_id)  # [batch, beam, step + 2]
    finished_scores, finished_index = tf.math.top_k(
        tf.concat([state.finished_scores, candidate_scores], axis=1), k=beam_size)
    finished_seq = _gather_beams(tf.concat([padded_finished_seq, candidate_seq], axis=1),
                                 finished_index)  # [batch, beam, step + 2]

    alive_log_probs, alive_index = tf.math.top_k(
        tf.where(ends, NEG_INF, candidate_log_probs), k=beam_size)  # [batch, beam]
    alive_origin = _gather_beams(origin, alive_index)  # [batch, beam]
    cache_index = tf.reshape(_flat_index(alive_origin, beam_size), [-1])  # [batch * beam]
    return BeamState(
        step=length,
        alive_seq=_gather_beams(candidate_seq, alive_index),  # [batch, beam, step + 2]
        alive_log_probs=alive_log_probs,
        finished_seq=finished_seq,
        finished_scores=finished_scores,
        cache=tf.nest.map_structure(
            lambda new, old: new if new is old else tf.gather(new, cache_index),
            cache, state.cache))


def _tile_beams(tensor: tf.Tensor, beam_size: int) -> tf.Tensor:
    """[batch, ...] -> [batch * beam, ...], each row repeated beam_size times in place (a
    gather, not tile + reshape, so that an empty cache tensor converts to ONNX)."""
    rows = tf.range(tf.shape(tensor)[0] * beam_size) // beam_size  # [batch * beam]
    return tf.gather(tensor, rows)


def _flat_index(index: tf.Tensor, width: int | tf.Tensor) -> tf.Tensor:
    """[batch, m] indices into rows of `width` -> [batch, m] indices into batch * width rows."""
    return index + tf.range(tf.shape(index)[0])[:, None] * width


def _gather_beams(tensor: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
    """tensor [batch, n, ...] and index [batch, m] -> [batch, m, ...], by a flat tf.gather."""
    shape = tf.shape(tensor)
    flat = tf.reshape(tensor, tf.concat([[shape[0] * shape[1]], shape[2:]], axis=0))
    gathered = tf.gather(flat, tf.reshape(_flat_index(index, shape[1]), [-1]))
    return tf.reshape(gathered, tf.concat([tf.shape(index), shape[2:]], axis=0))
