"""What every search of keras_transformer shares (greedy, beam, static, constrained): the
scoring function's type, a step's log-probabilities, the GNMT length penalty, a beam search's
start, its stop rules and its result.

The model is reached only through a scoring function::

    fn(ids, step, cache) -> (logits, new_cache)
      ids:    int32 [n, step + 1], the decoded prefix starting with BOS (a model reads ids[:, -1])
      step:   int32 scalar, the position of the last token of `ids` (0 for BOS)
      cache:  nested dict of tensors with leading dimension n; a tensor may grow along any
              axis from step to step (self-attention keys/values grown with tf.concat);
              what sits under a SENTENCE_KEY entry (at any depth) has leading dimension
              batch instead: one row per sentence, read by all its beams alike (the
              memory's keys and values, its mask), never tiled nor reordered
      logits: float [n, vocab] for the next token (any float dtype; scored in float32)

n is batch * beam (batch-major: row b * beam + k); the batch for greedy search. A search's
`initial_cache` has leading dimension batch; `start_beams` tiles its per-row tensors to the
beams.

A beam search keeps an alive and a finished set of `beam_size` hypotheses per sentence. A
sentence stops when it reaches its maximum length, or by the `stop` rule (`sentences_done`,
one of `decoding_settings.STOP_RULES`): "full" (fairseq's) when its finished set is full;
"bound" (tensor2tensor's) when, moreover, its best alive log-probability divided by the
penalty at its maximum length (a bound on anything the alive set can still reach for alpha
>= 0) cannot beat its worst finished score; "best" as soon as its best finished score is at
least its best alive one at the current length, which holds from the step whose best extension
ends (where CTranslate2 and OpenNMT-py stop), sooner when an earlier hypothesis beats the alive
ones at this length (an alive one may still overtake it as its length penalty grows: not
exact, the fewest steps). A finished slot never filled holds NEG_INF; a
sentence whose finished set is empty when it stops returns its alive hypotheses
(`best_hypotheses`).

Example:
    alive_log_probs, finished_scores, cache = start_beams(initial_cache, batch, beam_size=4)
    done = sentences_done(state, max_lengths, alpha=0.6, stop="full")  # bool [batch]
"""
from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf

from keras_transformer.decoding_settings import DecodingSettings

Cache = dict[str, Any]
SENTENCE_KEY = "per_sentence"  # a cache entry whose tensors hold one row per sentence
SymbolsToLogitsFn = Callable[[tf.Tensor, tf.Tensor, Cache], tuple[tf.Tensor, Cache]]

NEG_INF = -1e9  # the score of an impossible hypothesis: finite, so no NaN from inf - inf
DEFAULTS = DecodingSettings()  # alpha and the stop rule, unless given


def length_penalty(length: tf.Tensor | int, alpha: float) -> tf.Tensor:
    """GNMT's ((5 + length) / 6) ** alpha (Wu et al., 2016), float32 of `length`'s shape;
    `length` counts the generated tokens, EOS included."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def penalty_table(max_lengths: tf.Tensor, alpha: float) -> tf.Tensor:
    """float32 [longest + 2]: `length_penalty` of every length from 0 to one past the longest
    of `max_lengths` (int32 [batch], not empty), built once before a search's loop so that a
    step reads its penalty (one gather) instead of computing it."""
    return length_penalty(tf.range(tf.reduce_max(max_lengths) + 2), alpha)


def log_probs_step(symbols_to_logits_fn: SymbolsToLogitsFn, ids: tf.Tensor, step: tf.Tensor,
                   cache: Cache) -> tuple[tf.Tensor, Cache]:
    """float32 log-softmax [n, vocab] of the next token, and the new cache."""
    logits, cache = symbols_to_logits_fn(ids, step, cache)
    return tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1), cache


def cache_invariants(cache: Cache) -> Any:
    """Shape invariants that leave every dimension free and keep each tensor's rank."""
    return tf.nest.map_structure(lambda t: tf.TensorShape([None] * t.shape.rank), cache)


def start_beams(initial_cache: Cache, batch: tf.Tensor, beam_size: int
                ) -> tuple[tf.Tensor, tf.Tensor, Cache]:
    """A beam search's first state: (alive log-probs float32 [batch, beam]: 0 for the first
    beam and NEG_INF for the others, so that the first step extends BOS once; finished scores
    float32 [batch, beam], all NEG_INF (empty); the cache's per-row tensors [batch * beam,
    ...], each row repeated beam_size times in place, its per-sentence ones as they were)."""
    first_beam_only = tf.constant([[0.0] + [NEG_INF] * (beam_size - 1)])  # [1, beam]
    alive_log_probs = tf.tile(first_beam_only, [batch, 1])  # [batch, beam]
    finished_scores = tf.fill([batch, beam_size], NEG_INF)  # [batch, beam]
    return alive_log_probs, finished_scores, map_cache(
        initial_cache, lambda t: tile_beams(t, beam_size), lambda t: t)


def tile_beams(tensor: tf.Tensor, beam_size: int) -> tf.Tensor:
    """[batch, ...] -> [batch * beam, ...], each row repeated beam_size times in place (a
    gather, not tile + reshape, so that an empty cache tensor converts to ONNX)."""
    rows = tf.range(tf.shape(tensor)[0] * beam_size) // beam_size  # [batch * beam]
    return tf.gather(tensor, rows)


def reorder_cache(cache: Cache, previous: Cache, rows: tf.Tensor) -> Cache:
    """The cache a step returned with its rows gathered to the surviving beams (rows int32
    [batch * beam]); a tensor the step returned unchanged (the same object: a forced prefix,
    a shortlist's bias) holds every beam of its sentence alike and is kept, as are the
    per-sentence tensors."""
    return {key: value if key == SENTENCE_KEY
            else reorder_cache(value, previous[key], rows) if isinstance(value, dict)
            else tf.nest.map_structure(lambda new, old: new if new is old
                                       else tf.gather(new, rows), value, previous[key])
            for key, value in cache.items()}


def map_cache(cache: Cache, per_row: Callable[[tf.Tensor], tf.Tensor],
              per_sentence: Callable[[tf.Tensor], tf.Tensor]) -> Cache:
    """The cache with `per_row` applied to each per-row tensor and `per_sentence` to each
    tensor under a SENTENCE_KEY entry (module docstring)."""
    return {key: tf.nest.map_structure(per_sentence, value) if key == SENTENCE_KEY
            else map_cache(value, per_row, per_sentence) if isinstance(value, dict)
            else tf.nest.map_structure(per_row, value) for key, value in cache.items()}


def sentences_done(state: Any, max_lengths: tf.Tensor, alpha: float, stop: str,
                   penalties: tf.Tensor | None = None) -> tf.Tensor:
    """bool [batch]: the sentence reached its maximum length (int32 [batch]), or its finished
    set is full and, with stop "bound", no alive hypothesis can still beat the worst finished
    one; with stop "best", its best finished hypothesis is at least its best alive one at the
    current length (module docstring). `state`: any search state with its step int32 [] (the
    alive hypotheses' length), alive_log_probs float32 [batch, beam] and finished_scores
    float32 [batch, beam]; `penalties`: `penalty_table(max_lengths, alpha)`, read instead of
    computing the penalties."""
    def penalty(length: tf.Tensor) -> tf.Tensor:
        return (length_penalty(length, alpha) if penalties is None
                else tf.gather(penalties, length))

    at_limit = state.step >= max_lengths  # [batch]
    if stop == "best":
        best_alive = tf.reduce_max(state.alive_log_probs, axis=1)  # [batch]
        best_finished = tf.reduce_max(state.finished_scores, axis=1)  # [batch], NEG_INF: none
        return at_limit | ((best_finished > NEG_INF / 2) & (
            best_finished >= best_alive / penalty(state.step)))
    worst_finished = tf.reduce_min(state.finished_scores, axis=1)  # [batch], NEG_INF if any empty
    if stop == "full":
        return at_limit | (worst_finished > NEG_INF / 2)
    best_alive = tf.reduce_max(state.alive_log_probs, axis=1)  # [batch]
    return at_limit | (worst_finished > best_alive / penalty(max_lengths))


def best_hypotheses(alive_seq: tf.Tensor, alive_log_probs: tf.Tensor, finished_seq: tf.Tensor,
                    finished_scores: tf.Tensor, lengths: tf.Tensor, alpha: float
                    ) -> tuple[tf.Tensor, tf.Tensor]:
    """A stopped search's result: each sentence's finished hypotheses, or its alive ones
    (scored at `lengths` int32 [batch]) when none finished: seq int32 [batch, beam, time] and
    scores float32 [batch, beam]."""
    has_finished = finished_scores[:, 0] > NEG_INF / 2  # [batch]
    alive_scores = alive_log_probs / length_penalty(lengths, alpha)[:, None]  # [batch, beam]
    return (tf.where(has_finished[:, None, None], finished_seq, alive_seq),
            tf.where(has_finished[:, None], finished_scores, alive_scores))
