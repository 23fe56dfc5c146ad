"""The Translator as a versioned SavedModel for TF Serving.

    base_dir/<version>/saved_model.pb, variables/
                       assets.extra/tf_serving_warmup_requests   PredictionLog records
                       assets.extra/spm.model, translator.json   for clients and `translate`

Its signatures are those of the Translator's table (`export.translator.signatures`: each one's
Translator function, inputs and outputs; a multilingual model's text signatures take
`target_lang`), each warmed up with a request of one line and one of them all.
The graphs use core TF ops and TF Text ops of TF Serving's set
(export/serving/tf_serving_text_ops.txt); the SentencePiece model is inside them.

Each export takes a new integer version, 1 + the largest one present: it is written under a
temporary name (`.export-*`; TF Serving reads integer names only) and renamed into place
(`export.versions`), so a reader never sees a partial version. `SavedModelTranslator` loads a
version back and translates through its signatures (`keras-transformer translate`, `score`);
`switch_session_shortlist` switches a version's lexical shortlist off (or on) where TF1's
session loader loaded it, as TF Serving does (bench/decode_speed.py's full-vocabulary rows).

Example:
    version = export_saved_model(translator, Path("runs/demo/export/saved_model"))  # .../1
    SavedModelTranslator(version).translate(["Hello."])  # {"translation": [...], "score": ...}
    SavedModelTranslator(version).translate_lines(["Hello."], target_lang="fr")  # multilingual
"""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import meta_graph_pb2

from export import ExportError
from export.lines import sampled_in_batches, scored_in_batches, translate_in_batches
from export.metadata import METADATA_FILE, SAVED_MODEL_EXTRA, SPM_FILE, saved_model_metadata
from export.serving.client import predict_request
from export.scores import Pair, PairScore, score_in_batches
from export.translator import Translator
from export.translator.align import translated_aligned_in_batches
from export.translator.score import scored_batch
from export.translator.signatures import in_language
from export.translator.translate import nbest_pairs, prefixed_in_batches, translated_text
from export.versions import publish_version, staging_directory
from keras_transformer.compiled_search import bucket_sources
from keras_transformer.decoding_settings import SamplingSettings
from keras_transformer.ensemble import Ensemble
from keras_transformer.model import Transformer
from keras_transformer.precision import resolve_dtype
from keras_transformer.shortlist_table import Shortlist

WARMUP_FILE = "tf_serving_warmup_requests"
WARMUP_TEXT = ("Hello.", "This is a test of the exported translator.")


def export_saved_model(translator: Translator, base_dir: Path, *,
                       warmup_text: Sequence[str] = WARMUP_TEXT,
                       model_name: str = "translator") -> Path:
    """Writes the next version under `base_dir`; returns its directory.

    Args:
        translator: the module to save.
        base_dir: the model's TF Serving base path.
        warmup_text: sentences of the warm-up requests (one request of one sentence and one
            of them all, for each signature).
        model_name: the model name the warm-up requests carry.
    """
    temporary = staging_directory(base_dir, ".export")
    try:
        # The functions, not their concrete functions: save traces every function of the
        # module in its own context, which is part of the trace cache's key, so a function
        # traced before save would be traced twice (TensorFlow issue #56370).
        tf.saved_model.save(translator, str(temporary), signatures={
            name: getattr(translator, signature.method)
            for name, signature in translator.serving_signatures.items()})
        extra = temporary / "assets.extra"
        extra.mkdir()
        write_warmup(extra / WARMUP_FILE, translator, warmup_text, model_name)
        (extra / SPM_FILE).write_bytes(translator.spm_model_proto)
        translator.metadata().write(extra / METADATA_FILE)
        return publish_version(temporary, base_dir)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def write_warmup(path: Path, translator: Translator, texts: Sequence[str],
                 model_name: str) -> None:
    """TF Serving's warm-up file: PredictionLog records for every signature of the
    Translator's table, in its order, one of the first line and one of all `texts` (a
    multilingual model's in its first language; and with XLA, one source of each width the
    compiled search pads to)."""
    from tensorflow_serving.apis import prediction_log_pb2

    batches = [np.array(texts[:1], object), np.array(texts, object)]
    languages = translator.target_languages
    encoded = [translator.encode(tf.constant(batch), tf.fill([len(batch)], languages[0])
                                 if languages else None).numpy() for batch in batches]
    requests = [predict_request(model_name, signature.warmup(batch, source_ids), name)
                for name, signature in translator.serving_signatures.items()
                for batch, source_ids in zip(batches, encoded)]
    if translator.xla_max_batch:  # one source of each padded width: XLA compiles each once
        requests += [predict_request(model_name, {"source_ids": ids}, "translate_ids")
                     for ids in bucket_sources(translator.settings.max_source_length)]
    with tf.io.TFRecordWriter(str(path)) as writer:
        for request in requests:
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())


def switch_session_shortlist(session: tf.compat.v1.Session,
                             meta_graph: meta_graph_pb2.MetaGraphDef, enabled: bool) -> bool:
    """A version loaded by TF1's session loader (as TF Serving loads it) with its lexical
    shortlist switched on or off in `session`, as `SavedModelTranslator(shortlist=)` switches it
    in TF2: the Translator's `shortlist_enabled` variable, found through the saved object
    graph, assigned. Returns whether the version has a shortlist (none: nothing switched).

    Example:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(version))
        switch_session_shortlist(session, meta_graph, False)  # every piece searched
    """
    nodes = meta_graph.object_graph_def.nodes
    children = {child.local_name: child.node_id for child in nodes[0].children}
    if "shortlist_enabled" not in children:
        return False
    graph = session.graph
    with graph.as_default():
        handle = graph.get_operation_by_name(
            nodes[children["shortlist_enabled"]].variable.name).outputs[0]
        session.run(tf.raw_ops.AssignVariableOp(resource=handle, value=tf.constant(enabled)))
    return True


class SavedModelTranslator:
    """An exported version loaded with tf.saved_model.load, run through its `serving_default`
    signature (the graph TF Serving runs). The line methods take `target_lang=`, the target
    language of all their lines (a multilingual model's: `signatures.in_language`)."""

    def __init__(self, version_dir: Path, shortlist: bool = True) -> None:
        """`shortlist` false: an export's lexical shortlist switched off (its
        `shortlist_enabled` variable, in this process: every piece searched). Raises
        ExportError for a mixed-precision export where oneDNN would abort on it (an
        ONEDNN_MAX_CPU_ISA cap below the CPU's 16-bit instructions:
        `keras_transformer.precision.resolve`)."""
        self.version_dir = Path(version_dir)
        self.metadata = saved_model_metadata(self.version_dir)
        self.dtype = self.metadata.dtype
        try:
            resolve_dtype(self.dtype)
        except ValueError as error:
            raise ExportError(f"{self.version_dir}: a {self.dtype} export: {error}") from None
        self.loaded = tf.saved_model.load(str(self.version_dir))
        self.shortlist = self.metadata.shortlist is not None and shortlist
        if self.metadata.shortlist is not None:
            self.loaded.shortlist_enabled.assign(shortlist)
        self.signature = self.loaded.signatures["serving_default"]

    def translate(self, texts: Sequence[str | bytes],
                  target_lang: str | None = None) -> dict[str, Any]:
        """Lines -> {"translation": list[str], "score": float32 [batch]}."""
        signature = self._in_language(self.signature, target_lang)
        return translated_text(signature(text=tf.constant(list(texts), tf.string)))

    def translate_lines(self, lines: Sequence[str], batch_size: int = 32,
                        target_lang: str | None = None) -> list[str]:
        """Translations of `lines` in their order, decoded in batches of similar lengths."""
        return translate_in_batches(
            lambda batch: self.translate(batch, target_lang)["translation"], lines, batch_size)

    def scored_lines(self, lines: Sequence[str], batch_size: int = 32,
                     target_lang: str | None = None) -> list[tuple[str, float]]:
        """(translation, score) of each line, in order."""
        return scored_in_batches(lambda batch: self.translate(batch, target_lang), lines,
                                 batch_size)

    def sampled_lines(self, lines: Sequence[str], sampling: SamplingSettings,
                      first_index: int = 0, batch_size: int = 32,
                      target_lang: str | None = None) -> list[tuple[str, float]]:
        """(translation drawn at random, score) of each line, in order, through the
        `translate_sample` signature; line i seeded `sampling.seed` + first_index + i."""
        signature = self._signature("translate_sample", target_lang)

        def translate(**inputs: np.ndarray) -> dict:
            return translated_text(signature(**{name: tf.constant(value)
                                                for name, value in inputs.items()}))

        return sampled_in_batches(translate, lines, sampling, first_index, batch_size)

    def nbest_lines(self, lines: Sequence[str], batch_size: int = 32,
                    target_lang: str | None = None) -> list[list[tuple[str, float]]]:
        """The final beam of each line, best first: (translation, score) pairs, through the
        `translate_nbest` signature."""
        signature = self._signature("translate_nbest", target_lang)
        return translate_in_batches(
            lambda batch: nbest_pairs(signature(text=tf.constant(list(batch), tf.string))),
            lines, batch_size)

    def prefixed_lines(self, lines: Sequence[str], prefixes: Sequence[str],
                       batch_size: int = 32, target_lang: str | None = None) -> list[str]:
        """Translations of `lines`, each beginning with its prefix ("": none), in order,
        through the `translate_prefix` signature."""
        return prefixed_in_batches(self._signature("translate_prefix", target_lang), lines,
                                   prefixes, batch_size)

    def score_pairs(self, pairs: Sequence[Pair], batch_size: int = 32,
                    target_lang: str | None = None) -> list[PairScore]:
        """The score of each (line, translation) pair, in order, through the `score`
        signature."""
        signature = self._signature("score", target_lang)
        return score_in_batches(lambda batch: scored_batch(signature, batch), pairs,
                                batch_size)

    def aligned_lines(self, lines: Sequence[str], batch_size: int = 32,
                      target_lang: str | None = None) -> list[tuple[str, str]]:
        """(translation, `I-J ...` word alignment) of each line, in order, through the
        `translate_aligned` signature."""
        return translated_aligned_in_batches(self._signature("translate_aligned", target_lang),
                                             lines, batch_size)

    @property
    def translate_terms(self):
        """The `translate_terms` signature: (text=, terms=[, target_lang=]) -> as
        `Translator.translate_terms` (`export.translator.terms.termed_in_batches` calls it)."""
        return self._signature("translate_terms")

    @property
    def target_languages(self) -> tuple[str, ...]:
        """The export's target languages (a multilingual model's; () for a bilingual one)."""
        return self.metadata.target_languages

    def check_output(self, signature: str, output: str) -> None:
        """Raises ExportError, naming the version, when `signature` lacks `output` (an export
        made before the signature gave it)."""
        if output not in self._signature(signature).structured_outputs:
            raise ExportError(f"{self.version_dir}: its {signature} signature has no {output} "
                              f"output (an older export); export again")

    def _signature(self, name: str, target_lang: str | None = None):
        """The loaded signature `name`, called in `target_lang` (`_in_language`)."""
        if name not in self.loaded.signatures:
            raise ExportError(f"{self.version_dir}: exported without the {name} signature; "
                              f"export again")
        return self._in_language(self.loaded.signatures[name], target_lang)

    def _in_language(self, signature, target_lang: str | None):
        return in_language(signature, target_lang, self.target_languages)

    def models(self, dtype: str | None = None) -> list[Transformer]:
        """This version's models with its weights, in the Keras dtype policy `dtype` (default:
        the version's; the weights are float32 in any): its model, or an ensemble export's
        members in order."""
        dtype = dtype or self.dtype
        models = [Transformer(member.model, dtype=dtype)
                  for member in self.metadata.ensemble] or [Transformer(self.metadata.model,
                                                                        dtype=dtype)]
        variables = [variable for model in models for variable in model.variables]
        for variable, saved in zip(variables, self.loaded.model_variables, strict=True):
            variable.assign(saved)
        return models

    def rebuild(self, dtype: str | None = None, **changes: Any) -> Translator:
        """An in-process Translator with this version's weights (an ensemble's members),
        tokenizer and shortlist (unless switched off), in the dtype policy `dtype` (default:
        the version's), and its decoding settings with `changes` (DecodingSettings fields,
        e.g. beam_size=8)."""
        models = self.models(dtype)
        spm_model_proto = (self.version_dir / SAVED_MODEL_EXTRA / SPM_FILE).read_bytes()
        return Translator(Ensemble(models) if self.metadata.ensemble else models[0],
                          spm_model_proto, dataclasses.replace(self.metadata.settings, **changes),
                          ensemble=self.metadata.ensemble, shortlist=self.lexical_shortlist())

    def lexical_shortlist(self) -> Shortlist | None:
        """This version's lexical shortlist (its table, always-allowed pieces and frequent
        count) for an in-process Translator; None when it has none or it is switched off."""
        if not self.shortlist:
            return None
        return Shortlist(self.loaded.shortlist_table.numpy(),
                         self.loaded.shortlist_always.numpy(), self.metadata.shortlist[1])
