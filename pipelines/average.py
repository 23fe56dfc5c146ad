"""The average stage: the element-wise mean of the model weights of the last N training
checkpoints (section 6.1: the last 5 for base models, 20 for big), or of the N best kept
(`train.average_from: best`, `train.keep_best`), saved as
runs/NAME/checkpoints/averaged/ckpt (model only; `pipelines.checkpoints.weights.restore_model`
loads it).

The optimizer slots are left out; integer variables (random-generator states) keep the newest
checkpoint's values. The directory is written under a temporary name and renamed into place,
with averaged.json listing the checkpoints averaged and model.json the model config.

Example:
    >>> average(load_config("demo")).format()  # the last train.average_last checkpoints
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import keras
import numpy as np

from pipelines import InputError
from pipelines.checkpoints.best import kept_checkpoints
from pipelines.checkpoints.files import checkpoint_step, training_checkpoints
from pipelines.checkpoints.records import check_vocabulary
from pipelines.checkpoints.weights import restore_model, write_weights
from pipelines.config import PipelineConfig
from pipelines.files import check_writable
from pipelines.models import build_model, run_tokenizer
from pipelines.paths import RunPaths


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
        InputError: the run has no checkpoint, or one that cannot be restored (incomplete, of
            another vocabulary or architecture).
    """
    paths = RunPaths(config.run_path)
    requested = last or config.train.average_last
    if config.train.average_from == "best":  # oldest first, as the last ones
        prefixes = sorted(kept_checkpoints(paths)[:requested], key=checkpoint_step)
    else:
        prefixes = training_checkpoints(paths)[-requested:]
    if not prefixes:
        kind = "best checkpoints kept (train.keep_best)" if config.train.average_from == "best" \
            else "checkpoints"
        raise InputError(f"{paths.checkpoints}: no {kind}; run `keras-transformer train` "
                         f"first")
    vocab_size = run_tokenizer(paths).vocab_size
    check_vocabulary(paths)
    check_writable(paths.checkpoints)
    model = build_model(config, vocab_size)
    averaged = [v for v in model.weights if keras.backend.is_float_dtype(v.dtype)]
    sums = [np.zeros(v.shape, np.float64) for v in averaged]
    for prefix in prefixes:  # oldest first: other variables keep the newest values
        restore_model(model, prefix)
        for total, variable in zip(sums, averaged):
            total += variable.numpy()
    for total, variable in zip(sums, averaged):
        variable.assign((total / len(prefixes)).astype(variable.dtype))

    write_weights(model.variables, model.model_config, paths.averaged.parent,
                  {"checkpoints": [str(Path(p).relative_to(paths.checkpoints)) for p in prefixes],
                   "steps": [checkpoint_step(p) for p in prefixes]})
    return AverageSummary(tuple(prefixes), requested, paths.averaged)
