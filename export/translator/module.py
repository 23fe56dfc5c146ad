"""The Translator tf.Module: a Transformer (or an Ensemble of them:
`keras_transformer.ensemble`), its SentencePiece model and its DecodingSettings,
with one graph function per serving signature (`export.translator.signatures`: names, inputs,
outputs). Each function checks its inputs, encodes the text and searches here, and takes its
outputs from its signature family's module (translate, score, align, terms, sample).

Limits, so that any input gives a defined output (`keras_transformer.translate`'s, with the
Translator's `DecodingSettings`):
* a source is cut to `settings.max_source_length` tokens (a text to its first
  `settings.max_source_pieces` pieces, then EOS); the rest of a longer line is not translated;
* a translation has at most source length + `settings.extra_length` tokens (the paper's
  limit), and at most the model's `max_length` (its positions);
* a source with no piece (an empty or whitespace-only line, an all-PAD row, a row of no
  time steps) translates to nothing (no ids, the empty string) with score 0; an empty batch
  gives empty outputs;
* a source id outside [0, vocab_size) reads as UNK (<unk>, id 1), as SentencePiece encodes
  what its vocabulary lacks; runs of whitespace and NUL in a text read as one space;
* a row of `source_ids` ends at its first EOS: whatever follows reads as PAD, so that rows
  that TF Serving's batcher merged and padded with each request's first id
  (--enable_batching, pad_variable_length_inputs) translate as they would alone;
* an input of another rank than its signature's (`text` not a vector [batch], `source_ids`
  not a matrix [batch, time], ...) is refused with InvalidArgumentError naming it, "text:
  expected rank 1 (a [batch] vector of strings), got rank 2" (`signatures.checked_inputs`,
  which each signature's function calls first; ONNX Runtime: "Invalid rank for input"); so is
  a second input of another batch size.

A multilingual model (language tokens among its SentencePiece model's user symbols:
`keras_transformer.languages`) gets the signatures of `signatures.signatures(languages)`: each
function that reads text takes `target_lang` too, one code per line, checked (the rank, one per
line, a code the model knows: InvalidArgumentError naming it) and joined to its line as the
language's token (`export.text.language_text`) before the class's own graph code runs; the line
methods take `target_lang=` (one code for all their lines). A bilingual model's functions are
the class's, unchanged.

The module tracks the tf.Variables inside the model's Keras variables and holds the model
untracked: a Keras 3 variable exports as a copy of its tf.Variable, which tf.saved_model.load
restores but TF Serving's TF1 session loader leaves unset ("Could not find variable"). The
SentencePiece model is held as bytes and only the text functions build a tokenizer (in their
trace), so the ids function converts to ONNX alone. The searching signatures call one graph
function, `nbest_ids`, so that an export traces the beam search once.

An ensemble's Translator searches, samples and scores over its members' mean log-probabilities
and aligns with its first member's attention; its metadata names the members
(`export.metadata.EnsembleMember`), its variables are theirs, member after member.

Example:
    translator = Translator(model, Path("runs/demo/vocab/spm.model").read_bytes(),
                            DecodingSettings(beam_size=4))
    translator.translate_lines(lines, batch_size=32)  # list[str], in the order of `lines`
    translator.translate_lines(lines, target_lang="fr")  # a multilingual model
"""
from __future__ import annotations

import inspect
from typing import Sequence

import tensorflow as tf

from export.lines import sampled_in_batches, scored_in_batches, translate_in_batches
from export.metadata import EnsembleMember, ExportMetadata
from export.scores import Pair, PairScore, score_in_batches
from export.text import encode_text, language_text
from export.translator.align import (aligned_translation, alignment_outputs,
                                     translated_aligned_in_batches)
from export.translator.sample import sampled_translation, sampling_checks
from export.translator.score import score_outputs, scored_batch
from export.translator.signatures import (SOURCE_IDS, TARGET_PIECES, TEXT, Signature,
                                          checked_inputs, checked_languages, in_language,
                                          input_specs, signatures, unchecked_inputs)
from export.translator.terms import termed_translation
from export.translator.translate import (clean_source_ids, nbest_hypotheses, nbest_outputs,
                                         nbest_pairs, prefix_pieces, prefixed_in_batches,
                                         translated_text, translation_outputs)
from keras_transformer.compiled_search import compiled_search
from keras_transformer.decoding_settings import DecodingSettings, SamplingSettings
from keras_transformer.ensemble import Ensemble
from keras_transformer.languages import target_languages
from keras_transformer.model import Transformer
from keras_transformer.sampling import Sampling
from keras_transformer.shortlist_table import Shortlist
from keras_transformer.tokenizer import PAD_ID, Tokenizer, user_symbols


class Untracked:
    """Holds an object out of reach of tf.Module's dependency tracking."""

    def __init__(self, value: object) -> None:
        self.value = value


class Translator(tf.Module):
    """Beam-search translation with a Transformer and its SentencePiece model, in the graph.

    Args:
        model: a built Transformer in any Keras dtype policy (float32 for the ONNX and
            CTranslate2 exports; a SavedModel's may be mixed_bfloat16 or mixed_float16), or an
            Ensemble of them (not for CTranslate2).
        spm_model_proto: the bytes of the run's SentencePiece model.
        settings: the search and its limits (beam 4, alpha 0.6 by default); its
            max_source_length is resolved against the model's max_length.
        xla_max_batch: batches of up to this many sources are beam-searched by one XLA
            program (`keras_transformer.compiled_search`); 0: none (the graph everywhere).
        parallel_searches: the graph's beam search (not XLA's, constrained or sampling)
            runs as this many searches side by side (`keras_transformer.parallel_search`).
        ensemble: an Ensemble's members as its metadata names them, one per member in order.
        shortlist: the beam searches (translate, translate_ids, translate_nbest,
            translate_prefix, translate_aligned, translate_terms) choose each sentence's
            pieces among its lexical shortlist's candidates (`keras_transformer.shortlist`),
            held as variables, `shortlist_enabled` their switch; sampling and scoring read
            the whole vocabulary. None: no shortlist.

    Raises:
        ValueError: `ensemble` not one record per member of an Ensemble (none for a model).
    """

    def __init__(self, model: Transformer | Ensemble, spm_model_proto: bytes,
                 settings: DecodingSettings = DecodingSettings(),
                 name: str = "translator", xla_max_batch: int = 0,
                 parallel_searches: int = 1, ensemble: Sequence[EnsembleMember] = (),
                 shortlist: Shortlist | None = None) -> None:
        super().__init__(name=name)
        members = model.members if isinstance(model, Ensemble) else ()
        if [record.model for record in ensemble] != [m.model_config for m in members]:
            raise ValueError(f"{len(ensemble)} ensemble records for {len(members)} members, or "
                             f"a record of another model config than its member's")
        self._ensemble = Untracked(tuple(ensemble))
        self._shortlist = Untracked(None)
        if shortlist is not None:
            self.shortlist_table = tf.Variable(shortlist.table, trainable=False,
                                               name="shortlist_table")  # [vocab, k]
            self.shortlist_always = tf.Variable(shortlist.always, trainable=False,
                                                name="shortlist_always")  # [a]
            self.shortlist_enabled = tf.Variable(True, trainable=False,
                                                 name="shortlist_enabled")
            self._shortlist = Untracked(Shortlist(self.shortlist_table, self.shortlist_always,
                                                  shortlist.frequent, self.shortlist_enabled))
        self.settings = settings.for_model(model.model_config.max_length)
        self.spm_model_proto = spm_model_proto
        self.model_variables = [variable.value for variable in model.variables]  # tf.Variable
        self._model = Untracked(model)
        self.xla_max_batch = xla_max_batch
        self.parallel_searches = parallel_searches
        self._compiled = Untracked(compiled_search(model, self.settings, self.shortlist)
                                   if xla_max_batch else None)
        self._target_languages = Untracked(target_languages(user_symbols(spm_model_proto)))
        if self.target_languages:  # the functions that read text: the class's, wrapped
            for name, signature in self.serving_signatures.items():
                if TEXT in signature.inputs:
                    self.__dict__[signature.method] = self._multilingual_function(name,
                                                                                  signature)

    @property
    def model(self) -> Transformer | Ensemble:
        return self._model.value

    @property
    def shortlist(self) -> Shortlist | None:
        """The searches' lexical shortlist (its variables), or None."""
        return self._shortlist.value

    @property
    def target_languages(self) -> tuple[str, ...]:
        """The codes of the model's target-language tokens; () for a bilingual model."""
        return self._target_languages.value

    @property
    def language_words(self) -> int:
        """The source words before a line's own: its target-language token's (1 for a
        multilingual model), which word alignments leave out."""
        return int(bool(self.target_languages))

    @property
    def serving_signatures(self) -> dict[str, Signature]:
        """The serving contract of this model: `signatures.signatures(target_languages)`."""
        return signatures(self.target_languages)

    def metadata(self) -> ExportMetadata:
        """The decoding settings, the model config, its Keras dtype policy, its target
        languages, an ensemble's members and its shortlist's sizes, as exports record them."""
        shortlist = self.shortlist
        return ExportMetadata(self.settings, self.model.model_config,
                              self.model.dtype_policy.name, self.xla_max_batch,
                              self.parallel_searches, self.target_languages,
                              self._ensemble.value,
                              None if shortlist is None else
                              (int(shortlist.table.shape[1]), shortlist.frequent))

    def _multilingual_function(self, name: str, signature: Signature
                               ) -> tf.types.experimental.PolymorphicFunction:
        """The graph function of signature `name` (which reads text) for a multilingual
        model: the table's inputs (the class's function's, then target_lang) checked, each
        line joined to its language's token, then the class's function's graph code."""
        body = getattr(type(self), signature.method).python_function
        languages = self.target_languages

        def function(*inputs: tf.Tensor) -> dict[str, tf.Tensor]:
            text, *others, target_lang = checked_inputs(name, *inputs, languages=languages)
            with tf.control_dependencies([_same_batch(text, target_lang, "target_lang")]):
                target_lang = checked_languages(target_lang, languages)
            with unchecked_inputs():  # checked above
                return body(self, language_text(text, target_lang, languages), *others)

        function.__signature__ = inspect.Signature(  # the inputs' names, for keyword calls
            [inspect.Parameter(spec.name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
             for spec in signature.inputs])
        return tf.function(function, input_signature=[spec.spec for spec in signature.inputs],
                           autograph=False)

    @tf.function(input_signature=input_specs("translate_ids"), autograph=False)
    def translate_ids(self, source_ids: tf.Tensor) -> dict[str, tf.Tensor]:
        """source ids [batch, time] -> best target ids [batch, time] and score [batch]."""
        source_ids, = checked_inputs("translate_ids", source_ids)
        target_ids, score = self.search(clean_source_ids(source_ids,
                                                         self.model.model_config.vocab_size))
        return {"target_ids": target_ids, "score": score}

    @tf.function(input_signature=input_specs("serving_default"), autograph=False)
    def translate(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        """UTF-8 lines [batch] -> translations [batch] and score [batch]."""
        text, = checked_inputs("serving_default", text)
        return translation_outputs(self.spm_model_proto, *self.search(self.encode(text)))

    @tf.function(input_signature=input_specs("translate_nbest"), autograph=False)
    def translate_nbest(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        """UTF-8 lines [batch] -> the final beam's translations [batch, beam] and scores
        [batch, beam], best first (the first is `translate`'s)."""
        text, = checked_inputs("translate_nbest", text)
        return nbest_outputs(self.spm_model_proto, *self.nbest_ids(self.encode(text)))

    @tf.function(input_signature=input_specs("translate_prefix"), autograph=False)
    def translate_prefix(self, text: tf.Tensor, prefix: tf.Tensor) -> dict[str, tf.Tensor]:
        """UTF-8 lines [batch] and target prefixes [batch] -> translations [batch] that begin
        with their prefix (an empty prefix: as `translate`) and score [batch]."""
        text, prefix = checked_inputs("translate_prefix", text, prefix)
        with tf.control_dependencies([_same_batch(text, prefix, "prefix")]):
            source_ids = self.encode(text)
        ids, scores = self.hypotheses(source_ids, prefix_pieces(self.spm_model_proto, prefix))
        return translation_outputs(self.spm_model_proto, ids[:, 0], scores[:, 0])

    @tf.function(input_signature=input_specs("translate_terms"), autograph=False)
    def translate_terms(self, text: tf.Tensor, terms: tf.Tensor) -> dict[str, tf.Tensor]:
        """UTF-8 lines [batch] and target terms [batch, terms] ("": none) -> translations that
        hold their terms, scores, whether the terms fit and were found, and alignments."""
        text, terms = checked_inputs("translate_terms", text, terms)
        with tf.control_dependencies([_same_batch(text, terms, "terms")]):
            source_ids = self.encode(text)
        return termed_translation(self.model, self.spm_model_proto, self.settings, source_ids,
                                  terms, self.language_words, self.shortlist)

    @tf.function(input_signature=input_specs("translate_sample"), autograph=False)
    def translate_sample(self, text: tf.Tensor, top_k: tf.Tensor, top_p: tf.Tensor,
                         temperature: tf.Tensor, seed: tf.Tensor) -> dict[str, tf.Tensor]:
        """UTF-8 lines [batch] and each one's sampling parameters [batch] -> a translation
        drawn at random [batch] and its score [batch]; a parameter out of range (top_k < 0,
        top_p outside (0, 1], temperature <= 0) fails the request (InvalidArgumentError)."""
        text, *parameters = checked_inputs("translate_sample", text, top_k, top_p, temperature,
                                           seed)
        sampling = Sampling(*parameters)
        checks = [_same_batch(text, value, "the sampling parameters") for value in sampling]
        with tf.control_dependencies(checks + sampling_checks(sampling)):
            source_ids = self.encode(text)
        return sampled_translation(self.model, self.spm_model_proto, self.settings, source_ids,
                                   sampling)

    @tf.function(input_signature=input_specs("score"), autograph=False)
    def score(self, text: tf.Tensor, target: tf.Tensor) -> dict[str, tf.Tensor]:
        """UTF-8 lines [batch] and their translations [batch] -> the translations' scores
        (as `translate` scores its own), log-probabilities and pieces. A target of more
        pieces than the model accepts fails the request (InvalidArgumentError), uncut."""
        return self.score_ids(*self.encode_pairs(*checked_inputs("score", text, target)))

    @tf.function(input_signature=input_specs("align"), autograph=False)
    def align(self, text: tf.Tensor, target: tf.Tensor) -> dict[str, tf.Tensor]:
        """UTF-8 lines [batch] and their translations [batch] -> {"alignment": string [batch]}:
        `I-J ...`, source word I aligned to target word J (`export.translator.align`). A
        target of more pieces than the model's positions fails the request."""
        return alignment_outputs(self.model, self.spm_model_proto,
                                 *self.encode_pairs(*checked_inputs("align", text, target)),
                                 self.language_words)

    @tf.function(input_signature=input_specs("translate_aligned"), autograph=False)
    def translate_aligned(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        """UTF-8 lines [batch] -> `translate`'s outputs and each translation's word alignment
        [batch], in one request (`export.translator.align`)."""
        text, = checked_inputs("translate_aligned", text)
        source_ids = self.encode(text)  # [batch, source]
        target_ids, score = self.search(source_ids)  # [batch, time]: pieces, EOS, PAD
        return aligned_translation(self.model, self.spm_model_proto, source_ids, target_ids,
                                   score, self.language_words)

    @tf.function(input_signature=[SOURCE_IDS.spec, TARGET_PIECES.spec], autograph=False)
    def score_ids(self, source_ids: tf.Tensor, target_pieces: tf.Tensor
                  ) -> dict[str, tf.Tensor]:
        """source ids [batch, time] and target pieces [batch, time] (then PAD) -> `score`'s
        outputs (`score` calls it; the source of the ONNX export's score.onnx)."""
        return score_outputs(self.model, self.settings, source_ids, target_pieces)

    def encode_pairs(self, text: tf.Tensor, target: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Graph code: lines [batch] and their translations [batch] -> (source ids [batch,
        time], target pieces [batch, time] then PAD); a batch size that differs fails."""
        with tf.control_dependencies([_same_batch(text, target, "target")]):
            source_ids = self.encode(text)
        return source_ids, Tokenizer(self.spm_model_proto).tokenize(target).to_tensor(PAD_ID)

    def encode(self, text: tf.Tensor, target_lang: tf.Tensor | None = None) -> tf.Tensor:
        """Graph code: UTF-8 lines [batch] (and a multilingual model's target languages
        [batch], unchecked) -> source ids [batch, time]."""
        if target_lang is not None:
            text = language_text(text, target_lang, self.target_languages)
        return encode_text(text, self.spm_model_proto, self.settings.max_source_length)

    def search(self, source_ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Graph code: source ids [batch, time] -> (target ids [batch, time], score [batch])."""
        ids, scores = self.nbest_ids(source_ids)
        return ids[:, 0], scores[:, 0]

    @tf.function(input_signature=[SOURCE_IDS.spec], autograph=False)
    def nbest_ids(self, source_ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """source ids [batch, time] -> `hypotheses` without prefixes (traced once)."""
        return self.hypotheses(source_ids)

    def hypotheses(self, source_ids: tf.Tensor, prefix_ids: tf.Tensor | None = None
                   ) -> tuple[tf.Tensor, tf.Tensor]:
        """Graph code: source ids [batch, time] (and forced target prefixes [batch, prefix])
        -> the n-best lists (target ids [batch, beam, time], scores [batch, beam])."""
        return nbest_hypotheses(self.model, self.settings, source_ids, prefix_ids,
                                compiled=self._compiled.value,
                                xla_max_batch=self.xla_max_batch,
                                parallel_searches=self.parallel_searches,
                                shortlist=self.shortlist)

    # The line methods: `target_lang`, the target language of every line (a multilingual
    # model's; `signatures.in_language` raises ValueError for a missing or unknown one).

    def translate_lines(self, lines: Sequence[str], batch_size: int = 32,
                        target_lang: str | None = None) -> list[str]:
        """Translations of `lines` in their order, decoded in batches of similar lengths."""
        return [text for text, _ in self.scored_lines(lines, batch_size, target_lang)]

    def prefixed_lines(self, lines: Sequence[str], prefixes: Sequence[str],
                       batch_size: int = 32, target_lang: str | None = None) -> list[str]:
        """Translations of `lines`, each beginning with its prefix ("": none), in order."""
        return prefixed_in_batches(self._in_language(self.translate_prefix, target_lang),
                                   lines, prefixes, batch_size)

    def scored_lines(self, lines: Sequence[str], batch_size: int = 32,
                     target_lang: str | None = None) -> list[tuple[str, float]]:
        """(translation, score) of each line, in order."""
        translate = self._in_language(self.translate, target_lang)
        return scored_in_batches(
            lambda batch: translated_text(translate(text=tf.constant(batch, tf.string))),
            lines, batch_size)

    def score_pairs(self, pairs: Sequence[Pair], batch_size: int = 32,
                    target_lang: str | None = None) -> list[PairScore]:
        """The score of each (line, translation) pair, in order."""
        score = self._in_language(self.score, target_lang)
        return score_in_batches(lambda batch: scored_batch(score, batch), pairs, batch_size)

    def aligned_lines(self, lines: Sequence[str], batch_size: int = 32,
                      target_lang: str | None = None) -> list[tuple[str, str]]:
        """(translation, `I-J ...` word alignment) of each line, in order."""
        return translated_aligned_in_batches(
            self._in_language(self.translate_aligned, target_lang), lines, batch_size)

    def sampled_lines(self, lines: Sequence[str], sampling: SamplingSettings,
                      first_index: int = 0, batch_size: int = 32,
                      target_lang: str | None = None) -> list[tuple[str, float]]:
        """(translation drawn at random, score) of each line, in order; line i seeded
        `sampling.seed` + first_index + i (`export.lines.sampled_in_batches`)."""
        translate_sample = self._in_language(self.translate_sample, target_lang)
        return sampled_in_batches(
            lambda **inputs: translated_text(translate_sample(
                **{name: tf.constant(value) for name, value in inputs.items()})),
            lines, sampling, first_index, batch_size)

    def check_output(self, signature: str, output: str) -> None:
        """As `SavedModelTranslator.check_output` (which an export older than the output
        fails): ValueError when the signatures' table gives `signature` no `output`."""
        if output not in {spec.name for spec in self.serving_signatures[signature].outputs}:
            raise ValueError(f"the {signature} signature has no {output} output")

    def nbest_lines(self, lines: Sequence[str], batch_size: int = 32,
                    target_lang: str | None = None) -> list[list[tuple[str, float]]]:
        """The final beam of each line, best first: (translation, score) pairs."""
        translate_nbest = self._in_language(self.translate_nbest, target_lang)
        return translate_in_batches(
            lambda batch: nbest_pairs(translate_nbest(text=tf.constant(batch, tf.string))),
            lines, batch_size)

    def _in_language(self, function, target_lang: str | None):
        return in_language(function, target_lang, self.target_languages)


def _same_batch(text: tf.Tensor, other: tf.Tensor, what: str) -> tf.Operation:
    """Graph code: an assertion that fails the request (InvalidArgumentError) when `other`
    [batch, ...] has another batch size than `text` [batch]."""
    return tf.debugging.assert_equal(tf.shape(text)[:1], tf.shape(other)[:1],
                                     message=f"text and {what} need the same batch size")
