"""Opening an export for `keras-transformer translate`: a SavedModel version, a SavedModel base
path (its newest version), an ONNX directory, or a run's export/ directory holding both.

The ONNX runtime path imports no TensorFlow (see `export.onnx_runtime`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol, Sequence

from export import ExportError
from export.onnx_runtime import METADATA_FILE, TRANSLATOR_FILE
from export.versions import latest_version

RUNTIME_FORMATS = {"tf": "saved_model", "onnx": "onnx"}  # runtime -> the export format it runs


class LineTranslator(Protocol):
    def translate_lines(self, lines: Sequence[str], batch_size: int = 32) -> list[str]: ...


def resolve_export(path: Path, runtime: str | None = None) -> tuple[str, Path]:
    """(runtime, directory): the SavedModel version or ONNX directory that `path` names.

    Raises:
        ExportError: nothing exported there, or not for `runtime`.
    """
    found: dict[str, Path] = {}
    for base in (path, path / "saved_model"):
        version = base if (base / "saved_model.pb").is_file() else latest_version(base)
        if version is not None:
            found.setdefault("tf", version)
    for directory in (path, path / "onnx"):
        if (directory / TRANSLATOR_FILE).is_file():
            found.setdefault("onnx", directory)
    if not found:
        raise ExportError(f"{path}: no SavedModel (version) or ONNX export found; run "
                         f"`keras-transformer export` first")
    runtime = runtime or next(iter(found))
    if runtime not in found:
        raise ExportError(f"{path}: no export for runtime {runtime!r} (found: "
                         f"{', '.join(found)})")
    return runtime, found[runtime]


def open_translator(path: Path, runtime: str | None = None,
                    beam_size: int | None = None) -> LineTranslator:
    """The translator of an export; with `beam_size` other than the exported one, the
    SavedModel's weights are rebuilt into an in-process Translator (ONNX cannot: re-export).

    Raises:
        ExportError: see `resolve_export`; a beam size the ONNX export was not made with.
    """
    runtime, directory = resolve_export(Path(path), runtime)
    if runtime == "onnx":
        from export.onnx_runtime import OnnxTranslator

        exported = json.loads((directory / METADATA_FILE).read_text())["beam_size"]
        if beam_size not in (None, exported):
            raise ExportError(f"{directory}: exported with beam {exported}; set evaluate."
                             f"beam_size: {beam_size} and re-export, or use --runtime tf")
        return OnnxTranslator(directory)
    from export.saved_model import SavedModelTranslator

    translator = SavedModelTranslator(directory)
    if beam_size in (None, translator.metadata["beam_size"]):
        return translator
    return translator.rebuild(beam_size=beam_size)
