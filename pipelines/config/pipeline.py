"""The whole pipeline config: the run name and directory, one section per stage, and the
checks that read two sections (train.batch_tokens against data.max_length, model.preset auto
against the budget, guided alignment against the alignments and heads, model.max_length
against data.max_length, the run directory).

Example:
    >>> config = PipelineConfig(name="demo", data=DataConfig(source="bible:en-fr"))
    >>> config.run_path, config.evaluate.beam_size
    (PosixPath('runs/demo'), 4)
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from pipelines.config.data import DataConfig
from pipelines.config.evaluate import EvaluateConfig
from pipelines.config.export import ExportConfig
from pipelines.config.model import ModelSection
from pipelines.config.train import TrainConfig
from pipelines.files import file_in_the_way
from pipelines.training.buckets import batch_tokens_problem
from pipelines.yaml_dataclasses import FieldError


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """A whole pipeline: the run name and directory, and one section per stage."""

    name: str
    data: DataConfig
    run_dir: str | None = None
    model: ModelSection = dataclasses.field(default_factory=ModelSection)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = dataclasses.field(default_factory=EvaluateConfig)
    export: ExportConfig = dataclasses.field(default_factory=ExportConfig)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", self.name):
            raise FieldError("name", f"must be letters, digits, '.', '_' or '-', got {self.name!r}")
        problem = batch_tokens_problem(self.train.batch_tokens, self.data.max_length)
        if problem:
            raise FieldError("train.batch_tokens", problem)
        if self.model.preset == "auto" and not self.train.max_minutes:
            raise FieldError("model.preset", "auto chooses the size that train.max_minutes "
                             "trains best: set train.max_minutes, or name a preset")
        if self.model.preset == "auto" and self.train.init_from:
            raise FieldError("model.preset", "a fine-tuned run keeps its parent's size "
                             "(train.init_from): name the parent's preset, not auto")
        self._check_guided_alignment()
        model_length = self.model.model_config().max_length
        if model_length < self.data.max_length:
            key = "model.max_length" if self.model.max_length is not None else "data.max_length"
            raise FieldError(key, f"model.max_length ({model_length}) must be at least "
                             f"data.max_length ({self.data.max_length})")
        blocking = file_in_the_way(self.run_path)
        if blocking is not None:
            where = "" if blocking == self.run_path else f"{blocking} is "
            raise FieldError("run_dir" if self.run_dir else "name",
                             f"{self.run_path}: {where}a file, not a directory")

    def _check_guided_alignment(self) -> None:
        """train.guided_alignment_weight needs the gold alignments of data.alignments, and it
        trains head 0 alone, which model.alignment_heads must then read (unset: 1)."""
        weight = self.train.guided_alignment_weight
        if weight and self.data.alignments == "none":
            raise FieldError("train.guided_alignment_weight", (
                f"needs the train pairs' word alignments: set data.alignments (eflomal), "
                f"or the weight to 0, got {weight!r} with data.alignments none"))
        heads = self.model.alignment_heads
        if weight and heads not in (None, 1):
            raise FieldError("model.alignment_heads", (
                f"guided alignment (train.guided_alignment_weight {weight!r}) trains head 0 "
                f"alone, which alignments then read: leave it unset or 1, got {heads!r}"))

    @property
    def run_path(self) -> Path:
        """Where this run's outputs live: `run_dir`, else runs/NAME."""
        return Path(self.run_dir) if self.run_dir else Path("runs") / self.name
