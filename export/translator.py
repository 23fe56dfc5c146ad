"""The Translator: beam search over a Transformer as a tf.Module with graph functions,
the serving signatures of the SavedModel (the first two are the sources of the ONNX models).

    translate(text string [batch]) -> {"translation": string [batch], "score": float32 [batch]}
    translate_ids(source_ids int32 [batch, time]) -> {"target_ids": int32 [batch, time],
                                                      "score": float32 [batch]}
    translate_nbest(text string [batch]) -> {"translations": string [batch, beam],
                                             "scores": float32 [batch, beam]}, best first
    translate_prefix(text string [batch], prefix string [batch]) -> as `translate`, each
        translation forced to begin with its prefix (target terminology, interactive use)
    translate_sample(text string [batch], top_k int32 [batch], top_p float32 [batch],
        temperature float32 [batch], seed int64 [batch]) -> as `translate`: a random
        translation of each line (`keras_transformer.sampling`; back-translation)
    score(text string [batch], target string [batch]) -> {"score": float32 [batch],
        "log_prob": float32 [batch], "target_ids": int32 [batch, time],
        "token_log_probs": float32 [batch, time]}: each given translation scored
        (`keras_transformer.scoring`); target_ids are its pieces then EOS, then PAD, and
        token_log_probs theirs (0 at PAD)
    align(text string [batch], target string [batch]) -> {"alignment": string [batch]}: each
        given translation's word alignment `I-J ...` (`keras_transformer.alignment`)
    translate_aligned(text string [batch]) -> as `translate`, and "alignment": string [batch],
        each translation's word alignment (`export.aligned_translation`)
    translate_terms(text string [batch], terms string [batch, terms]) -> as `translate`, each
        translation holding its target terms, "terms_fit", "term_found" and "alignment"
        (`export.terminology`)

`source_ids` are a source as training saw it: pieces, EOS, then PAD; `target_ids` are the best
hypothesis without BOS, EOS included where it ended with one, PAD after. The score is its
summed log-probability divided by the GNMT length penalty (`keras_transformer.decoding`).

Limits, so that any input gives a defined output (`keras_transformer.translate.decode_sources`,
which both functions decode with, and the Translator's `DecodingSettings`):
* a source is cut to `settings.max_source_length` tokens (a text to its first
  max_source_length - 1 pieces, then EOS); the rest of a longer line is not translated;
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
* a `text` that is not a vector [batch], or `source_ids` that are not a matrix [batch,
  time], is refused with InvalidArgumentError ("... is not compatible with expected shape";
  ONNX Runtime: "Invalid rank for input").

The module tracks the tf.Variables inside the model's Keras variables and holds the model
untracked: a Keras 3 variable exports as a copy of its tf.Variable, which tf.saved_model.load
restores but TF Serving's TF1 session loader leaves unset ("Could not find variable"). The
SentencePiece model is held as bytes and only the text functions build a tokenizer (in their
trace), so the ids function converts to ONNX alone. The searching signatures call one graph
function, `nbest_ids`, so that an export traces the beam search once.

Example:
    translator = Translator(model, Path("runs/demo/vocab/spm.model").read_bytes(),
                            DecodingSettings(beam_size=4))
    translator.translate_lines(lines, batch_size=32)  # list[str], in the order of `lines`
"""
from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from export.aligned_translation import translate_with_alignment, word_starts
from export.lines import scored_in_batches, translate_in_batches
from export.text import encode_text
from export.metadata import ExportMetadata
from export.scores import Pair, PairScore, score_in_batches
from export.signature_specs import (IDS_SPEC, PREFIX_SPEC, SAMPLING_SPECS, TARGET_IDS_SPEC,
                                    TARGET_SPEC, TEXT_SPEC, Untracked, sampling_checks)
from export.signature_outputs import (nbest_pairs, prefixed_in_batches, scored_batch,
                                      translated_aligned_in_batches, translated_text)
from export.terminology import TERMS_SPEC, translate_with_terms
from keras_transformer.decoding_settings import DecodingSettings
from keras_transformer.model import Transformer
from keras_transformer.alignment import align_targets
from keras_transformer.compiled_search import compiled_search, decode_hypotheses_compiled
from keras_transformer.parallel_search import in_parallel
from keras_transformer.scoring import score_targets
from keras_transformer.tokenizer import EOS_ID, PAD_ID, UNK_ID, Tokenizer
from keras_transformer.sampling import Sampling
from keras_transformer.translate import decode_hypotheses, sample_sources


class Translator(tf.Module):
    """Beam-search translation with a Transformer and its SentencePiece model, in the graph.

    Args:
        model: a built Transformer in any Keras dtype policy (float32 for the ONNX and
            CTranslate2 exports; a SavedModel's may be mixed_bfloat16 or mixed_float16).
        spm_model_proto: the bytes of the run's SentencePiece model.
        settings: the search and its limits (beam 4, alpha 0.6 by default); its
            max_source_length is resolved against the model's max_length.
        xla_max_batch: batches of up to this many sources are beam-searched by one XLA
            program (`keras_transformer.compiled_search`); 0: none (the graph everywhere).
        parallel_searches: the graph's beam search (not XLA's, constrained or sampling)
            runs as this many searches side by side (`keras_transformer.parallel_search`).
    """

    def __init__(self, model: Transformer, spm_model_proto: bytes,
                 settings: DecodingSettings = DecodingSettings(),
                 name: str = "translator", xla_max_batch: int = 0,
                 parallel_searches: int = 1) -> None:
        super().__init__(name=name)
        self.settings = settings.for_model(model.model_config.max_length)
        self.spm_model_proto = spm_model_proto
        self.model_variables = [variable.value for variable in model.variables]  # tf.Variable
        self._model = Untracked(model)
        self.xla_max_batch = xla_max_batch
        self.parallel_searches = parallel_searches
        self._compiled = Untracked(compiled_search(model, self.settings) if xla_max_batch
                                   else None)

    @property
    def model(self) -> Transformer:
        return self._model.value

    def metadata(self) -> ExportMetadata:
        """The decoding settings, the model config and its Keras dtype policy, as exports
        record them."""
        return ExportMetadata(self.settings, self.model.model_config,
                              self.model.dtype_policy.name, self.xla_max_batch,
                              self.parallel_searches)

    @tf.function(input_signature=[IDS_SPEC], autograph=False)
    def translate_ids(self, source_ids: tf.Tensor) -> dict[str, tf.Tensor]:
        """source ids [batch, time] -> best target ids [batch, time] and score [batch]."""
        source_ids = tf.ensure_shape(source_ids, IDS_SPEC.shape)  # TF Serving does not check
        vocab_size = self.model.model_config.vocab_size
        source_ids = tf.where((source_ids < 0) | (source_ids >= vocab_size), UNK_ID, source_ids)
        # A row ends at its first EOS: TF Serving's batcher pads with the request's first id.
        after_eos = tf.cumsum(tf.cast(source_ids == EOS_ID, tf.int32), axis=1, exclusive=True)
        source_ids = tf.where(after_eos > 0, PAD_ID, source_ids)  # [batch, time]
        no_time = tf.maximum(0, 1 - tf.shape(source_ids)[1])  # one PAD column if time is 0
        target_ids, score = self.search(tf.pad(source_ids, [[0, 0], [0, no_time]]))
        return {"target_ids": target_ids, "score": score}

    @tf.function(input_signature=[TEXT_SPEC], autograph=False)
    def translate(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        """UTF-8 lines [batch] -> translations [batch] and score [batch]."""
        target_ids, score = self.search(self.encode(text))  # [batch, time], [batch]
        translation = Tokenizer(self.spm_model_proto).detokenize(target_ids)  # [batch]
        return {"translation": translation, "score": score}

    @tf.function(input_signature=[TEXT_SPEC], autograph=False)
    def translate_nbest(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        """UTF-8 lines [batch] -> the final beam's translations [batch, beam] and scores
        [batch, beam], best first (the first is `translate`'s)."""
        ids, scores = self.nbest_ids(self.encode(text))  # [batch, beam, time], [batch, beam]
        shape = tf.shape(ids)
        flat = tf.reshape(ids, [shape[0] * shape[1], shape[2]])  # [batch * beam, time]
        translations = Tokenizer(self.spm_model_proto).detokenize(flat)  # [batch * beam]
        return {"translations": tf.reshape(translations, shape[:2]), "scores": scores}

    @tf.function(input_signature=[TEXT_SPEC, PREFIX_SPEC], autograph=False)
    def translate_prefix(self, text: tf.Tensor, prefix: tf.Tensor) -> dict[str, tf.Tensor]:
        """UTF-8 lines [batch] and target prefixes [batch] -> translations [batch] that begin
        with their prefix (an empty prefix: as `translate`) and score [batch]."""
        prefix = tf.ensure_shape(prefix, PREFIX_SPEC.shape)  # TF Serving does not check
        same_batch = tf.debugging.assert_equal(
            tf.shape(text), tf.shape(prefix), message="text and prefix need the same batch size")
        with tf.control_dependencies([same_batch]):
            source_ids = self.encode(text)
        tokenizer = Tokenizer(self.spm_model_proto)
        prefix_ids = tokenizer.tokenize(prefix).to_tensor(PAD_ID)  # [batch, prefix]
        ids, scores = self.hypotheses(source_ids, prefix_ids)  # [batch, beam, time]
        return {"translation": tokenizer.detokenize(ids[:, 0]), "score": scores[:, 0]}

    @tf.function(input_signature=[TEXT_SPEC, TERMS_SPEC], autograph=False)
    def translate_terms(self, text: tf.Tensor, terms: tf.Tensor) -> dict[str, tf.Tensor]:
        """UTF-8 lines [batch] and target terms [batch, terms] ("": none) -> translations that
        hold their terms, scores, and whether the terms fit and were found."""
        return translate_with_terms(self, text, terms)

    @tf.function(input_signature=[TEXT_SPEC, *SAMPLING_SPECS], autograph=False)
    def translate_sample(self, text: tf.Tensor, top_k: tf.Tensor, top_p: tf.Tensor,
                         temperature: tf.Tensor, seed: tf.Tensor) -> dict[str, tf.Tensor]:
        """UTF-8 lines [batch] and each one's sampling parameters [batch] -> a translation
        drawn at random [batch] and its score [batch]; a parameter out of range (top_k < 0,
        top_p outside (0, 1], temperature <= 0) fails the request (InvalidArgumentError)."""
        sampling = Sampling(*(tf.ensure_shape(value, [None])
                              for value in (top_k, top_p, temperature, seed)))
        with tf.control_dependencies(sampling_checks(text, sampling)):
            source_ids = self.encode(text)
        target_ids, score = sample_sources(self.model, source_ids, self.settings, sampling)
        return {"translation": Tokenizer(self.spm_model_proto).detokenize(target_ids),
                "score": score}

    @tf.function(input_signature=[TEXT_SPEC, TARGET_SPEC], autograph=False)
    def score(self, text: tf.Tensor, target: tf.Tensor) -> dict[str, tf.Tensor]:
        """UTF-8 lines [batch] and their translations [batch] -> the translations' scores
        (as `translate` scores its own), log-probabilities and pieces. A target of more
        pieces than the model accepts fails the request (InvalidArgumentError), uncut."""
        return self.score_ids(*self.encode_pairs(text, target))

    @tf.function(input_signature=[TEXT_SPEC, TARGET_SPEC], autograph=False)
    def align(self, text: tf.Tensor, target: tf.Tensor) -> dict[str, tf.Tensor]:
        """UTF-8 lines [batch] and their translations [batch] -> {"alignment": string [batch]}:
        `I-J ...`, source word I aligned to target word J, a pair per target word in order
        (`keras_transformer.alignment`; "" where either side has no word). A target of more
        pieces than the model's positions fails the request (InvalidArgumentError)."""
        return {"alignment": align_targets(self.model, *self.encode_pairs(text, target),
                                           word_starts(self.spm_model_proto))}

    @tf.function(input_signature=[TEXT_SPEC], autograph=False)
    def translate_aligned(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        """UTF-8 lines [batch] -> `translate`'s outputs and each translation's word alignment
        [batch], in one request (`export.aligned_translation`)."""
        return translate_with_alignment(self, text)

    @tf.function(input_signature=[IDS_SPEC, TARGET_IDS_SPEC], autograph=False)
    def score_ids(self, source_ids: tf.Tensor, target_pieces: tf.Tensor
                  ) -> dict[str, tf.Tensor]:
        """source ids [batch, time] and target pieces [batch, time] (then PAD) -> `score`'s
        outputs (`score` calls it; the source of the ONNX export's score.onnx)."""
        scores = score_targets(self.model, source_ids, target_pieces, self.settings)
        positions = tf.range(tf.shape(scores.token_log_probs)[1])[None]  # [1, time + 1]
        ends = positions == scores.length[:, None] - 1
        target_ids = tf.where(ends, EOS_ID, tf.pad(tf.cast(target_pieces, tf.int32),
                                                   [[0, 0], [0, 1]]))
        return {"score": scores.score, "log_prob": scores.log_prob, "target_ids": target_ids,
                "token_log_probs": scores.token_log_probs}

    def encode_pairs(self, text: tf.Tensor, target: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Graph code: lines [batch] and their translations [batch] -> (source ids [batch,
        time], target pieces [batch, time] then PAD); a batch size that differs fails."""
        target = tf.ensure_shape(target, TARGET_SPEC.shape)  # TF Serving does not check
        same_batch = tf.debugging.assert_equal(
            tf.shape(text), tf.shape(target), message="text and target need the same batch size")
        with tf.control_dependencies([same_batch]):
            source_ids = self.encode(text)
        return source_ids, Tokenizer(self.spm_model_proto).tokenize(target).to_tensor(PAD_ID)

    def encode(self, text: tf.Tensor) -> tf.Tensor:
        """Graph code: UTF-8 lines [batch] -> source ids [batch, time]; a `text` that is not a
        vector is refused at run time (TF Serving does not check it)."""
        text = tf.ensure_shape(text, TEXT_SPEC.shape)
        return encode_text(text, self.spm_model_proto, self.settings.max_source_length)

    def search(self, source_ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Graph code: source ids [batch, time] -> (target ids [batch, time], score [batch])."""
        ids, scores = self.nbest_ids(source_ids)
        return ids[:, 0], scores[:, 0]

    @tf.function(input_signature=[IDS_SPEC], autograph=False)
    def nbest_ids(self, source_ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """source ids [batch, time] -> `hypotheses` without prefixes (traced once)."""
        return self.hypotheses(source_ids)

    def hypotheses(self, source_ids: tf.Tensor, prefix_ids: tf.Tensor | None = None
                   ) -> tuple[tf.Tensor, tf.Tensor]:
        """Graph code: source ids [batch, time] (and forced target prefixes [batch, prefix])
        -> the n-best lists (target ids [batch, beam, time], scores [batch, beam])."""
        search = in_parallel(lambda source_ids, prefix_ids=None: decode_hypotheses(
            self.model, source_ids, self.settings, prefix_ids), self.parallel_searches)
        if self.xla_max_batch and prefix_ids is None:
            return decode_hypotheses_compiled(self.model, source_ids, self.settings,
                                              self._compiled.value, self.xla_max_batch, search)
        return search(source_ids, prefix_ids)

    def translate_lines(self, lines: Sequence[str], batch_size: int = 32) -> list[str]:
        """Translations of `lines` in their order, decoded in batches of similar lengths."""
        return [text for text, _ in self.scored_lines(lines, batch_size)]

    def prefixed_lines(self, lines: Sequence[str], prefixes: Sequence[str],
                       batch_size: int = 32) -> list[str]:
        """Translations of `lines`, each beginning with its prefix ("": none), in order."""
        return prefixed_in_batches(self.translate_prefix, lines, prefixes, batch_size)

    def scored_lines(self, lines: Sequence[str], batch_size: int = 32
                     ) -> list[tuple[str, float]]:
        """(translation, score) of each line, in order."""
        return scored_in_batches(
            lambda batch: translated_text(self.translate(tf.constant(batch, tf.string))),
            lines, batch_size)

    def score_pairs(self, pairs: Sequence[Pair], batch_size: int = 32) -> list[PairScore]:
        """The score of each (line, translation) pair, in order."""
        return score_in_batches(lambda batch: scored_batch(self.score, batch), pairs,
                                batch_size)

    def aligned_lines(self, lines: Sequence[str], batch_size: int = 32
                      ) -> list[tuple[str, str]]:
        """(translation, `I-J ...` word alignment) of each line, in order."""
        return translated_aligned_in_batches(self.translate_aligned, lines, batch_size)

    def nbest_lines(self, lines: Sequence[str], batch_size: int = 32
                    ) -> list[list[tuple[str, float]]]:
        """The final beam of each line, best first: (translation, score) pairs."""
        return translate_in_batches(
            lambda batch: nbest_pairs(self.translate_nbest(tf.constant(batch, tf.string))),
            lines, batch_size)

