"""The export stage: a run's best checkpoint -> runs/NAME/export/.

    export/saved_model/<version>/   a new version per export (TF Serving base path)
    export/models.config            TF Serving's model config for it
    export/batching_parameters.txt  TF Serving's batching (--enable_batching) for it
    export/onnx/{model,model_int8,translator,score}.onnx, spm.model, translator.json
    export/ctranslate2/{float32,int8}/, spm.model, translator.json   (format ctranslate2)

The model is restored in float32 (`pipelines.models`; the SavedModel's in
export.saved_model_dtype) and decodes with the `evaluate` section's settings (beam 4, alpha
0.6, source length + 50), a source cut to data.max_length tokens. The warm-up requests
carry the first dev sentences. The ONNX and CTranslate2 directories are written under a
temporary name and swapped in by renames, each SavedModel version by one rename.

With `ensemble` (`export CONFIG --ensemble OTHER ...`), CONFIG's run and the other runs' models
are exported as one Ensemble (`keras_transformer.ensemble`: one beam search over the mean of
their log-probabilities) into CONFIG's export/, with its `evaluate` and `export` sections; its
translator.json names the members (runs and checkpoints). Before any work, the runs are checked
to share one spm.model byte for byte and their declared language pairs, and to hold their
weights. CTranslate2 cannot decode an ensemble: export.formats' ctranslate2 is skipped (the
summary says so), --format ctranslate2 refused.

Example:
    print(export_run(load_config("demo")).format())
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path
from typing import Callable, Sequence

import export
from export.saved_model import WARMUP_TEXT, export_saved_model
from export.versions import staging_directory
from pipelines import InputError
from pipelines.checkpoints.files import replace_directory, tf_write_errors
from pipelines.config import PipelineConfig
from pipelines.config.export import EXPORT_FORMATS
from pipelines.files import atomic_open, check_writable
from export.loading import vocabulary_mismatch
from export.metadata import EnsembleMember
from keras_transformer.ensemble import Ensemble
from keras_transformer.model import Transformer
from pipelines.checkpoints.weights import weights_checkpoint
from pipelines.models import (load_ensemble_for_inference, load_model_for_inference,
                              run_tokenizer, run_translator)
from keras_transformer.shortlist_table import Shortlist
from pipelines.models import load_model_for_inference, run_shortlist, run_translator
from pipelines.paths import RunPaths

WARMUP_SENTENCES = 4
MODELS_CONFIG = Path(export.__file__).with_name("serving") / "models.config"
BATCHING_PARAMETERS = MODELS_CONFIG.with_name("batching_parameters.txt")
NO_CT2_ENSEMBLE = "CTranslate2 cannot decode an ensemble"


@dataclasses.dataclass(frozen=True)
class ExportSummary:
    """What export wrote."""

    checkpoint: str
    saved_model: Path | None  # the new version's directory
    saved_model_dtype: str  # its Keras dtype policy and why, e.g. "float32: as configured"
    onnx: Path | None
    ctranslate2: Path | None
    beam_size: int
    alpha: float
    seconds: float
    saved_model_xla_max_batch: int = 0  # export.saved_model_xla_max_batch
    saved_model_parallel_searches: int = 1  # export.saved_model_parallel_searches
    skipped: str = ""  # a format of export.formats left out, and why
    shortlist: str = ""  # the lexical shortlist the exports search with, or why none

    def format(self) -> str:
        """The summary as the CLI prints it."""
        lines = [f"exported {self.checkpoint} (beam {self.beam_size}, alpha {self.alpha}) "
                 f"in {self.seconds:.0f} s"]
        if self.saved_model:
            xla = (f"; XLA up to batch {self.saved_model_xla_max_batch}: serve with "
                   f"--xla_cpu_compilation_enabled=true" if self.saved_model_xla_max_batch
                   else "")
            parallel = (f"; {self.saved_model_parallel_searches} searches side by side: serve "
                        f"with --tensorflow_intra_op_parallelism=1"
                        if self.saved_model_parallel_searches > 1 else "")
            lines.append(f"  saved_model  {self.saved_model} (TF Serving: "
                         f"{self.saved_model.parent.parent / 'models.config'}; "
                         f"{self.saved_model_dtype}{xla}{parallel})")
        if self.onnx:
            lines.append(f"  onnx         {self.onnx}/{{model,model_int8,translator,score}}.onnx")
        if self.ctranslate2:
            lines.append(f"  ctranslate2  {self.ctranslate2}/{{float32,int8}}")
        if self.skipped:
            lines.append(f"  skipped      {self.skipped}")
        if self.shortlist:
            lines.append(f"  shortlist    {self.shortlist}")
        return "\n".join(lines)


def export_run(config: PipelineConfig, formats: Sequence[str] | None = None,
               checkpoint: str | None = None,
               ensemble: Sequence[PipelineConfig] = ()) -> ExportSummary:
    """Exports the run's model (default: the averaged checkpoint, else the latest) in
    `formats` (default: the `export` section's); with `ensemble`, the runs' models (their
    evaluate.weights) and this one's as one Ensemble (module docstring).

    Raises:
        InputError: an unknown format, or the run has no vocabulary or checkpoint, or one that
            cannot be restored (incomplete, of another vocabulary or architecture); an
            ensemble's run of another vocabulary or language pair, or --format ctranslate2.
        ConfigError: export.saved_model_dtype mixed_bfloat16 where oneDNN would abort on it.
        OSError: export/ cannot be written (read-only, a full disk).
    """
    asked, formats = formats, config.export.formats if formats is None else formats
    unknown = sorted(set(formats) - set(EXPORT_FORMATS))
    if unknown or not formats:
        raise InputError(f"unknown export format(s) {unknown or list(formats)}; "
                         f"choose from {', '.join(EXPORT_FORMATS)}")
    members = (config, *ensemble) if ensemble else ()
    skipped = ""
    if members:
        _check_ensemble(members, checkpoint)
        if "ctranslate2" in formats:
            if asked is not None or formats == ("ctranslate2",):
                raise InputError(f"--format ctranslate2: {NO_CT2_ENSEMBLE} (it decodes one "
                                 f"model); export saved_model and/or onnx")
            formats = tuple(name for name in formats if name != "ctranslate2")
            skipped = f"ctranslate2 (in export.formats): {NO_CT2_ENSEMBLE}"
    dtype, dtype_reason = config.export.resolved_saved_model_dtype()
    start = time.perf_counter()
    paths = RunPaths(config.run_path)
    check_writable(paths.export)
    # ONNX and CTranslate2 take a float32 model; the SavedModel one in `dtype`.
    first_dtype = "float32" if set(formats) - {"saved_model"} else dtype

    def load(dtype: str) -> tuple[Transformer | Ensemble, tuple[EnsembleMember, ...], str]:
        """(the model or ensemble, its members' records, the checkpoint(s) read)."""
        if not members:
            model, prefix = load_model_for_inference(config, checkpoint, dtype)
            return model, (), prefix
        model, records = load_ensemble_for_inference(members, checkpoint, dtype)
        return model, records, " + ".join(record.checkpoint for record in records)

    model, records, read = load(first_dtype)
    shortlist = run_shortlist(config)
    translator = run_translator(config, model, ensemble=records, shortlist=shortlist)
    saved_model = onnx = ctranslate2 = None
    if "saved_model" in formats:
        served_model = model if first_dtype == dtype else load(dtype)[0]
        served = run_translator(config, served_model,
                                config.export.saved_model_xla_max_batch,
                                config.export.saved_model_parallel_searches, records,
                                shortlist)
        with tf_write_errors(paths.saved_model):
            saved_model = export_saved_model(served, paths.saved_model,
                                             warmup_text=_warmup_text(paths),
                                             model_name=config.name)
        write_models_config(paths.models_config, config.name, paths.saved_model)
        write_batching_parameters(paths.batching_parameters)
    if "onnx" in formats:
        from export.onnx import export_onnx

        onnx = _write_directory(lambda directory: export_onnx(translator, directory),
                                paths.onnx)
    if "ctranslate2" in formats:
        from export.ctranslate2 import export_ctranslate2

        ctranslate2 = _write_directory(
            lambda directory: export_ctranslate2(translator, directory), paths.ctranslate2)
    return ExportSummary(read, saved_model, dtype_reason, onnx, ctranslate2,
                         config.evaluate.beam_size, config.evaluate.alpha,
                         time.perf_counter() - start, config.export.saved_model_xla_max_batch,
                         config.export.saved_model_parallel_searches, skipped,
                         _shortlist_line(config, shortlist))


def _check_ensemble(members: Sequence[PipelineConfig], checkpoint: str | None) -> None:
    """Refuses, before any work, an ensemble of runs (the first's weights `checkpoint`, if
    given) where a run lacks its vocabulary or weights, or differs from the first run in its
    spm.model (byte for byte) or in the language pairs both declare.

    Raises:
        InputError: naming the run and what it lacks or how it differs.
    """
    first = members[0]
    for index, member in enumerate(members):
        paths = RunPaths(member.run_path)
        try:
            run_tokenizer(paths)
            if index or checkpoint is None:
                weights_checkpoint(paths, member.evaluate.weights)
        except InputError as error:
            raise InputError(f"ensemble member {member.run_path}: {error}") from None
        pairs, first_pairs = member.data.language_pairs(), first.data.language_pairs()
        if pairs and first_pairs and pairs != first_pairs:
            raise InputError(f"ensemble member {member.run_path}: translates "
                             f"{_format_pairs(pairs)}, {first.run_path} "
                             f"{_format_pairs(first_pairs)}: an ensemble's members translate "
                             f"one language pair")
    problem = vocabulary_mismatch([RunPaths(member.run_path).spm_model for member in members])
    if problem:
        raise InputError(f"ensemble member {problem}")


def _format_pairs(pairs: set[tuple[str, str]]) -> str:
    return ", ".join(f"{source}-{target}" for source, target in sorted(pairs))


def _shortlist_line(config: PipelineConfig, shortlist: Shortlist | None) -> str:
    """The summary's line on the exports' lexical shortlist (said once)."""
    path = RunPaths(config.run_path).shortlist
    if shortlist is not None:
        return (f"{shortlist.table.shape[1]} candidates a source piece and the "
                f"{shortlist.frequent} most frequent pieces ({path})")
    if not config.export.shortlist:
        return "none (export.shortlist: false): every piece searched"
    return (f"none: {path} is missing (a run prepared before shortlists; prepare again to "
            f"have one): every piece searched")


def _write_directory(write: Callable[[Path], object], target: Path) -> Path:
    """Runs `write` on a staging directory beside `target`, then swaps it in; returns target."""
    temporary = staging_directory(target.parent, f".{target.name}")
    try:
        write(temporary)
        replace_directory(temporary, target)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return target


def write_batching_parameters(path: Path) -> None:
    """TF Serving's --batching_parameters_file (the template export/serving/
    batching_parameters.txt, its comments kept, num_batch_threads this machine's cores)."""
    body = BATCHING_PARAMETERS.read_text().replace("{threads}", str(os.cpu_count() or 1))
    with atomic_open(path, "w") as file:
        file.write(body)


def write_models_config(path: Path, name: str, base_path: Path) -> None:
    """TF Serving's --model_config_file for the model `name` at `base_path` (the template
    export/serving/models.config without its comments)."""
    body = "".join(line for line in MODELS_CONFIG.read_text().splitlines(keepends=True)
                   if not line.startswith("#"))
    body = body.replace("{name}", name).replace("{base_path}", str(base_path.resolve()))
    with atomic_open(path, "w") as file:
        file.write('# Written by `keras-transformer export` (README.md, "Serving").\n' + body)


def _warmup_text(paths: RunPaths) -> list[str]:
    """The first dev sentences (non-empty), else a fixed pair."""
    dev = paths.split("dev")[0]
    if not dev.is_file():
        return list(WARMUP_TEXT)
    with open(dev, encoding="utf-8") as file:
        lines = [line.strip() for line, _ in zip(file, range(WARMUP_SENTENCES))]
    return [line for line in lines if line] or list(WARMUP_TEXT)
