"""Sequence-level knowledge distillation (Kim & Rush 2016) in prepare: the teacher that
`data.distill_from` names translates the train sources, and the student trains on them.

The teacher is a run directory holding an export (`keras-transformer export`); its fastest
runtime translates (`TEACHER_RUNTIMES`: CTranslate2's float32 model, else ONNX, else the
SavedModel), with the beam and limits it was exported with. Several runs are an ensemble
(`keras_transformer.ensemble`): their SavedModels decode as one model in process
(`export.loading.open_ensemble`), with the first run's decoding settings. The student shares
the teacher's SentencePiece model (prepare copies it, as a fine-tuning run copies its
parent's), so that the student's pieces are the ones the teacher wrote; the teacher's
vocabulary must hold the run's corpus tags and target-language tokens. A multilingual run's
sources go to the teacher with their target language
(`keras_transformer.languages.split_language`).

Translations are written a window at a time into data/distill/SHARD.tgt beside a record of
the teacher and the source shard they belong to (data/distill/SHARD.json), flushed, outside
prepare's staging directory: an interrupted prepare, run again, goes on after the last whole
line (`pipelines.translate_stream.resumed_output`) and never translates a line twice; another
teacher or another source shard starts that shard again. Then each staged train shard's
targets become the teacher's (with `data.distill_originals`, the shard holds each pair twice:
the teacher's target, then the original one).

Example:
    teacher = find_teacher(config)  # None unless data.distill_from; checked before any work
    distill_shards(teacher, staging, ["train-00000-of-00001"], paths.data / DISTILL_DIR)
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import shutil
from pathlib import Path
from typing import Sequence, TextIO

from export import ExportError
from export.loading import (LineTranslator, ensemble_exports, export_files, open_ensemble,
                            open_translator, resolve_export)
from keras_transformer.languages import split_language
from pipelines import InputError
from pipelines.config import DataConfig, PipelineConfig
from pipelines.corpus.shards import train_corpora
from pipelines.corpus.splitting import Splits
from pipelines.files import atomic_open, file_sha256
from pipelines.paths import RunPaths
from pipelines.progress import PassProgress
from pipelines.translate_stream import TranslateWindow, resumed_output, translate_windows

FIELD = "data.distill_from"
DISTILL_DIR = "distill"  # runs/NAME/data/distill/: the teacher's translations, kept
TEACHER_RUNTIMES = ("ct2", "onnx", "tf")  # fastest first (docs/decoding-speed.md)
WINDOW = 1024  # source lines translated and written at a time
BATCH_SIZE = 32  # lines of a runtime's batch


@dataclasses.dataclass(frozen=True)
class Teacher:
    """A teacher: its run directories (several: an ensemble), the runtime and export
    directories that translate, its SentencePiece model (the student's), and what identifies
    its translations (the exports' metadata and files)."""

    runs: tuple[Path, ...]
    runtime: str  # of TEACHER_RUNTIMES; an ensemble's: tf
    exports: tuple[Path, ...]  # the directory resolve_export found, one per run
    spm_model: Path
    identity: str

    def describe(self) -> str:
        if len(self.runs) == 1:
            return f"{self.runs[0]} ({self.runtime} export {self.exports[0]})"
        return (f"an ensemble of {' + '.join(map(str, self.runs))} (their SavedModels "
                f"{', '.join(map(str, self.exports))})")

    def open(self) -> LineTranslator:
        """The translator of the teacher's export (an ensemble's: built in process)."""
        if len(self.runs) == 1:
            return open_translator(self.runs[0], self.runtime)
        return open_ensemble(self.exports)


def find_teacher(config: PipelineConfig) -> Teacher | None:
    """The teacher `data.distill_from` names, checked before any work; None when the run is not
    distilled.

    Raises:
        InputError: `data.distill_from: RUN: ...` naming the problem: no such run directory,
            no export in it, an export made with another vocabulary than the run's; for an
            ensemble, members of other vocabularies or dtypes (`ensemble_exports`).
    """
    runs = tuple(map(Path, config.data.teachers()))
    if not runs:
        return None
    for run in runs:
        if not run.is_dir():
            raise InputError(f"{FIELD}: {run}: no such run directory")
        if not RunPaths(run).spm_model.is_file():
            raise InputError(f"{FIELD}: {run}: not a run directory (no "
                             f"{RunPaths(run).spm_model.relative_to(run)})")
    if len(runs) == 1:
        runtime, export = _fastest_export(runs[0])
        exports = (export,)
    else:
        runtime = "tf"
        try:
            exports = tuple(ensemble_exports(runs))
        except ExportError as error:
            raise InputError(f"{FIELD}: {error}") from None
    for run, export in zip(runs, exports):
        export_spm, spm_model = export_files(runtime, export)[1], RunPaths(run).spm_model
        if export_spm.is_file() and export_spm.read_bytes() != spm_model.read_bytes():
            raise InputError(f"{FIELD}: {run}: its export {export} was made with another "
                             f"vocabulary than {spm_model}; export the teacher again")
    return Teacher(runs, runtime, exports, RunPaths(runs[0]).spm_model,
                   _identity(runtime, exports))


def check_languages(data: DataConfig, teacher: Teacher) -> None:
    """Refuses a teacher trained on other language pairs than the run's corpora, where both are
    known (the teacher's data/train.json records them; older runs' do not).

    Raises:
        InputError: `data.distill_from: RUN translates SRC-TGT; corpus NAME is SRC-TGT`.
    """
    for run in teacher.runs:
        try:
            known = {corpus.languages for corpus in train_corpora(RunPaths(run).data)
                     if None not in corpus.languages}
        except InputError:  # not prepared here (an export copied alone): nothing to compare
            continue
        for corpus in data.corpus_configs():
            if known and None not in corpus.languages and corpus.languages not in known:
                pairs = ", ".join(sorted("-".join(pair) for pair in known))
                raise InputError(f"{FIELD}: {run} translates {pairs}; corpus {corpus.name} "
                                 f"is {'-'.join(corpus.languages)}")


def teacher_files(config: PipelineConfig) -> list[Path]:
    """The files of the teacher's export that its translations depend on (a stage input of
    prepare: `pipelines.run`); [] when the run is not distilled or the teacher is unusable
    (prepare says why)."""
    try:
        teacher = find_teacher(config)
    except InputError:
        return []
    return [path for export in teacher.exports for path in _export_files(export)
            ] if teacher else []


def distill_shards(teacher: Teacher, staging: Path, stems: Sequence[str], directory: Path,
                   originals: bool = False, stream: TextIO | None = None) -> tuple[int, int]:
    """Replaces the targets of the staged train shards `stems` (staging/STEM.src, .tgt) with
    the teacher's translations of their sources, kept in `directory` (data/distill) across
    interrupted runs; with `originals`, each shard holds its pairs twice (the teacher's
    targets, then the original ones). Returns (lines translated now, lines found translated).
    """
    directory.mkdir(parents=True, exist_ok=True)
    sources = [staging / f"{stem}.src" for stem in stems]
    totals = [_count_lines(path) for path in sources]
    progress = PassProgress(stream, unit="lines", eta=True)
    translator: LineTranslator | None = None
    translated = reused = 0
    for index, (stem, source, total) in enumerate(zip(stems, sources, totals)):
        output, record = directory / f"{stem}.tgt", directory / f"{stem}.json"
        wanted = {"teacher": teacher.identity, "source": file_sha256(source)}
        if not record.is_file() or json.loads(record.read_text()) != wanted:
            output.unlink(missing_ok=True)
            with atomic_open(record, "w") as file:
                json.dump(wanted, file)
        with resumed_output(output, rows_per_line=1) as (done, out), \
                open(source, encoding="utf-8") as lines:
            reused += done
            if done < total:
                translator = translator or teacher.open()
                before = sum(totals[:index]) + done  # lines of the split translated

                def report(count: int) -> None:
                    progress.update("distilling", before + count,
                                    (before + count) / sum(totals))

                translated += translate_windows(
                    (line.rstrip("\n") for line in itertools.islice(lines, done, None)),
                    _window_translator(translator), out, WINDOW, done, report)
        _stage_targets(staging, stem, output, originals)
    progress.close()
    for path in directory.iterdir():  # translations of shards this prepare no longer has
        if path.stem not in stems:
            path.unlink()
    return translated, reused


def _window_translator(translator: LineTranslator) -> TranslateWindow:
    """Translates a window of source lines as written to the shards: a multilingual run's
    lines (`<2fr> ...`) grouped by target language, each group after its token removed."""

    def translate(lines: list[str], first_index: int) -> list[str]:
        split = [split_language(line) for line in lines]
        outputs = [""] * len(lines)
        for language in dict.fromkeys(language for language, _ in split):
            rows = [row for row, (code, _) in enumerate(split) if code == language]
            translations = translator.translate_lines([split[row][1] for row in rows],
                                                      BATCH_SIZE, target_lang=language)
            for row, translation in zip(rows, translations):
                outputs[row] = translation + "\n"
        return outputs

    return translate


def _stage_targets(staging: Path, stem: str, distilled: Path, originals: bool) -> None:
    """staging/STEM.tgt := the teacher's targets (then the originals, with the sources twice)."""
    source, target = staging / f"{stem}.src", staging / f"{stem}.tgt"
    if not originals:
        shutil.copyfile(distilled, target)
        return
    for path, first in ((source, source), (target, distilled)):
        both = path.with_suffix(".both")
        with open(both, "wb") as out:
            for part in (first, path):
                with open(part, "rb") as file:
                    shutil.copyfileobj(file, out)
        both.replace(path)


def with_originals(splits: Splits) -> Splits:
    """`splits` counted as `distill_shards(..., originals=True)` leaves them: each train
    shard's pairs twice."""
    corpora = [dataclasses.replace(corpus, pairs=tuple(2 * n for n in corpus.pairs))
               for corpus in splits.corpora]
    return dataclasses.replace(splits, corpora=corpora,
                               pairs={**splits.pairs, "train": 2 * splits.pairs["train"]})


def _fastest_export(run: Path) -> tuple[str, Path]:
    """(runtime, directory) of the run's fastest export (`TEACHER_RUNTIMES`)."""
    for runtime in TEACHER_RUNTIMES:
        try:
            return resolve_export(run, runtime)
        except ExportError:
            continue
    raise InputError(f"{FIELD}: {run}: the teacher has no export; run `keras-transformer export` "
                     f"on its config first")


def _export_files(directory: Path) -> list[Path]:
    return sorted(path for path in directory.rglob("*") if path.is_file())


def _identity(runtime: str, exports: Sequence[Path]) -> str:
    """A digest of the exports that translate: their runtime, and each one's metadata and
    files (name, size, time)."""
    digest = hashlib.sha256(f"{runtime}\n".encode())
    for export in exports:
        metadata = export_files(runtime, export)[0]
        digest.update(metadata.read_bytes() if metadata.is_file() else b"")
        for path in _export_files(export):
            stat = path.stat()
            digest.update(f"{path.relative_to(export)} {stat.st_size} "
                          f"{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _count_lines(path: Path) -> int:
    with open(path, "rb") as file:
        return sum(block.count(b"\n") for block in iter(lambda: file.read(1 << 20), b""))
