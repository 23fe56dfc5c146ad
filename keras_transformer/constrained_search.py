"""Beam search with hard lexical constraints (terminology) in the graph: every given term (a
sequence of target pieces) appears in each finished hypothesis. Same scoring function, cache
handling, batch-major rows and outputs as `keras_transformer.decoding.beam_search`.

    constrained_beam_search(fn, initial_cache, max_decode_lengths, terms, *, beam_size, bos_id,
                            eos_id, alpha=0.6, pad_id=0, stop="full", word_end=None)
        -> ids int32 [batch, beam, time], scores float32 [batch, beam], best first

`terms` int32 [batch, terms, pieces]: each term's pieces then `pad_id` (a row of `pad_id`: no
term). The algorithm is dynamic beam allocation (Post & Vilar, NAACL 2018), vectorized over
the batch as in Hu et al. (NAACL 2019) and fairseq's LexicallyConstrainedBeamSearch, chosen
over grid beam search (Hokamp & Liu 2017) because its beam stays `beam_size` wide whatever the
number of terms, so the model's cost per step does not grow with them (only the candidates'
bookkeeping, [batch, m, m] comparisons for m = beam * (3 + terms)):
* each hypothesis records, per term, the pieces of it matched so far; once all are, the next
  piece meets the term for good if it may end it (`word_end`: a piece that starts a word or
  punctuation, or EOS; so "hill" is not met by "hill" + "s"); otherwise, as any piece that
  breaks a partial match, it leaves the longest start of the term the output still ends with
  (`keras_transformer.terms.matched_after`: "a a b" is found in "a a a b"); a hypothesis may
  end (EOS or the maximum length) right after a term's last piece;
* the candidates of a step are the 2 * beam best extensions (as in unconstrained search), for
  every hypothesis the next piece of each of its unmet terms, and its EOS; duplicates dropped;
* EOS is not allowed while a hypothesis has unmet terms, nor is any candidate whose unmet
  pieces outnumber the steps left to its sentence's maximum length;
* candidates are banked by the term pieces they have matched; the beam takes them round
  robin over the banks, the fullest bank first, each bank's best first (an empty bank's slots
  go to the others). A hypothesis finishes from among the first beam_size taken (EOS, or the
  maximum length with every term met); the alive set is the first beam_size that do not end.
A sentence with no term searches exactly as `beam_search` (one bank in score order: the same
candidates, finished and alive sets), but beam size 1 is beam search too (not greedy search:
the same translations), and done sentences stay in the loop with their beams frozen (no
retiring). The stop rules are `beam_search`'s; "bound" takes the best alive hypothesis of any
bank. A sentence whose finished set is empty when it stops (a maximum length of 0, or terms
that could not be placed) returns its alive hypotheses; `keras_transformer.terms.terms_found`
tells.
Graph ops: core TF only (those of `beam_search`, GatherV2 with batch_dims, OneHot, Cumsum);
no TensorArray.

Example:
    terms = tf.constant([[[57, 12], [0, 0]]])  # [batch 1, terms, pieces]: one term, one none
    ids, scores = constrained_beam_search(fn, cache, max_lengths, terms, beam_size=4,
                                          bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID,
                                          word_end=word_end)  # [1, 4, time], [1, 4]
    terms_found(ids[:, 0], terms, PAD_ID, word_end)  # [[True, True]]: 57 12 in the best
"""
from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from keras_transformer.decoding_settings import check_stop_rule
from keras_transformer.search_primitives import (DEFAULTS, NEG_INF, Cache, SymbolsToLogitsFn,
                                                 best_hypotheses, cache_invariants,
                                                 length_penalty,
                                                 log_probs_step, reorder_cache,
                                                 sentences_done, start_beams)
from keras_transformer.terms import matched_after, prefix_overlaps, term_lengths
from keras_transformer.top_k import beam_top_k


class ConstrainedState(NamedTuple):
    step: tf.Tensor             # int32 []: tokens generated so far
    alive_seq: tf.Tensor        # int32 [batch, beam, step + 1], starting with BOS
    alive_log_probs: tf.Tensor  # float32 [batch, beam]
    progress: tf.Tensor         # int32 [batch, beam, terms]: pieces of each term matched, or
                                # its length + 1: met (and ended where it may end)
    finished_seq: tf.Tensor     # int32 [batch, beam, step + 1]
    finished_scores: tf.Tensor  # float32 [batch, beam], best first, NEG_INF where empty
    done: tf.Tensor             # bool [batch]: stopped, its beams frozen
    cache: Cache                # [batch * beam, ...], row b * beam + k follows alive beam k


class Candidates(NamedTuple):
    """A step's extensions [batch, m]: the alive beam extended, the token, the summed
    log-probability, whether it may be taken, and the term pieces matched [batch, m, terms]."""
    origin: tf.Tensor
    token: tf.Tensor
    log_prob: tf.Tensor
    valid: tf.Tensor
    progress: tf.Tensor


def constrained_beam_search(symbols_to_logits_fn: SymbolsToLogitsFn, initial_cache: Cache,
                            max_decode_lengths: tf.Tensor, terms: tf.Tensor, *, beam_size: int,
                            bos_id: int, eos_id: int, alpha: float = DEFAULTS.alpha,
                            pad_id: int = 0, stop: str = DEFAULTS.stop,
                            word_end: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
    """Beam search in which each sentence's terms appear in every finished hypothesis.

    Args:
        symbols_to_logits_fn: fn(ids [batch * beam, step + 1], step, cache) -> (logits, cache).
        initial_cache: nested dict of tensors [batch, ...], its per-row ones tiled here to
            [batch * beam, ...] (`search_primitives.start_beams`).
        max_decode_lengths: int32 [batch], each sentence's maximum output length.
        terms: int [batch, terms, pieces]: each term's pieces, then pad_id.
        beam_size, bos_id, eos_id, pad_id, alpha, stop: as `beam_search`'s.
        word_end: bool [vocab]: the pieces that may follow a term's last piece (those that
            start a word or punctuation, so that a term is met as whole words); None: any.

    Returns:
        ids int32 [batch, beam, time] (no BOS, `pad_id` after EOS) and their length-penalised
        scores float32 [batch, beam], best first.
    """
    check_stop_rule(stop)
    max_lengths = tf.cast(max_decode_lengths, tf.int32)  # [batch]
    terms = tf.pad(tf.cast(terms, tf.int32), [[0, 0], [0, 0], [0, 1]],
                   constant_values=pad_id)  # [batch, terms, pieces + 1]: a PAD column at least
    lengths = term_lengths(terms, pad_id)  # [batch, terms]
    overlaps = prefix_overlaps(terms)  # bool [batch, terms, pieces + 1, pieces + 1]
    batch = tf.shape(max_lengths)[0]
    alive_log_probs, finished_scores, cache = start_beams(initial_cache, batch, beam_size)
    state = ConstrainedState(
        step=tf.constant(0),
        alive_seq=tf.fill([batch, beam_size, 1], bos_id),
        alive_log_probs=alive_log_probs,
        progress=tf.zeros([batch, beam_size, tf.shape(terms)[1]], tf.int32),
        finished_seq=tf.fill([batch, beam_size, 1], pad_id),
        finished_scores=finished_scores,
        done=None,  # just below: `sentences_done` reads the other fields
        cache=cache)
    state = state._replace(done=sentences_done(state, max_lengths, alpha, stop))
    beams, seqs = tf.TensorShape([None, beam_size]), tf.TensorShape([None, beam_size, None])
    invariants = ConstrainedState(tf.TensorShape([]), seqs, beams, seqs, seqs, beams,
                                  tf.TensorShape([None]), cache_invariants(initial_cache))

    def step(state: ConstrainedState) -> tuple[ConstrainedState]:
        stepped = _step(state, symbols_to_logits_fn, (terms, lengths, overlaps), max_lengths,
                        word_end, beam_size=beam_size, eos_id=eos_id, alpha=alpha,
                        pad_id=pad_id)
        stepped = _keep_done(stepped, state, pad_id)
        return (stepped._replace(done=state.done | sentences_done(stepped, max_lengths, alpha,
                                                                  stop)),)

    (state,) = tf.while_loop(lambda state: ~tf.reduce_all(state.done), step, (state,),
                             shape_invariants=(invariants,))
    seq, scores = best_hypotheses(state.alive_seq, state.alive_log_probs, state.finished_seq,
                                  state.finished_scores, tf.minimum(state.step, max_lengths),
                                  alpha)  # [batch, beam, time + 1], [batch, beam]
    return seq[:, :, 1:], scores


def _keep_done(stepped: ConstrainedState, state: ConstrainedState,
               pad_id: int) -> ConstrainedState:
    """`stepped` with the beams of the sentences done before the step as they were (their
    sequences padded with pad_id)."""
    def kept(new: tf.Tensor, old: tf.Tensor) -> tf.Tensor:
        return tf.where(tf.reshape(state.done, [-1] + [1] * (new.shape.rank - 1)), old, new)

    def padded(seq: tf.Tensor) -> tf.Tensor:
        return tf.pad(seq, [[0, 0], [0, 0], [0, 1]], constant_values=pad_id)

    return stepped._replace(
        alive_seq=kept(stepped.alive_seq, padded(state.alive_seq)),
        alive_log_probs=kept(stepped.alive_log_probs, state.alive_log_probs),
        progress=kept(stepped.progress, state.progress),
        finished_seq=kept(stepped.finished_seq, padded(state.finished_seq)),
        finished_scores=kept(stepped.finished_scores, state.finished_scores))


def _step(state: ConstrainedState, symbols_to_logits_fn: SymbolsToLogitsFn,
          term_tables: tuple[tf.Tensor, tf.Tensor, tf.Tensor], max_lengths: tf.Tensor,
          word_end: tf.Tensor | None, *, beam_size: int, eos_id: int, alpha: float,
          pad_id: int) -> ConstrainedState:
    """Extends the alive set by one token, banked by term pieces matched; updates both sets.
    `term_tables`: the terms, their lengths and `prefix_overlaps`."""
    terms, lengths, _ = term_tables
    batch = tf.shape(state.alive_seq)[0]
    flat_seq = tf.reshape(state.alive_seq, [batch * beam_size, -1])  # [batch * beam, step + 1]
    log_probs, cache = log_probs_step(symbols_to_logits_fn, flat_seq, state.step, state.cache)
    vocab = tf.shape(log_probs)[1]
    unmet = state.progress < lengths[:, None]  # [batch, beam, terms]
    eos_barred = tf.one_hot(eos_id, vocab, on_value=NEG_INF, off_value=0.0)  # [vocab]
    log_probs = tf.reshape(log_probs, [batch, beam_size, vocab]) + tf.where(
        tf.reduce_any(unmet, axis=2)[:, :, None], eos_barred, 0.0)
    log_probs += state.alive_log_probs[:, :, None]  # [batch, beam, vocab]
    if word_end is None:
        word_end = tf.ones([vocab], tf.bool)
    candidates = _candidates(state, log_probs, term_tables, unmet, word_end,
                             beam_size=beam_size, eos_id=eos_id)
    length = state.step + 1
    matched = tf.minimum(candidates.progress, lengths[:, None])  # [batch, m, terms]
    unmet_pieces = tf.reduce_sum(lengths[:, None] - matched, axis=2)  # [batch, m]
    candidates = candidates._replace(valid=candidates.valid & (
        unmet_pieces <= max_lengths[:, None] - length))
    order = _allocation_order(candidates, tf.reduce_sum(matched, axis=2),
                              tf.reduce_sum(lengths, axis=1))  # [batch, m]
    taken = Candidates(*(tf.gather(part, order, batch_dims=1) for part in candidates))
    unmet_pieces = tf.gather(unmet_pieces, order, batch_dims=1)  # [batch, m]
    candidate_seq = tf.concat([tf.gather(state.alive_seq, taken.origin, batch_dims=1),
                               taken.token[:, :, None]], axis=2)  # [batch, m, step + 2]

    position = tf.range(tf.shape(order)[1])  # [m]
    ends = (taken.token == eos_id) | (length >= max_lengths[:, None])  # [batch, m]
    finishes = ends & taken.valid & (position < beam_size) & (unmet_pieces == 0)
    candidate_scores = tf.where(finishes, taken.log_prob / length_penalty(length, alpha),
                                NEG_INF)  # [batch, m]
    padded_finished_seq = tf.pad(state.finished_seq, [[0, 0], [0, 0], [0, 1]],
                                 constant_values=pad_id)  # [batch, beam, step + 2]
    finished_scores, finished_index = tf.math.top_k(
        tf.concat([state.finished_scores, candidate_scores], axis=1), k=beam_size)
    finished_seq = tf.gather(tf.concat([padded_finished_seq, candidate_seq], axis=1),
                             finished_index, batch_dims=1)  # [batch, beam, step + 2]

    continues = taken.valid & ~ends  # [batch, m]
    later = tf.where(continues, position, position + tf.size(position))  # [batch, m]
    _, alive_index = tf.math.top_k(-later, k=beam_size)  # [batch, beam]: the first in order
    alive_origin = tf.gather(taken.origin, alive_index, batch_dims=1)  # [batch, beam]
    cache_rows = tf.reshape(alive_origin + tf.range(batch)[:, None] * beam_size, [-1])
    return ConstrainedState(
        step=length,
        alive_seq=tf.gather(candidate_seq, alive_index, batch_dims=1),  # [batch, beam, step + 2]
        alive_log_probs=tf.gather(tf.where(continues, taken.log_prob, NEG_INF), alive_index,
                                  batch_dims=1),
        progress=tf.gather(taken.progress, alive_index, batch_dims=1),  # [batch, beam, terms]
        finished_seq=finished_seq,
        finished_scores=finished_scores,
        done=state.done,
        cache=reorder_cache(cache, state.cache, cache_rows))


def _candidates(state: ConstrainedState, log_probs: tf.Tensor,
                term_tables: tuple[tf.Tensor, tf.Tensor, tf.Tensor], unmet: tf.Tensor,
                word_end: tf.Tensor, *, beam_size: int, eos_id: int) -> Candidates:
    """The step's candidates [batch, m], m = 2 * beam + beam * terms + beam: the best
    extensions, each hypothesis's next piece of each unmet term, and its EOS (these two only
    for sentences with terms); a candidate met before in that list is not valid."""
    terms, lengths, overlaps = term_tables
    batch, vocab = tf.shape(log_probs)[0], tf.shape(log_probs)[2]
    best_log_probs, flat_index = beam_top_k(
        tf.reshape(log_probs, [batch, beam_size * vocab]), k=2 * beam_size)  # [batch, 2 * beam]
    best_origin = flat_index // vocab
    next_piece = tf.reduce_sum(terms[:, None] * tf.one_hot(
        state.progress, tf.shape(terms)[2], dtype=tf.int32), axis=3)  # [batch, beam, terms]
    has_terms = tf.reduce_any(lengths > 0, axis=1)[:, None, None]  # [batch, 1, 1]
    beams = tf.range(beam_size)[None, :, None]  # [1, beam, 1]
    origin = tf.concat([best_origin, tf.reshape(tf.broadcast_to(beams, tf.shape(next_piece)),
                                                [batch, -1]),
                        tf.tile(beams[:, :, 0], [batch, 1])], axis=1)  # [batch, m]
    token = tf.concat([flat_index - best_origin * vocab, tf.reshape(next_piece, [batch, -1]),
                       tf.fill([batch, beam_size], eos_id)], axis=1)  # [batch, m]
    next_log_probs = tf.gather(log_probs, tf.clip_by_value(next_piece, 0, vocab - 1),
                               batch_dims=2)  # [batch, beam, terms]
    log_prob = tf.concat([best_log_probs, tf.reshape(next_log_probs, [batch, -1]),
                          log_probs[:, :, eos_id]], axis=1)  # [batch, m]
    listed = tf.concat([tf.ones([batch, 2 * beam_size], tf.bool),
                        tf.reshape(unmet & has_terms, [batch, -1]),
                        tf.broadcast_to(has_terms[:, :, 0], [batch, beam_size])], axis=1)
    key = origin * vocab + token  # [batch, m]
    m = tf.shape(key)[1]
    earlier = tf.range(m)[None, :] < tf.range(m)[:, None]  # [m, m]: [i, j] j before i
    repeated = tf.reduce_any((key[:, :, None] == key[:, None, :]) & earlier & listed[:, None],
                             axis=2)  # [batch, m]: listed before
    valid = listed & ~repeated & (log_prob > NEG_INF / 2)  # [batch, m]

    matched = tf.gather(state.progress, origin, batch_dims=1)  # [batch, m, terms]
    ends_word = (tf.gather(word_end, tf.clip_by_value(token, 0, vocab - 1))
                 | (token == eos_id))[:, :, None]  # [batch, m, 1]
    length = lengths[:, None]  # [batch, 1, terms]
    progress = tf.where((matched > length) | (length == 0), matched,  # met: stays met
                        tf.where((matched == length) & ends_word, length + 1,
                                 matched_after(matched, token, terms, lengths, overlaps)))
    progress.set_shape(matched.shape)  # SelectV2's shape inference loses the rank here when
    # the batch is static, which the loop's shape invariants refuse
    return Candidates(origin, token, log_prob, valid, progress)


def _allocation_order(candidates: Candidates, bank: tf.Tensor,
                      total_pieces: tf.Tensor) -> tf.Tensor:
    """int32 [batch, m]: the candidates in the order the beam takes them (dynamic beam
    allocation, round robin over the banks): by rank within their bank (bank [batch, m]: the
    term pieces matched; by log-probability, then list order), then fullest bank first;
    invalid last."""
    log_prob, valid = candidates.log_prob, candidates.valid
    m = tf.shape(bank)[1]
    before = tf.range(m)[None, :] < tf.range(m)[:, None]  # [m, m]: [i, j] j listed before i
    better = valid[:, None, :] & (bank[:, None, :] == bank[:, :, None]) & (
        (log_prob[:, None, :] > log_prob[:, :, None])
        | ((log_prob[:, None, :] == log_prob[:, :, None]) & before))  # [batch, i, j]
    rank = tf.reduce_sum(tf.cast(better, tf.int32), axis=2)  # [batch, m]
    banks = total_pieces[:, None] + 1  # [batch, 1]
    priority = tf.cast(rank * banks + (banks - 1 - bank), tf.float32)  # lower first
    _, order = tf.math.top_k(tf.where(valid, -priority, NEG_INF), k=m)
    return order
