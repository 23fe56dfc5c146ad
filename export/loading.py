"""Opening an export for `keras-transformer translate`: a SavedModel version, a SavedModel base
path (its newest complete version), an ONNX directory, a CTranslate2 model directory
(ctranslate2/float32 or ctranslate2/int8), or a run's export/ directory holding them (its
CTranslate2 model: float32).

    resolve_export(path, runtime=None) -> (runtime "tf" | "onnx" | "ct2", directory)
    open_translator(path, runtime=None, beam_size=None) -> a LineTranslator
    open_saved_model(version_dir) -> SavedModelTranslator
    rebuild_translator(version_dir, **settings) -> its weights in an in-process Translator
    ensemble_exports(paths) -> the SavedModel versions of an ensemble's members, checked
    open_ensemble(versions, beam_size=None, shortlist=True) -> their models as one Ensemble
    vocabulary_mismatch(files) -> None, or the line naming a SentencePiece model that differs

Without `runtime`, the first found of tf, onnx, ct2. A beam size other than the exported one
rebuilds the SavedModel's weights into an in-process Translator; ONNX and CTranslate2 refuse it
(re-export). A file of an export that is missing, truncated or corrupt is an ExportError naming
it (a rebuild's spm.model is checked before the SavedModel loads). The ONNX runtime path imports
no TensorFlow (see `export.onnx_runtime`).

An ensemble of exports (`translate --ensemble`: `keras_transformer.ensemble`) is built in
process from their SavedModels (an ensemble export's members count one by one), with the first
one's decoding settings; its members share one SentencePiece model byte for byte
(`vocabulary_mismatch`: its pieces, hence its target languages) and one dtype, checked from
their files before any is loaded.

Example:
    translator = open_translator(Path("runs/demo"), runtime="onnx")  # runs/demo/export/onnx
    translator.translate_lines(["Hello.", "How are you?"], batch_size=32)  # two strings
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from export import ExportError
from export.metadata import (EXPORT_AGAIN, METADATA_FILE, SAVED_MODEL_EXTRA, SAVED_MODEL_GRAPH,
                             SPM_FILE, TRANSLATOR_FILE, ExportMetadata, saved_model_metadata,
                             unreadable)
from export.versions import latest_version, versions

if TYPE_CHECKING:
    from export.saved_model import SavedModelTranslator
    from export.translator import Translator

RUNTIME_FORMATS = {"tf": "saved_model", "onnx": "onnx", "ct2": "ctranslate2"}  # runtime -> format
SAVED_MODEL_METADATA = f"{SAVED_MODEL_EXTRA}/{METADATA_FILE}"  # of a complete version


class LineTranslator(Protocol):
    def translate_lines(self, lines: Sequence[str], batch_size: int = 32,
                        target_lang: str | None = None) -> list[str]: ...


def resolve_export(path: Path, runtime: str | None = None) -> tuple[str, Path]:
    """(runtime, directory): the SavedModel version, ONNX or CTranslate2 directory that `path`
    (an export or a run's directory) names; of a base path, the newest version holding its
    graph and metadata.

    Raises:
        ExportError: nothing exported there, or not for `runtime`.
    """
    if (path / "export").is_dir():  # a run's directory
        path = path / "export"
    found: dict[str, Path] = {}
    for base in (path, path / "saved_model"):
        version = base if (base / SAVED_MODEL_GRAPH).is_file() else latest_version(
            base, SAVED_MODEL_GRAPH, SAVED_MODEL_METADATA)
        if version is not None:
            found.setdefault("tf", version)
    for directory in (path, path / "onnx"):
        if (directory / TRANSLATOR_FILE).is_file():
            found.setdefault("onnx", directory)
    for directory in (path, path / "ctranslate2" / "float32"):  # a model dir, e.g. .../int8
        if (directory / "model.bin").is_file():
            found.setdefault("ct2", directory)
    if not found:
        incomplete = versions(path) or versions(path / "saved_model")
        note = f" (incomplete versions: {', '.join(map(str, incomplete))})" if incomplete else ""
        raise ExportError(f"{path}: no SavedModel (version) or ONNX export found{note}; run "
                         f"`keras-transformer export` first")
    runtime = runtime or next(iter(found))
    if runtime not in found:
        raise ExportError(f"{path}: no export for runtime {runtime!r} (found: "
                         f"{', '.join(found)})")
    return runtime, found[runtime]


def export_files(runtime: str, directory: Path) -> tuple[Path, Path]:
    """(translator.json, spm.model) of the export `resolve_export` found for `runtime`."""
    base = {"tf": directory / SAVED_MODEL_EXTRA, "onnx": directory,
            "ct2": directory.parent}[runtime]
    return base / METADATA_FILE, base / SPM_FILE


def open_translator(path: Path, runtime: str | None = None,
                    beam_size: int | None = None, shortlist: bool = True) -> LineTranslator:
    """The translator of an export; with `beam_size` other than the exported one, the
    SavedModel's weights are rebuilt into an in-process Translator (ONNX cannot: re-export).
    `shortlist` false: every piece searched, not the export's lexical shortlist (an ONNX
    export that holds one refuses it).

    Raises:
        ExportError: see `resolve_export`; a beam size the ONNX export was not made with; a
            file of the export missing, truncated or corrupt.
    """
    runtime, directory = resolve_export(Path(path), runtime)
    if runtime == "ct2":
        from export.ct2_runtime import CTranslate2Translator

        exported = ExportMetadata.read(directory.parent / METADATA_FILE).settings.beam_size
        if beam_size not in (None, exported):
            raise ExportError(f"{directory}: exported with beam {exported}; set evaluate."
                             f"beam_size: {beam_size} and re-export, or use --runtime tf")
        return CTranslate2Translator(directory.parent, directory.name, shortlist=shortlist)
    if runtime == "onnx":
        from export.onnx_runtime import OnnxTranslator

        exported = ExportMetadata.read(directory / METADATA_FILE).settings.beam_size
        if beam_size not in (None, exported):
            raise ExportError(f"{directory}: exported with beam {exported}; set evaluate."
                             f"beam_size: {beam_size} and re-export, or use --runtime tf")
        _check_onnx(directory / TRANSLATOR_FILE)
        return OnnxTranslator(directory, shortlist=shortlist)
    if beam_size in (None, saved_model_metadata(directory).settings.beam_size):
        return open_saved_model(directory, shortlist)
    return rebuild_translator(directory, shortlist, beam_size=beam_size)


def open_saved_model(version_dir: Path, shortlist: bool = True) -> SavedModelTranslator:
    """The SavedModel version loaded (`export.saved_model.SavedModelTranslator`; `shortlist`:
    its).

    Raises:
        ExportError: its metadata, graph or variables missing, truncated or corrupt.
    """
    import tensorflow as tf

    from export.saved_model import SavedModelTranslator

    saved_model_metadata(version_dir)
    try:
        return SavedModelTranslator(version_dir, shortlist)
    except OSError:  # TF's "Cannot parse file ...saved_model.pb"
        raise unreadable(version_dir / SAVED_MODEL_GRAPH) from None
    except (tf.errors.OpError, IndexError):  # reading its variables
        raise unreadable(version_dir / "variables") from None


def rebuild_translator(version_dir: Path, shortlist: bool = True,
                       **settings: Any) -> Translator:
    """`open_saved_model(version_dir, shortlist).rebuild(**settings)`, its SentencePiece
    model (assets.extra/spm.model) checked before the SavedModel loads.

    Raises:
        ExportError: that model, or a file `open_saved_model` reads, missing, truncated or
            corrupt.
    """
    _spm_model_proto(version_dir)
    return open_saved_model(version_dir, shortlist).rebuild(**settings)


def _spm_model_proto(version_dir: Path) -> bytes:
    """The bytes of a SavedModel version's assets.extra/spm.model, checked to parse.

    Raises:
        ExportError: the file missing, truncated or corrupt.
    """
    from keras_transformer.tokenizer import Tokenizer

    path = version_dir / SAVED_MODEL_EXTRA / SPM_FILE
    try:
        proto = path.read_bytes()
        Tokenizer(proto)
    except FileNotFoundError:
        raise ExportError(f"{path}: no such file; {EXPORT_AGAIN}") from None
    except (RuntimeError, ValueError):  # SentencePiece cannot parse it
        raise unreadable(path) from None
    return proto


def vocabulary_mismatch(files: Sequence[Path]) -> str | None:
    """None when the SentencePiece model files are one byte for byte (an ensemble's members,
    `keras_transformer.ensemble`), else the line naming the first that differs from files[0].

    Raises:
        FileNotFoundError: a file missing.
    """
    first = files[0].read_bytes()
    for path in files[1:]:
        if path.read_bytes() != first:
            return (f"{path} differs from {files[0]}: an ensemble's members share one "
                    f"SentencePiece model byte for byte")
    return None


def ensemble_exports(paths: Sequence[Path]) -> list[Path]:
    """The SavedModel versions of an ensemble's members (exports or runs, as `resolve_export`
    finds them), checked before any is loaded.

    Raises:
        ExportError: a member without a SavedModel, its metadata or spm.model missing or
            unreadable, another SentencePiece model or dtype than the first member's.
    """
    versions = [resolve_export(Path(path), "tf")[1] for path in paths]
    spm_models = [version / SAVED_MODEL_EXTRA / SPM_FILE for version in versions]
    try:
        problem = vocabulary_mismatch(spm_models)
    except FileNotFoundError as error:
        raise ExportError(f"{error.filename}: no such file; {EXPORT_AGAIN}") from None
    if problem:
        raise ExportError(problem)
    dtypes = [saved_model_metadata(version).dtype for version in versions]
    for version, dtype in zip(versions[1:], dtypes[1:]):
        if dtype != dtypes[0]:
            raise ExportError(f"{version}: a {dtype} export, {versions[0]} a {dtypes[0]} one: "
                              f"an ensemble's members compute in one dtype")
    return versions


def open_ensemble(versions: Sequence[Path], beam_size: int | None = None,
                  shortlist: bool = True) -> Translator:
    """An in-process Translator of the SavedModel versions' models (`ensemble_exports`) as one
    Ensemble, with the first version's decoding settings (and `beam_size`) and lexical
    shortlist (as an ensemble export carries its first run's; `shortlist` false: none).

    Raises:
        ExportError: a version's graph, variables or spm.model truncated or corrupt.
    """
    from export.metadata import EnsembleMember
    from export.translator import Translator
    from keras_transformer.ensemble import Ensemble

    spm_model_proto = _spm_model_proto(versions[0])
    exports = [open_saved_model(version, shortlist) for version in versions]
    models = [model for export in exports for model in export.models()]
    records = [record for export in exports for record in export.metadata.ensemble or
               [EnsembleMember(str(export.version_dir), "", export.metadata.model)]]
    settings = exports[0].metadata.settings
    if beam_size is not None:
        settings = dataclasses.replace(settings, beam_size=beam_size)
    return Translator(Ensemble(models), spm_model_proto, settings, ensemble=records,
                      shortlist=exports[0].lexical_shortlist())


def _check_onnx(path: Path) -> None:
    """Parses an ONNX model file: a truncated or corrupt one fails here, in one line, rather
    than in ONNX Runtime (a child process when TensorFlow is imported)."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        onnx.load_model(str(path), load_external_data=False)
    except DecodeError:
        raise unreadable(path) from None
