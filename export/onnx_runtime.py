"""ONNX Runtime runner of an ONNX export directory (`export.onnx`); imports no TensorFlow.

onnxruntime-extensions' SentencePiece kernels crash (SIGSEGV) in a process that imported
TensorFlow before creating their session; so where TensorFlow is imported, `translate` and
`translate_lines` run translator.onnx in a child process (a start-up of about a second per
call). `translate_ids` (model.onnx) needs plain onnxruntime only and runs in process.

A multilingual export's methods take `target_lang`: a code for every line, or (`translate`)
one per line; a code the model does not know, or none, is refused here with
`keras_transformer.languages`' line (ValueError), as translator.onnx itself can only fail
without naming it.

Example:
    translator = OnnxTranslator(Path("runs/demo/export/onnx"))
    translator.translate_lines(["In the beginning."])  # ["Au commencement."]
    translator.translate_lines(["In the beginning."], target_lang="fr")  # multilingual
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import onnxruntime as ort

from export import ExportError
from export.lines import (decode_line, language_line, line_languages, normalize_spaces,
                          scored_in_batches, translate_in_batches)
from export.metadata import (METADATA_FILE, MODEL_FILE, SCORE_FILE, SPM_FILE, TRANSLATOR_FILE,
                             ExportMetadata)
from export.scores import Pair, PairScore, score_in_batches, signature_scores


def session_options(threads: int | None = None) -> ort.SessionOptions:
    """All graph optimizations, `threads` intra-op threads (default: one per CPU core),
    sequential execution; the threads spin between ops (ONNX Runtime's default) unless the
    environment says OMP_WAIT_POLICY=PASSIVE, the variable that has CTranslate2's OpenMP
    threads sleep too.

    The decoding loop is a long chain of small ops: on a machine of its own, spinning threads
    take the next op at once; on a shared one they take the cores from the process that works
    (docs/decoding-speed.md, "ONNX Runtime: the graph rewrites and the session options").
    Inter-op threads would only contend.
    """
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = threads or os.cpu_count() or 1
    options.inter_op_num_threads = 1
    passive = os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE"
    options.add_session_config_entry("session.intra_op.allow_spinning", "0" if passive else "1")
    return options


class OnnxTranslator:
    """Sessions of model.onnx (ids) and translator.onnx (text), created at first use.

    Args:
        directory: an ONNX export directory.
        threads: intra-op threads per session (default: one per CPU core).
        ids_model: the ids model: MODEL_FILE, or INT8_MODEL_FILE (int8 weights).
    """

    def __init__(self, directory: Path, threads: int | None = None,
                 ids_model: str = MODEL_FILE, shortlist: bool = True) -> None:
        """`shortlist` false refuses an export whose graphs hold a lexical shortlist
        (ExportError: ONNX graphs hold it as constants; export with export.shortlist false,
        or use the SavedModel or CTranslate2 export)."""
        self.directory = Path(directory)
        self.threads, self.ids_model = threads, ids_model
        self.metadata = ExportMetadata.read(self.directory / METADATA_FILE)
        if not shortlist and self.metadata.shortlist is not None:
            raise ExportError(
                f"{self.directory}: its ONNX graphs search with the lexical shortlist they "
                f"hold (--no-shortlist cannot remove it); export again with export.shortlist: "
                f"false, or translate with the SavedModel or CTranslate2 export")

    @functools.cached_property
    def ids_session(self) -> ort.InferenceSession:
        return ort.InferenceSession(str(self.directory / self.ids_model),
                                    session_options(self.threads),
                                    providers=["CPUExecutionProvider"])

    @functools.cached_property
    def text_session(self) -> ort.InferenceSession:
        from onnxruntime_extensions import get_library_path

        options = session_options(self.threads)
        options.register_custom_ops_library(get_library_path())
        return ort.InferenceSession(str(self.directory / TRANSLATOR_FILE), options,
                                    providers=["CPUExecutionProvider"])

    def translate_ids(self, source_ids: np.ndarray) -> dict[str, np.ndarray]:
        """source ids int32 [batch, time] -> {"target_ids" [batch, time], "score" [batch]}."""
        target_ids, score = self.ids_session.run(
            ["target_ids", "score"], {"source_ids": np.asarray(source_ids, np.int32)})
        return {"target_ids": target_ids, "score": score}

    def translate(self, texts: Sequence[str | bytes],
                  target_lang: str | Sequence[str] | None = None) -> dict[str, Any]:
        """Lines -> {"translation": list[str], "score": float32 [batch]}; invalid UTF-8 in
        bytes reads as U+FFFD per byte and NUL as a space, as the TF graph reads them
        (onnxruntime-extensions' string kernels would end a line at its first NUL)."""
        lines = [decode_line(text).replace("\0", " ") for text in texts]  # str for ORT
        languages = line_languages(target_lang, len(lines), self.metadata.target_languages)
        if self._needs_child():
            output = self._in_child("translate", lines, target_lang=languages)
            return {"translation": output["translation"],
                    "score": np.array(output["score"], np.float32)}
        inputs = {"text": np.array(lines, object)}
        if self.metadata.target_languages:
            inputs["target_lang"] = np.array(languages, object)
        translation, score = self.text_session.run(["translation", "score"], inputs)
        return {"translation": [str(t) for t in translation], "score": score}

    def translate_lines(self, lines: Sequence[str | bytes], batch_size: int = 32,
                        target_lang: str | None = None) -> list[str]:
        """Translations of `lines` in their order, decoded in batches of similar lengths."""
        if self._needs_child():
            line_languages(target_lang, len(lines), self.metadata.target_languages)  # refused here
            return self._in_child("translate_lines", [decode_line(line) for line in lines],
                                  batch_size, target_lang)["translation"]
        return translate_in_batches(
            lambda batch: self.translate(batch, target_lang)["translation"], lines, batch_size)

    def scored_lines(self, lines: Sequence[str | bytes], batch_size: int = 32,
                     target_lang: str | None = None) -> list[tuple[str, float]]:
        """(translation, score) of each line, in order."""
        return scored_in_batches(lambda batch: self.translate(batch, target_lang), lines,
                                 batch_size)

    def score_pairs(self, pairs: Sequence[Pair], batch_size: int = 32,
                    target_lang: str | None = None) -> list[PairScore]:
        """The score of each (line, translation) pair, in order, through score.onnx: lines
        tokenized as the TF graph tokenizes them, sources cut as `translate` cuts them."""
        if not (self.directory / SCORE_FILE).is_file():
            raise ExportError(f"{self.directory}: no {SCORE_FILE} (exported before scoring); "
                              f"export again")
        processor = self.processor
        limit = self.metadata.settings.max_source_pieces
        language, = line_languages(target_lang, 1, self.metadata.target_languages)

        def score_batch(batch: list[Pair]) -> list[PairScore]:
            def pieces(text: str) -> list[int]:
                return processor.encode(normalize_spaces(decode_line(text)).replace("\0", " "))

            sources = [pieces(language_line(decode_line(source), language))[:limit]
                       + [processor.eos_id()] for source, _ in batch]
            targets = [pieces(target) for _, target in batch]
            names = ("score", "log_prob", "target_ids", "token_log_probs")
            outputs = self.score_session.run(list(names), {"source_ids": padded(sources),
                                                           "target_pieces": padded(targets)})
            return signature_scores(dict(zip(names, outputs)))

        return score_in_batches(score_batch, pairs, batch_size)

    @functools.cached_property
    def processor(self):
        """The export's SentencePiece model (sentencepiece.SentencePieceProcessor)."""
        import sentencepiece as spm

        return spm.SentencePieceProcessor(model_file=str(self.directory / SPM_FILE))

    @functools.cached_property
    def score_session(self) -> ort.InferenceSession:
        return ort.InferenceSession(str(self.directory / SCORE_FILE),
                                    session_options(self.threads),
                                    providers=["CPUExecutionProvider"])

    def _needs_child(self) -> bool:
        """Whether TensorFlow is imported and the text session not yet made."""
        return "tensorflow" in sys.modules and "text_session" not in self.__dict__

    def _in_child(self, method: str, lines: list[str], batch_size: int = 32,
                  target_lang: str | list[str | None] | None = None) -> dict[str, Any]:
        """Runs `method` in a Python process that has not imported TensorFlow."""
        request = {"directory": str(self.directory), "threads": self.threads, "method": method,
                   "lines": lines, "batch_size": batch_size, "target_lang": target_lang}
        done = subprocess.run([sys.executable, "-m", "export.onnx_runtime"],
                              input=json.dumps(request), capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"ONNX Runtime process failed: {done.stderr[-2000:]}")
        return json.loads(done.stdout)


def padded(rows: list[list[int]]) -> np.ndarray:
    """int32 [batch, longest row (at least 1)], rows padded with PAD (0)."""
    ids = np.zeros([len(rows), max([1, *map(len, rows)])], np.int32)
    for index, row in enumerate(rows):
        ids[index, :len(row)] = row
    return ids


def _serve_child() -> None:
    """The child of `OnnxTranslator._in_child`: a JSON request on stdin, the result on stdout."""
    request = json.load(sys.stdin)
    translator = OnnxTranslator(Path(request["directory"]), request["threads"])
    if request["method"] == "translate":
        output = translator.translate(request["lines"], request["target_lang"])
        result = {"translation": output["translation"], "score": output["score"].tolist()}
    else:
        result = {"translation": translator.translate_lines(
            request["lines"], request["batch_size"], request["target_lang"])}
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    _serve_child()
