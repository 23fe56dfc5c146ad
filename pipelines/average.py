"""The average stage: the element-wise mean of the model weights of the last N training
checkpoints (section 6.1: the last 5 for base models, 20 for big), saved as
runs/NAME/checkpoints/averaged/ckpt (model only; `pipelines.checkpoints.restore_model` loads it).

The optimizer slots are left out; integer variables (random-generator states) keep the newest
checkpoint's values. The directory is written under a temporary name and renamed into place,
with averaged.json listing the checkpoints averaged.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import keras
import numpy as np

from export.versions import staging_directory
from keras_transformer.tokenizer import Tokenizer
from pipelines import InputError
from pipelines.checkpoints import (check_vocabulary, checkpoint_step, model_checkpoint,
                                   replace_directory, restore_model, training_checkpoints)
from pipelines.config import PipelineConfig
from pipelines.models import build_model
from pipelines.paths import CHECKPOINT_NAME, RunPaths


@dataclasses.dataclass(frozen=True)
class AverageSummary:
    """What average wrote."""

    checkpoints: tuple[str, ...]  # the averaged checkpoints, oldest first
    requested: int
    path: Path  # the averaged checkpoint's prefix

    def format(self) -> str:
        """The summary as the CLI prints it."""
        steps = ", ".join(f"{checkpoint_step(path):,}" for path in self.checkpoints)
        note = "" if len(self.checkpoints) == self.requested else \
            f" (of {self.requested} requested: no more are kept)"
        return (f"averaged {len(self.checkpoints)} checkpoint(s){note} -> {self.path}\n"
                f"  steps     {steps}")


def average(config: PipelineConfig, last: int | None = None) -> AverageSummary:
    """Averages the last `last` (default `train.average_last`) checkpoints of the run.

    Raises:
        InputError: the run has no checkpoint.
    """
    paths = RunPaths(config.run_path)
    requested = last or config.train.average_last
    prefixes = training_checkpoints(paths)[-requested:]
    if not prefixes:
        raise InputError(f"{paths.checkpoints}: no checkpoints; run `keras-transformer "
                         f"train` first")
    check_vocabulary(paths)
    vocab_size = Tokenizer.from_file(paths.spm_model).vocab_size
    model = build_model(config, vocab_size)
    averaged = [v for v in model.weights if keras.backend.is_float_dtype(v.dtype)]
    sums = [np.zeros(v.shape, np.float64) for v in averaged]
    for prefix in prefixes:  # oldest first: other variables keep the newest values
        restore_model(model, prefix)
        for total, variable in zip(sums, averaged):
            total += variable.numpy()
    for total, variable in zip(sums, averaged):
        variable.assign((total / len(prefixes)).astype(variable.dtype))

    target = paths.averaged
    temporary = staging_directory(paths.checkpoints, ".averaged")
    try:
        model_checkpoint(model).write(str(temporary / CHECKPOINT_NAME))
        (temporary / "averaged.json").write_text(json.dumps(
            {"checkpoints": [Path(p).name for p in prefixes],
             "steps": [checkpoint_step(p) for p in prefixes]}, indent=2) + "\n")
        replace_directory(temporary, target.parent)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return AverageSummary(tuple(prefixes), requested, target)
