"""`keras-transformer run`: prepare -> train -> average -> evaluate -> export, each stage skipped
when its outputs are newer than its inputs and its part of the config is unchanged.

A stage that completes writes runs/NAME/stages/STAGE.json with a fingerprint of the config
values it reads (changing `train.average_last` reruns average, not train) and the size and
content hash of each input (`input_signature`); a stage is up to date when that stamp matches
(an edited corpus file reruns prepare), all its outputs exist, and the oldest output is newer
than the newest input (the previous stage's outputs). Inputs and outputs come from the run's
map (`pipelines.paths.RunPaths`) and the config (the export formats chosen). So a rerun of a
finished run does nothing, and deleting a stage's outputs reruns that stage and whatever reads
them.

Example:
    >>> run(load_config("demo"))  # the stages that ran: all of them the first time, none after
    ['prepare', 'train', 'average', 'evaluate', 'export']
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Any, Callable

from pipelines.config import ExportConfig, PipelineConfig
from pipelines.config.evaluate import DECODING_KEYS
from pipelines.files import atomic_open
from pipelines.paths import RunPaths, parent_vocabulary

Files = Callable[[PipelineConfig, RunPaths], list[Path]]
FULL_HASH_BYTES = 64 << 20  # inputs up to this size are hashed whole
BLOCK_BYTES, SAMPLED_BLOCKS = 1 << 16, 64


@dataclasses.dataclass(frozen=True)
class Stage:
    """One pipeline stage: the config it reads (sections, or `section.field`, less `ignores`:
    `section.field`, or `section.field[].key` for a key of each item of a list field), the run
    files it reads and writes, and the function doing it (returning text to print)."""

    name: str
    keys: tuple[str, ...]
    inputs: Files
    outputs: Files
    action: Callable[[PipelineConfig], str]
    ignores: tuple[str, ...] = ()


def _prepare(config: PipelineConfig) -> str:
    from pipelines.corpus.prepare import prepare

    return prepare(config).format()


def _train(config: PipelineConfig) -> str:
    from pipelines.training.train import NothingToTrain, train

    try:
        return train(config).format()
    except NothingToTrain as notice:  # the stage is done: the later ones read its checkpoints
        return str(notice)


def _average(config: PipelineConfig) -> str:
    from pipelines.average import average

    return average(config).format()


def _evaluate(config: PipelineConfig) -> str:
    from pipelines.evaluate import evaluate

    return "\n".join(evaluate(config, split=split).format() for split in config.evaluate.splits)


def _export(config: PipelineConfig) -> str:
    from pipelines.export import export_run

    return export_run(config).format()


def input_signature(inputs: list[Path]) -> dict[str, list]:
    """What identifies each input that exists: its size and a SHA-256 of its content (of
    SAMPLED_BLOCKS evenly spaced blocks, with the modification time, above FULL_HASH_BYTES),
    so that an edit is seen even when the file keeps its time."""
    return {str(path): _identity(path) for path in inputs if path.is_file()}


def _identity(path: Path) -> list:
    size = path.stat().st_size
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        if size <= FULL_HASH_BYTES:
            for block in iter(lambda: file.read(BLOCK_BYTES), b""):
                digest.update(block)
            return [size, digest.hexdigest()]
        for index in range(SAMPLED_BLOCKS):
            file.seek((size - BLOCK_BYTES) * index // (SAMPLED_BLOCKS - 1))
            digest.update(file.read(BLOCK_BYTES))
    return [size, path.stat().st_mtime_ns, digest.hexdigest()]


def _corpus(config: PipelineConfig, paths: RunPaths) -> list[Path]:
    """The user's corpus files (sources `files`), the parent's vocabulary that a fine-tuning
    run copies (`train.init_from`) and the files of a distilled run's teacher's export."""
    from pipelines.corpus.distill import teacher_files

    splits = [split for corpus in config.data.corpus_configs()
              for split in (corpus.train, corpus.dev, corpus.test)]
    corpus = [path for split in splits if split for path in (split.src, split.tgt, split.tsv)
              if path]
    return corpus + [path for path in (parent_vocabulary(config),) if path] + teacher_files(config)


def _prepared(config: PipelineConfig, paths: RunPaths) -> list[Path]:
    return [paths.train_manifest, *paths.split("dev"), *paths.split("test"), paths.spm_model]


def _exported(config: PipelineConfig, paths: RunPaths) -> list[Path]:
    """The files of each configured format: the newest SavedModel version's graph, the ONNX
    models."""
    from export.metadata import (INT8_MODEL_FILE, MODEL_FILE, QUANTIZATIONS, SAVED_MODEL_GRAPH,
                                 TRANSLATOR_FILE)
    from export.versions import latest_version

    files = []
    if "saved_model" in config.export.formats:
        version = latest_version(paths.saved_model)
        files += [(version or paths.saved_model / "VERSION") / SAVED_MODEL_GRAPH,
                  paths.models_config]
    if "onnx" in config.export.formats:
        files += [paths.onnx / name for name in (MODEL_FILE, INT8_MODEL_FILE, TRANSLATOR_FILE)]
    if "ctranslate2" in config.export.formats:
        files += [paths.ctranslate2 / name / "model.bin" for name in QUANTIZATIONS]
    return files


STAGES = (
    Stage("prepare", ("data", "train.init_from"), _corpus, _prepared, _prepare,
          ignores=("data.noise", "data.corpora[].noise")),  # training's, not prepare's
    Stage("train", ("data", "model", "train"), _prepared, lambda c, p: [p.checkpoint_index],
          _train, ignores=("train.average_last", "train.average_from")),
    Stage("average", ("model", "train.average_last", "train.average_from",
                      "train.guided_alignment_weight"),
          lambda c, p: [p.weights_record("best" if c.train.average_from == "best"
                                         else "latest")],
          lambda c, p: [p.averaged_index], _average),
    Stage("evaluate", ("model", "evaluate", "data.max_length", "train.guided_alignment_weight"),
          lambda c, p: [p.weights_record(c.evaluate.weights), p.spm_model] + [
              path for split in c.evaluate.splits for path in p.split(split)],
          lambda c, p: [p.scores(split) for split in c.evaluate.splits], _evaluate),
    Stage("export", ("model", *(f"evaluate.{name}" for name in DECODING_KEYS),
                     "evaluate.weights", "data.max_length", "export",
                     "train.guided_alignment_weight"),
          lambda c, p: [p.weights_record(c.evaluate.weights), p.spm_model] + [
              p.shortlist] * p.shortlist.is_file(), _exported, _export),
)
STAGE_NAMES = tuple(stage.name for stage in STAGES)
# Keys added after runs were first stamped, left out of the fingerprints at these values (what
# the earlier version did), so that a run stamped before them stays up to date (`KEY[].FIELD`:
# a field of each item of the list KEY). The default data.language_id (auto) cleans what the
# earlier version kept: a run prepared before it keeps its data rather than being prepared and
# trained again. The export.shortlist keys at their defaults: a run prepared before shortlists
# has no table, so its exports are what the earlier version wrote.
ADDED_KEYS = {"data.alignments": "none", "data.corpora": (), "data.dev_test": None,
              "train.guided_alignment_weight": 0.0, "model.alignment_heads": None,
              "train.worker_timeout_minutes": 5.0, "data.noise": None,
              "data.corpora[].noise": None, "data.language_id": "auto",
              "data.distill_from": None, "data.distill_originals": False,
              **{f"export.{key}": getattr(ExportConfig(), key)  # at their defaults
                 for key in ("shortlist", "shortlist_k", "shortlist_frequent")}}


def fingerprint(config: PipelineConfig, stage: Stage) -> str:
    """A hash of the config values a stage reads (a whole section's: one dict of its fields)."""
    values = config_values(config, stage)
    grouped = {key: values[key] if "." in key else {
        name.partition(".")[2]: value for name, value in values.items()
        if name.partition(".")[0] == key} for key in stage.keys
        if "." not in key or key in values}  # an ADDED_KEYS key at its value is left out
    return _hash(grouped)


def config_values(config: PipelineConfig, stage: Stage) -> dict[str, Any]:
    """The config values a stage reads, by `section.field` (to name the ones that changed)."""
    values: dict[str, Any] = {}
    for key in stage.keys:
        section, _, field = key.partition(".")
        value = dataclasses.asdict(getattr(config, section))
        if field:
            values[key] = value[field]
        else:
            values |= {f"{section}.{name}": item for name, item in value.items()
                       if f"{section}.{name}" not in stage.ignores}
    for path in (*stage.ignores, *ADDED_KEYS):
        key, _, field = path.partition("[].")
        if field and key in values:  # that field of each item: out, or out at its value
            values[key] = type(values[key])(
                {name: item for name, item in entry.items() if name != field or (
                    path not in stage.ignores and item != ADDED_KEYS.get(path, item))}
                for entry in values[key])
    return {key: value for key, value in values.items()
            if key not in ADDED_KEYS or value != ADDED_KEYS[key]}


def _hash(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stale_reason(config: PipelineConfig, stage: Stage) -> str | None:
    """Why `stage` must run, or None when it is up to date."""
    paths = RunPaths(config.run_path)
    stamp = paths.stamp(stage.name)
    if not stamp.exists():
        return "not run yet"
    recorded = json.loads(stamp.read_text())
    if recorded.get("config") != fingerprint(config, stage):
        values = {key: _hash(value) for key, value in config_values(config, stage).items()}
        before = recorded.get("values", {})  # stamps of earlier versions have none
        changed = [key for key, value in values.items() if before.get(key) != value]
        return f"{', '.join(changed) if before else ', '.join(stage.keys)} changed"
    inputs = stage.inputs(config, paths)
    changed = [name for name, seen in input_signature(inputs).items()
               if recorded.get("inputs", {}).get(name, seen) != seen]
    if changed:
        return f"{changed[0]} changed"
    outputs = stage.outputs(config, paths)
    missing = [str(path) for path in outputs if not path.exists()]
    if missing:
        return f"missing {missing[0]}"
    newest_input = max((path.stat().st_mtime for path in inputs if path.exists()), default=0)
    if min(path.stat().st_mtime for path in outputs) < newest_input:
        return "inputs are newer than outputs"
    return None


def run(config: PipelineConfig, *, start: str | None = None, only: str | None = None,
        echo: Callable[[str], None] = print) -> list[str]:
    """Runs the stages in order (from `start`, or `only` one, both forced); returns the names
    of the stages that ran."""
    first = STAGE_NAMES.index(start) if start else 0
    ran = []
    for index, stage in enumerate(STAGES):
        if (only and stage.name != only) or index < first:
            continue
        forced = stage.name in (only, start) or (start and index > first)
        reason = "requested" if forced else stale_reason(config, stage)
        if reason is None:
            echo(f"[{stage.name}] up to date, skipped")
            continue
        echo(f"[{stage.name}] running: {reason}")
        began = time.perf_counter()
        echo(stage.action(config))
        with atomic_open(RunPaths(config.run_path).stamp(stage.name), "w") as file:
            values = config_values(config, stage)
            json.dump({"config": fingerprint(config, stage),
                       "values": {key: _hash(value) for key, value in values.items()},
                       "inputs": input_signature(stage.inputs(config, RunPaths(config.run_path))),
                       "seconds": round(time.perf_counter() - began, 1)}, file)
        ran.append(stage.name)
    return ran


def report(config: PipelineConfig, examples: int = 3) -> str:
    """What a run produced: scores, training speed, exported files, and the first test
    sentences translated by each exported runtime (a multilingual model's into the language
    of their token, `keras_transformer.languages`)."""
    from export.lines import translate_prepared
    from export.loading import RUNTIME_FORMATS, open_translator

    paths = RunPaths(config.run_path)
    lines = [f"run {config.name} ({paths.root})"]
    for split in config.evaluate.splits:
        if paths.scores(split).exists():
            scores = json.loads(paths.scores(split).read_text())
            lines.append(f"  {split:<9} BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  "
                         f"(beam {scores['beam_size']}, {scores['sentences']:,} sentences, "
                         f"{scores['seconds']:.0f} s)")
            lines += [f"    into {language}  BLEU {into['bleu']:.2f}  chrF {into['chrf']:.2f}"
                      for language, into in scores.get("languages", {}).items()]
    if paths.train_summary.exists():
        summary = json.loads(paths.train_summary.read_text())
        ended = {"budget": f", ended by its {summary.get('budget_minutes') or 0:g}-minute "
                           f"budget",
                 "early_stopping": ", ended by early stopping"}.get(summary.get("ended_by"), "")
        size = (f", model size {summary['model_size']} (auto)" if summary.get("model_size")
                else "")
        lines.append(f"  training  {summary['tokens_per_second']:,.0f} target tokens/s, "
                     f"{summary['step']:,} steps in {summary['seconds'] / 60:.1f} min{ended}"
                     f"{size}")
    runtimes = [runtime for runtime, format_ in RUNTIME_FORMATS.items()
                if format_ in config.export.formats and paths.export.exists()]
    if not runtimes:
        return "\n".join(lines)
    if "saved_model" in config.export.formats:
        lines.append(f"  exports   {paths.saved_model} (TF Serving base path, "
                     f"{paths.models_config})")
    if "onnx" in config.export.formats:
        lines.append(f"  exports   {paths.onnx}/{{model,model_int8,translator,score}}.onnx")
    if "ctranslate2" in config.export.formats:
        lines.append(f"  exports   {paths.ctranslate2}/{{float32,int8}} (CTranslate2)")
    with open(paths.split("test")[0], encoding="utf-8") as file:
        sources = [line.rstrip("\n") for line, _ in zip(file, range(examples))]
    translations = {}
    for runtime in runtimes:
        translator = open_translator(paths.export, runtime)
        translations[runtime] = translate_prepared(
            lambda texts, language: translator.translate_lines(texts, target_lang=language),
            sources, translator.metadata.target_languages)
    for index, source in enumerate(sources):
        lines.append(f"  source    {source}")
        lines += [f"  {runtime:<9} {translations[runtime][index]}" for runtime in runtimes]
    return "\n".join(lines)
