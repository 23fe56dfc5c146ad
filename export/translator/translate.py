"""The translating signatures' graph code and readers: `serving_default` (the Translator's
`translate`), `translate_ids`, `translate_nbest` and `translate_prefix`, and the search they
share (`nbest_hypotheses`: the graph's beam search, side by side or XLA-compiled as the
Translator says).

    translate(text string [batch]) -> {"translation": string [batch], "score": float32 [batch]}
    translate_ids(source_ids int32 [batch, time]) -> {"target_ids": int32 [batch, time],
                                                      "score": float32 [batch]}
    translate_nbest(text string [batch]) -> {"translations": string [batch, beam],
                                             "scores": float32 [batch, beam]}, best first
    translate_prefix(text string [batch], prefix string [batch]) -> as `translate`, each
        translation forced to begin with its prefix (target terminology, interactive use)

`target_ids` are the best hypothesis without BOS, EOS included where it ended with one, PAD
after; the score is its summed log-probability divided by the GNMT length penalty. A row of
`source_ids` ends at its first EOS (`clean_source_ids`).

Example:
    outputs = translation_outputs(spm_model_proto, target_ids, score)  # graph code
    translated_text(translator.translate(tf.constant(["Hello."])))  # Python values
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import tensorflow as tf

from export.lines import translate_in_batches
from keras_transformer.compiled_search import SearchFn, decode_hypotheses_compiled
from keras_transformer.decoding_settings import DecodingSettings
from keras_transformer.model import Transformer
from keras_transformer.parallel_search import in_parallel
from keras_transformer.shortlist_table import Shortlist
from keras_transformer.tokenizer import EOS_ID, PAD_ID, UNK_ID, Tokenizer
from keras_transformer.translate import decode_hypotheses


def nbest_hypotheses(model: Transformer, settings: DecodingSettings, source_ids: tf.Tensor,
                     prefix_ids: tf.Tensor | None = None, *, compiled: SearchFn | None = None,
                     xla_max_batch: int = 0, parallel_searches: int = 1,
                     shortlist: Shortlist | None = None) -> tuple[tf.Tensor, tf.Tensor]:
    """Graph code: source ids [batch, time] (and forced target prefixes [batch, prefix]) ->
    the n-best lists (target ids [batch, beam, time], scores [batch, beam]): the graph's beam
    search as `parallel_searches` searches side by side, or batches of 1 to `xla_max_batch`
    sources without prefixes through `compiled` (`keras_transformer.compiled_search`); each
    sentence among its `shortlist`'s candidates when there is one."""
    search = in_parallel(lambda source_ids, prefix_ids=None: decode_hypotheses(
        model, source_ids, settings, prefix_ids, shortlist), parallel_searches)
    if xla_max_batch and prefix_ids is None:
        return decode_hypotheses_compiled(model, source_ids, settings, compiled, xla_max_batch,
                                          search, shortlist)
    return search(source_ids, prefix_ids)


def clean_source_ids(source_ids: tf.Tensor, vocab_size: int) -> tf.Tensor:
    """Graph code: `translate_ids`' source ids int32 [batch, time] as the search reads them:
    an id outside [0, vocab_size) as UNK, whatever follows a row's first EOS as PAD (TF
    Serving's batcher pads with each request's first id), one PAD column if time is 0."""
    source_ids = tf.where((source_ids < 0) | (source_ids >= vocab_size), UNK_ID, source_ids)
    after_eos = tf.cumsum(tf.cast(source_ids == EOS_ID, tf.int32), axis=1, exclusive=True)
    source_ids = tf.where(after_eos > 0, PAD_ID, source_ids)  # [batch, time]
    no_time = tf.maximum(0, 1 - tf.shape(source_ids)[1])
    return tf.pad(source_ids, [[0, 0], [0, no_time]])  # [batch, max(time, 1)]


def translation_outputs(spm_model_proto: bytes, target_ids: tf.Tensor,
                        score: tf.Tensor) -> dict[str, tf.Tensor]:
    """Graph code: `translate`'s outputs of the best target ids [batch, time] and their score
    [batch]: {"translation": string [batch], "score": float32 [batch]}."""
    return {"translation": Tokenizer(spm_model_proto).detokenize(target_ids), "score": score}


def nbest_outputs(spm_model_proto: bytes, ids: tf.Tensor,
                  scores: tf.Tensor) -> dict[str, tf.Tensor]:
    """Graph code: `translate_nbest`'s outputs of the n-best lists (ids [batch, beam, time],
    scores [batch, beam])."""
    shape = tf.shape(ids)
    flat = tf.reshape(ids, [shape[0] * shape[1], shape[2]])  # [batch * beam, time]
    translations = Tokenizer(spm_model_proto).detokenize(flat)  # [batch * beam]
    return {"translations": tf.reshape(translations, shape[:2]), "scores": scores}


def prefix_pieces(spm_model_proto: bytes, prefix: tf.Tensor) -> tf.Tensor:
    """Graph code: `translate_prefix`'s prefixes [batch] -> their pieces [batch, prefix], then
    PAD (no BOS or EOS)."""
    return Tokenizer(spm_model_proto).tokenize(prefix).to_tensor(PAD_ID)


def translated_text(output: dict[str, tf.Tensor]) -> dict[str, Any]:
    """A translate function's output -> {"translation": list[str], "score": float32 [batch]}."""
    return {"translation": [text.decode("utf-8") for text in output["translation"].numpy()],
            "score": output["score"].numpy()}


def nbest_pairs(output: dict[str, tf.Tensor]) -> list[list[tuple[str, float]]]:
    """`translate_nbest`'s output -> per line, (translation, score) pairs, best first."""
    return [[(text.decode("utf-8"), float(score)) for text, score in zip(texts, scores)]
            for texts, scores in zip(output["translations"].numpy(), output["scores"].numpy())]


def prefixed_in_batches(translate_prefix: Callable[..., dict[str, tf.Tensor]],
                        lines: Sequence[str], prefixes: Sequence[str],
                        batch_size: int) -> list[str]:
    """`translate_prefix(text=, prefix=)` (the function or its signature) over `lines` and
    their `prefixes`, in batches of similar lines; the translations in order."""
    def translate_batch(batch: list[tuple[str, str]]) -> list[str]:
        texts, prefix = zip(*batch)
        output = translate_prefix(text=tf.constant(texts), prefix=tf.constant(prefix))
        return [text.decode("utf-8") for text in output["translation"].numpy()]

    return translate_in_batches(translate_batch, list(zip(lines, prefixes)), batch_size,
                                length=lambda pair: len(pair[0]))
