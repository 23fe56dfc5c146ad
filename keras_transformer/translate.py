"""Source ids -> target ids with a Transformer: the paper's decoding (section 6.1) and its limits.

    decode_sources(model, source_ids, settings=DecodingSettings())
        -> target_ids int32 [batch, time], score float32 [batch]
    decode_hypotheses(model, source_ids, settings, prefix_ids=None)
        -> the n-best lists: ids int32 [batch, beam, time], scores float32 [batch, beam],
           best first
    sample_sources(model, source_ids, settings, sampling)
        -> a random translation of each: target_ids int32 [batch, time], score float32 [batch]
    decode_with_terms(model, source_ids, settings, term_ids)
        -> TermsDecoded: the best translation holding each sentence's terms
           (`keras_transformer.constrained_search`), whether they fit, each one found

`source_ids` are a source as training saw it: pieces, EOS, then PAD. With a `shortlist`
(`keras_transformer.shortlist`), `decode_hypotheses` and `decode_with_terms` search each
sentence among its candidates only (the batch's union projected, each row masked to its own:
`shortlisted`, `candidate_step`); `decode_sources` (dev BLEU) and `sample_sources` search
the whole vocabulary, as scoring does (`keras_transformer.scoring`: any given translation is
scored, whatever its pieces). `settings`
(`keras_transformer.decoding_settings.DecodingSettings`: beam 4, alpha 0.6 by default; GREEDY
for greedy search) set the search and its limits, so that any input gives a defined output:
* a source is cut to `settings.max_source_length` tokens (default and at most the model's
  max_length: `DecodingSettings.cut_source_ids`);
* a translation has at most `settings.output_limit(source length, model max_length)` tokens:
  source length + extra_length (the paper's limit), at most the model's positions;
* a source with no piece (only PAD and EOS) translates to nothing (all PAD) with score 0.

Every decoding of a Transformer starts at `encode_for_search`, which applies these limits
once: `decode_sources` (dev BLEU during training, the attention maps of `visualize`, the tests'
Keras-level reference), `decode_hypotheses` (the exported Translator's searches, through
`keras_transformer.parallel_search` when asked), `sample_sources`, `decode_with_terms` and the
XLA search of `keras_transformer.compiled_search`. `decode_hypotheses`, `sample_sources` and
`decode_with_terms` read each weight once, as they start, not in every step
(`_reading_weights_once`).

Example:
    target_ids, score = decode_sources(model, source_ids, DecodingSettings(beam_size=4))
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable, NamedTuple, TypeVar

import keras
import tensorflow as tf

from keras_transformer.constrained_search import constrained_beam_search
from keras_transformer.decoding import beam_search
from keras_transformer.greedy import greedy_search
from keras_transformer.search_primitives import NEG_INF, length_penalty
from keras_transformer.shortlist import KERNEL_OP, batch_candidates, to_candidate_index
from keras_transformer.shortlist_table import Shortlist
from keras_transformer.sampling import Sampling, sample_picker
from keras_transformer.decoding_settings import DecodingSettings
from keras_transformer.model import Transformer
from keras_transformer.terms import term_lengths, terms_found
from keras_transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID

if TYPE_CHECKING:
    from keras_transformer.ensemble import Ensemble

SearchResult = TypeVar("SearchResult")
GREEDY = DecodingSettings(beam_size=1)  # dev BLEU during training, attention maps
PREFIX_KEY = "prefix_ids"  # the forced target prefix, carried in the decoding cache
SHORTLIST_KEY = "shortlist_bias"  # each row's shortlist, in the decoding cache (shortlisted)


def _reading_weights_once(search: Callable[..., SearchResult]) -> Callable[..., SearchResult]:
    """`search(model, ...)` with each trainable weight of `model` read once, as it starts
    (keras.StatelessScope maps every weight to that value): a graph traced from it reads the
    weights before its loops, not in every step, where each read is one more node for
    TensorFlow's executor to run (docs/decoding-speed.md, "The step's attention outside
    oneDNN's kernels"). The same numbers."""
    @functools.wraps(search)
    def search_reading_weights_once(model: Transformer | Ensemble, *args, **kwargs
                                    ) -> SearchResult:
        weights = [(weight, tf.identity(weight.value))  # read here, not where it is used
                   for weight in model.variables if weight.trainable]
        with keras.StatelessScope(weights):
            return search(model, *args, **kwargs)
    return search_reading_weights_once


def decode_sources(model: Transformer, source_ids: tf.Tensor,
                   settings: DecodingSettings = DecodingSettings()
                   ) -> tuple[tf.Tensor, tf.Tensor]:
    """The best translation of each source, greedy (beam_size 1) or by beam search; eager or
    graph code.

    Args:
        model: the Transformer.
        source_ids: int [batch, time]: pieces, EOS, then PAD.
        settings: the search and its limits.

    Returns:
        target ids int32 [batch, time]: the best hypothesis without BOS, EOS included where it
        ended with one, PAD after; and its score float32 [batch]: the summed log-probability
        divided by the GNMT length penalty, for greedy search too (`beam_search`). A source with
        no piece gives a row of PAD and score 0.
    """
    ids, scores = decode_hypotheses(model, source_ids, settings)
    return ids[:, 0], scores[:, 0]


@_reading_weights_once
def decode_hypotheses(model: Transformer, source_ids: tf.Tensor, settings: DecodingSettings,
                      prefix_ids: tf.Tensor | None = None, shortlist: Shortlist | None = None
                      ) -> tuple[tf.Tensor, tf.Tensor]:
    """Like `decode_sources`, but every hypothesis of the final beam, best first (the n-best
    list): target ids int32 [batch, beam, time] and scores float32 [batch, beam].

    `prefix_ids` int [batch, prefix] (pieces, then PAD; no BOS or EOS) are forced as the first
    output tokens of each sentence, each scored 0 (a log-probability of 1), before the search
    goes on from them; a row of PAD forces nothing, so a sentence decodes exactly as without
    it. A prefix is cut at the sentence's maximum output length. `shortlist`: each sentence
    chooses among its candidates only (`keras_transformer.shortlist`; its prefix's pieces
    among them).
    """
    cache, max_lengths, empty = encode_for_search(model, source_ids, settings)
    cache, candidate_ids = shortlisted(model, source_ids, settings, cache, shortlist,
                                       prefix_ids)
    if prefix_ids is not None:
        cache[PREFIX_KEY] = tf.pad(_indices(tf.cast(prefix_ids, tf.int32), candidate_ids,
                                            model), [[0, 0], [0, 1]])  # PAD last
    ids, scores = beam_search(_scoring(model, candidate_ids, settings.beam_size), cache,
                              max_lengths,
                              beam_size=settings.beam_size, bos_id=BOS_ID, eos_id=EOS_ID,
                              alpha=settings.alpha, pad_id=PAD_ID, stop=settings.stop,
                              vocab_size=None if candidate_ids is None
                              else tf.size(candidate_ids))  # [batch, beam, time] ...
    ids = vocabulary_ids(ids, candidate_ids)
    return tf.where(empty[:, None, None], PAD_ID, ids), tf.where(empty[:, None], 0.0, scores)


@_reading_weights_once
def sample_sources(model: Transformer, source_ids: tf.Tensor, settings: DecodingSettings,
                   sampling: Sampling) -> tuple[tf.Tensor, tf.Tensor]:
    """A random translation of each source (`keras_transformer.sampling`), with the limits of
    `settings` (its beam size and stop rule unused): target ids int32 [batch, time] and the
    summed log-probability of the model (at temperature 1) divided by the GNMT penalty, as
    beam search scores; a source with no piece gives a row of PAD and score 0."""
    cache, max_lengths, empty = encode_for_search(model, source_ids, settings)
    ids, log_probs = greedy_search(_scoring(model), cache, max_lengths, bos_id=BOS_ID,
                                   eos_id=EOS_ID, pad_id=PAD_ID, pick=sample_picker(sampling))
    lengths = tf.reduce_sum(tf.cast(ids != PAD_ID, tf.int32), axis=1)  # [batch], EOS included
    scores = log_probs / length_penalty(lengths, settings.alpha)
    return tf.where(empty[:, None], PAD_ID, ids), tf.where(empty, 0.0, scores)


class TermsDecoded(NamedTuple):
    target_ids: tf.Tensor  # int32 [batch, time], as decode_sources gives them
    score: tf.Tensor       # float32 [batch]
    terms_fit: tf.Tensor   # bool [batch]: the terms' pieces within the output limit
    term_found: tf.Tensor  # bool [batch, terms]: the term's pieces in target_ids (no term: true)


@_reading_weights_once
def decode_with_terms(model: Transformer, source_ids: tf.Tensor, settings: DecodingSettings,
                      term_ids: tf.Tensor, word_end: tf.Tensor | None = None,
                      shortlist: Shortlist | None = None) -> TermsDecoded:
    """Like `decode_sources`, each translation holding its sentence's terms (term_ids int
    [batch, terms, pieces], each term's pieces then PAD; a row of PAD: no term), by
    constrained beam search. A sentence whose terms have more pieces in all than its maximum
    output length (`settings.output_limit`) is decoded without them and `terms_fit` false;
    `term_found` tells which terms the translation holds. `word_end` bool [vocab]: the pieces
    that may follow a term (`constrained_beam_search`). `shortlist`: as `decode_hypotheses`',
    each sentence's terms' pieces among its candidates."""
    cache, max_lengths, empty = encode_for_search(model, source_ids, settings)
    term_ids = tf.cast(term_ids, tf.int32)
    cache, candidate_ids = shortlisted(model, source_ids, settings, cache, shortlist, term_ids)
    fit = tf.reduce_sum(term_lengths(term_ids, PAD_ID), axis=1) <= max_lengths  # [batch]
    search_word_end = word_end
    if candidate_ids is not None and word_end is not None:
        search_word_end = tf.gather(word_end, candidate_ids)  # [U]
    ids, scores = constrained_beam_search(
        _scoring(model, candidate_ids, settings.beam_size), cache, max_lengths,
        tf.where(fit[:, None, None], _indices(term_ids, candidate_ids, model), PAD_ID),
        beam_size=settings.beam_size, bos_id=BOS_ID, eos_id=EOS_ID, alpha=settings.alpha,
        pad_id=PAD_ID, stop=settings.stop, word_end=search_word_end)  # [batch, beam, time]
    ids = tf.where(empty[:, None], PAD_ID, vocabulary_ids(ids[:, 0], candidate_ids))
    return TermsDecoded(ids, tf.where(empty, 0.0, scores[:, 0]), fit,
                        terms_found(ids, term_ids, PAD_ID, word_end))


def encode_for_search(model: Transformer, source_ids: tf.Tensor, settings: DecodingSettings,
                      cache_length: tf.Tensor | int = 0) -> tuple[dict, tf.Tensor, tf.Tensor]:
    """(the decoding cache of the encoded sources, each one's maximum output length [batch],
    whether it has no piece [batch]), sources cut to the settings' limit; `cache_length` > 0:
    fixed-size self-attention caches (`Transformer.init_cache`)."""
    max_length = model.model_config.max_length
    source_ids = settings.cut_source_ids(tf.cast(source_ids, tf.int32),
                                         max_length)  # [batch, source]
    is_real = source_ids != PAD_ID  # [batch, source]
    lengths = tf.reduce_sum(tf.cast(is_real, tf.int32), axis=1)  # [batch]
    empty = tf.reduce_all(~is_real | (source_ids == EOS_ID), axis=1)  # [batch]
    max_lengths = tf.where(empty, 0, settings.output_limit(lengths, max_length))  # [batch]
    memory, memory_mask = model.encode(source_ids, training=False)
    return model.init_cache(memory, memory_mask, cache_length), max_lengths, empty


def shortlisted(model: Transformer, source_ids: tf.Tensor, settings: DecodingSettings,
                cache: dict, shortlist: Shortlist | None, forced_ids: tf.Tensor | None = None,
                size: tf.Tensor | None = None) -> tuple[dict, tf.Tensor | None]:
    """(the cache with each row's logit bias float32 [batch, U] under SHORTLIST_KEY, 0 on its
    own candidates and NEG_INF on the batch's others, the batch's candidate ids int32 [U]) of
    the sources (cut as `encode_for_search` cuts them) and their `forced_ids` (int [batch,
    ...], pieces then PAD); (cache, None) without a shortlist. `size`: U fixed
    (`keras_transformer.shortlist.batch_candidates`)."""
    if shortlist is None:
        return cache, None
    source_ids = settings.cut_source_ids(tf.cast(source_ids, tf.int32),
                                         model.model_config.max_length)  # [batch, source]
    batch = batch_candidates(shortlist, source_ids, model.model_config.vocab_size,
                             forced_ids, size)
    bias = tf.where(batch.rows, 0.0, NEG_INF)  # [batch, U]: an Add a step, not a select
    return {**cache, SHORTLIST_KEY: bias}, batch.ids


def vocabulary_ids(ids: tf.Tensor, candidate_ids: tf.Tensor | None) -> tf.Tensor:
    """A shortlisted search's output (candidate indices, any shape) as vocabulary ids (PAD
    stays PAD); ids unchanged without a shortlist (`candidate_ids` None)."""
    return ids if candidate_ids is None else tf.gather(candidate_ids, ids)


def _indices(ids: tf.Tensor, candidate_ids: tf.Tensor | None, model: Transformer) -> tf.Tensor:
    """Vocabulary ids (pieces, then PAD) as the shortlisted search's candidate indices."""
    if candidate_ids is None:
        return ids
    return to_candidate_index(ids, candidate_ids, model.model_config.vocab_size)


def candidate_step(model: Transformer, last_ids: tf.Tensor, step: tf.Tensor, cache: dict,
                   output_kernel: tf.Tensor, candidate_ids: tf.Tensor | None = None,
                   fixed: bool = False, beam_size: int = 1) -> tuple[tf.Tensor, dict]:
    """`Transformer.decode_step` for a search of `beam_size` rows a sentence: last_ids [n]
    and the logits [n, U] are candidate indices and `output_kernel` [d_model, U] their
    columns (`candidate_ids` int32 [U]; None: the vocabulary's ids and kernel); a row's
    logits outside its own candidates (cache[SHORTLIST_KEY] float32 [n, U], returned
    unchanged, added) are about NEG_INF."""
    if candidate_ids is not None:
        last_ids = tf.gather(candidate_ids, last_ids)  # [n]: vocabulary ids
    logits, new_cache = model.decode_step(last_ids, step, cache, output_kernel, fixed=fixed,
                                          rows_per_sentence=beam_size)
    if SHORTLIST_KEY not in cache:
        return logits, new_cache
    bias = cache[SHORTLIST_KEY]  # [n, U]: 0 or NEG_INF
    return logits + bias, {**new_cache, SHORTLIST_KEY: bias}


def search_kernel(model: Transformer | Ensemble, candidate_ids: tf.Tensor | None
                  ) -> tf.Tensor | tuple[tf.Tensor, ...]:
    """The output projection a search uses, transposed once: [d_model, vocab], or the
    candidates' columns [d_model, U] (their rows of the embedding matrix gathered, then
    transposed: one contiguous copy a piece, not d_model strided ones); an Ensemble's, one per
    member."""
    if candidate_ids is None:
        return model.embedding.output_kernel()  # [d_model, vocab] (a tuple: an Ensemble's)
    return tf.nest.map_structure(  # [d_model, U] (each member's)
        lambda table: tf.transpose(tf.gather(table, candidate_ids, name=KERNEL_OP),
                                   name=f"{KERNEL_OP}_columns"),
        model.embedding.table())


def _scoring(model: Transformer, candidate_ids: tf.Tensor | None = None, beam_size: int = 1):
    """The model's next-token logits for a search of `beam_size` rows a sentence
    (`candidate_step`: over the shortlist's candidates when `candidate_ids` int32 [U] are
    given). With PREFIX_KEY [n, prefix + 1] in the cache, a row whose prefix has a piece at
    output position `step` gets every other token's logit lowered by 1e9; the prefix tensor
    is returned unchanged, so beam search tiles it and never reorders it (every beam of a
    sentence has the same prefix). The output projection is transposed here, once, not at
    every step."""
    output_kernel = search_kernel(model, candidate_ids)  # [d_model, vocab or U]

    def scoring(ids: tf.Tensor, step: tf.Tensor, cache: dict) -> tuple[tf.Tensor, dict]:
        logits, new_cache = candidate_step(model, ids[:, -1], step, cache, output_kernel,
                                           candidate_ids, beam_size=beam_size)
        if PREFIX_KEY not in cache:
            return logits, new_cache
        prefix = cache[PREFIX_KEY]  # [n, prefix + 1]
        token = tf.gather(prefix, tf.minimum(step, tf.shape(prefix)[1] - 1), axis=1)  # [n]
        forced = tf.one_hot(token, tf.shape(logits)[1], on_value=0.0, off_value=-1e9)
        logits = tf.where((token != PAD_ID)[:, None], logits + forced, logits)  # [n, vocab]
        return logits, {**new_cache, PREFIX_KEY: prefix}

    return scoring
