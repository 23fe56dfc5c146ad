"""A fine-tuning run's parent (`train.init_from`): the checkpoint the run starts from and the
vocabulary it keeps, found and checked before any work.

`init_from` names a run directory (its averaged checkpoint, else its latest training one) or a
checkpoint prefix inside a run directory (`runs/NAME/checkpoints/ckpt-STEP`). The parent must be
complete, trained with its run's vocabulary, and of the architecture that the child's `model`
section describes; `prepare` copies the parent's SentencePiece model and `train` refuses data
prepared with another. The child records its parent beside its checkpoints
(checkpoints/parent.json), so that its resumptions and its train summary name it.

Example:
    >>> find_parent(config)  # None unless train.init_from; checked before any work
    Parent(checkpoint='runs/general/checkpoints/averaged/ckpt', spm_model=...)
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import keras

from keras_transformer.tokenizer import PAD_ID
from pipelines import InputError
from pipelines.checkpoints.files import check_complete
from pipelines.checkpoints.records import check_recorded_architecture, check_vocabulary
from pipelines.checkpoints.weights import restore_model, weights_checkpoint
from pipelines.config import PipelineConfig
from pipelines.files import atomic_open, file_sha256
from pipelines.models import run_tokenizer
from pipelines.paths import RunPaths, run_root

FIELD = "train.init_from"


@dataclasses.dataclass(frozen=True)
class Parent:
    """The weights a fine-tuning run starts from and the vocabulary they were trained with."""

    checkpoint: str  # a checkpoint prefix
    spm_model: Path


def find_parent(config: PipelineConfig) -> Parent | None:
    """The parent that `train.init_from` names, checked; None when the run is not a
    fine-tuning.

    Raises:
        InputError: `train.init_from: ...` naming the path and the problem: no run directory
            or checkpoint there, no checkpoint in the run, an incomplete checkpoint, one trained
            with another vocabulary than its run's, or another architecture than the `model`
            section's (naming the fields and their values).
    """
    init_from = config.train.init_from
    if init_from is None:
        return None
    path = Path(init_from)
    try:
        root = run_root(path)
        if root is None:
            raise InputError(_why_no_run(path))
        if root.resolve() == config.run_path.resolve():
            raise InputError(f"{path}: this run itself; name the run to fine-tune from")
        checkpoint = weights_checkpoint(RunPaths(root)) if path.is_dir() else str(path)
        paths = RunPaths(root)
        check_complete(checkpoint)
        check_vocabulary(paths)
        vocab_size = run_tokenizer(paths).vocab_size
        check_recorded_architecture(
            checkpoint, config.model.model_config(vocab_size=vocab_size, pad_id=PAD_ID),
            "a fine-tuning run keeps its parent's architecture: set the `model` section to it")
    except InputError as error:
        raise InputError(f"{FIELD}: {error}") from None
    return Parent(checkpoint, paths.spm_model)


def _why_no_run(path: Path) -> str:
    """Why `path` names no parent run."""
    if path.is_dir():
        return f"{path}: not a run directory (it has no vocab/spm.model)"
    if Path(f"{path}.index").is_file():
        return (f"{path}: no run directory above this checkpoint holds its vocabulary "
                f"(vocab/spm.model); name the parent's run directory")
    return (f"{path}: no such run directory or checkpoint (a checkpoint prefix has a file "
            f"PREFIX.index)")


def check_parent_vocabulary(parent: Parent, paths: RunPaths) -> None:
    """Refuses a fine-tuning run whose data was prepared with another vocabulary than its
    parent's (prepared before `init_from` was set, or the parent's prepared again since).

    Raises:
        InputError: naming both SentencePiece models.
    """
    if file_sha256(paths.spm_model) != file_sha256(parent.spm_model):
        raise InputError(f"{FIELD}: {paths.spm_model} is not the parent's vocabulary "
                         f"({parent.spm_model}): run `keras-transformer prepare` again, which "
                         f"copies the parent's")


def record_parent(paths: RunPaths, parent: Parent) -> None:
    """Records, beside the run's checkpoints, the checkpoint the run started from."""
    paths.checkpoints.mkdir(parents=True, exist_ok=True)
    with atomic_open(paths.checkpoint_parent, "w") as file:
        json.dump({"init_from": str(Path(parent.checkpoint).resolve())}, file)
        file.write("\n")


def recorded_parent(paths: RunPaths) -> str | None:
    """The checkpoint the run's checkpoints were fine-tuned from, None for a run from scratch."""
    try:
        return json.loads(paths.checkpoint_parent.read_text())["init_from"]
    except FileNotFoundError:
        return None


def start_from_parent(config: PipelineConfig, start_step: int, model: keras.Model,
                      chief: bool) -> str | None:
    """A fine-tuning run without checkpoints starts from its parent's weights, loaded into
    `model` (the optimizer and the schedule start afresh); one with checkpoints (resumed at
    `start_step`) resumes from them, which must descend from the parent that `train.init_from`
    names. Returns the parent checkpoint the run descends from, if any; only the `chief`
    records or forgets it.

    Raises:
        InputError: the checkpoints descend from another parent, or the parent cannot be
            fine-tuned (`find_parent`, `check_parent_vocabulary`).
    """
    init_from, paths = config.train.init_from, RunPaths(config.run_path)
    recorded = recorded_parent(paths)
    if start_step and init_from is not None:
        named = Path(init_from).resolve()
        if recorded is None or not (named == Path(recorded) or named in Path(recorded).parents):
            origin = f"fine-tuned from {recorded}" if recorded else "trained from scratch"
            raise InputError(f"{FIELD}: {init_from}: {paths.checkpoints} holds a run {origin} "
                             f"(step {start_step:,}); move it away to fine-tune from {init_from}")
    if start_step:
        return recorded
    if init_from is None:
        if chief:  # a record of a fine-tuning whose checkpoints were moved away
            paths.checkpoint_parent.unlink(missing_ok=True)
        return None
    parent = find_parent(config)
    check_parent_vocabulary(parent, paths)
    restore_model(model, parent.checkpoint)
    if chief:
        record_parent(paths, parent)
    return str(Path(parent.checkpoint).resolve())
