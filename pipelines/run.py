"""`keras-transformer run`: prepare -> train -> average -> evaluate -> export, each stage skipped
when its outputs are newer than its inputs and its part of the config is unchanged.

A stage that completes writes runs/NAME/stages/STAGE.json with a fingerprint of the config
sections it reads; a stage is up to date when that stamp matches, all its outputs exist, and
the oldest output is newer than the newest input (the previous stage's outputs). So a rerun of
a finished run does nothing, and deleting a stage's outputs reruns that stage and whatever
reads them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Callable

from pipelines.config import PipelineConfig
from pipelines.files import atomic_open
from pipelines.shards import MANIFEST

SPLIT_FILES = [f"data/{MANIFEST}"] + [f"data/{split}.{side}" for split in ("dev", "test")
                                      for side in ("src", "tgt")]
VOCAB = "vocab/spm.model"
LATEST_CHECKPOINT = "checkpoints/checkpoint"
AVERAGED = "checkpoints/averaged/ckpt.index"


@dataclasses.dataclass(frozen=True)
class Stage:
    """One pipeline stage: what it reads (run-relative paths and config sections), what it
    writes, and the function doing it (returning text to print)."""

    name: str
    sections: tuple[str, ...]
    inputs: Callable[[PipelineConfig], list[str]]
    outputs: Callable[[PipelineConfig], list[str]]
    action: Callable[[PipelineConfig], str]


def _prepare(config: PipelineConfig) -> str:
    from pipelines.prepare import prepare

    return prepare(config).format()


def _train(config: PipelineConfig) -> str:
    from pipelines.train import train

    summary = train(config)
    with atomic_open(config.run_path / "logs" / "train_summary.json", "w") as file:
        json.dump(dataclasses.asdict(summary), file, indent=2, default=str)
    return summary.format()


def _average(config: PipelineConfig) -> str:
    from pipelines.average import average

    return average(config).format()


def _evaluate(config: PipelineConfig) -> str:
    from pipelines.evaluate import evaluate

    return "\n".join(evaluate(config, split=split).format() for split in config.evaluate.splits)


def _export(config: PipelineConfig) -> str:
    from export.pipeline import export_run

    return export_run(config).format()


STAGES = (
    Stage("prepare", ("data",), lambda c: [], lambda c: SPLIT_FILES + [VOCAB], _prepare),
    Stage("train", ("data", "model", "train"), lambda c: SPLIT_FILES + [VOCAB],
          lambda c: [LATEST_CHECKPOINT], _train),
    Stage("average", ("train",), lambda c: [LATEST_CHECKPOINT], lambda c: [AVERAGED], _average),
    Stage("evaluate", ("model", "evaluate"),
          lambda c: [AVERAGED, VOCAB] + [f"data/{s}.{side}" for s in c.evaluate.splits
                                         for side in ("src", "tgt")],
          lambda c: [f"eval/{split}.json" for split in c.evaluate.splits], _evaluate),
    Stage("export", ("model", "evaluate", "export"), lambda c: [AVERAGED, VOCAB],
          lambda c: ["export/saved_model", "export/onnx/model.onnx",
                     "export/onnx/translator.onnx"], _export),
)
STAGE_NAMES = tuple(stage.name for stage in STAGES)


def fingerprint(config: PipelineConfig, sections: tuple[str, ...]) -> str:
    """A hash of the config sections a stage reads."""
    values = {name: dataclasses.asdict(getattr(config, name)) for name in sections
              if hasattr(config, name)}
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stale_reason(config: PipelineConfig, stage: Stage) -> str | None:
    """Why `stage` must run, or None when it is up to date."""
    run = config.run_path
    stamp = run / "stages" / f"{stage.name}.json"
    if not stamp.exists():
        return "never completed"
    if json.loads(stamp.read_text()).get("config") != fingerprint(config, stage.sections):
        return f"config changed ({', '.join(stage.sections)})"
    outputs = [run / path for path in stage.outputs(config)]
    missing = [str(path) for path in outputs if not path.exists()]
    if missing:
        return f"missing {missing[0]}"
    inputs = [run / path for path in stage.inputs(config)]
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
        echo(f"[{stage.name}] running ({reason})")
        began = time.perf_counter()
        echo(stage.action(config))
        stamp = config.run_path / "stages" / f"{stage.name}.json"
        stamp.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(stamp, "w") as file:
            json.dump({"config": fingerprint(config, stage.sections),
                       "seconds": round(time.perf_counter() - began, 1)}, file)
        ran.append(stage.name)
    return ran


def report(config: PipelineConfig, examples: int = 3) -> str:
    """What a run produced: scores, training speed, exported files, and the first test
    sentences translated by each exported runtime."""
    from export.loading import RUNTIMES, open_translator

    run_path = config.run_path
    lines = [f"run {config.name} ({run_path})"]
    for split in config.evaluate.splits:
        scores_path = run_path / "eval" / f"{split}.json"
        if scores_path.exists():
            scores = json.loads(scores_path.read_text())
            lines.append(f"  {split:<9} BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  "
                         f"(beam {scores['beam_size']}, {scores['sentences']:,} sentences, "
                         f"{scores['seconds']:.0f} s)")
    summary_path = run_path / "logs" / "train_summary.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        budget = (f", ended by its {summary['budget_minutes']:g}-minute budget"
                  if summary.get("ended_by") == "budget" else "")
        lines.append(f"  training  {summary['tokens_per_second']:,.0f} target tokens/s, "
                     f"{summary['step']:,} steps in {summary['seconds'] / 60:.1f} min{budget}")
    export_dir = run_path / "export"
    if not export_dir.exists():
        return "\n".join(lines)
    lines.append(f"  exports   {export_dir / 'saved_model'} (TF Serving base path, "
                 f"{export_dir / 'models.config'})")
    lines.append(f"            {export_dir / 'onnx'}/{{model,translator}}.onnx")
    with open(run_path / "data" / "test.src", encoding="utf-8") as file:
        sources = [line.rstrip("\n") for line, _ in zip(file, range(examples))]
    translations = {runtime: open_translator(export_dir, runtime).translate_lines(sources)
                    for runtime in RUNTIMES}
    for index, source in enumerate(sources):
        lines.append(f"  source    {source}")
        lines += [f"  {runtime:<9} {translations[runtime][index]}" for runtime in RUNTIMES]
    return "\n".join(lines)
