"""A run's checkpoints: checkpoints/ckpt-STEP (the model and the optimizer, whose iteration
count is the step and drives the learning-rate schedule) and checkpoints/averaged/ckpt (the
model alone).

Never half-written: TF writes a checkpoint's data and index files under temporary names and
renames them once complete, then tf.train.CheckpointManager rewrites the `checkpoint` index
file atomically (a temporary file renamed over it). The latest checkpoint is read from that
index, so a process killed while saving leaves the previous checkpoint the latest (and at most
temporary files that the next save of that step overwrites). `averaged` is written in a
temporary directory renamed into place.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import keras
import tensorflow as tf

from pipelines import InputError

CHECKPOINT_NAME = "ckpt"


def checkpoint_dir(run_path: Path) -> Path:
    return run_path / "checkpoints"


def averaged_prefix(run_path: Path) -> Path:
    """The averaged model's checkpoint prefix, `checkpoints/averaged/ckpt`."""
    return checkpoint_dir(run_path) / "averaged" / CHECKPOINT_NAME


def make_manager(checkpoint: tf.train.Checkpoint, directory: Path,
                 keep: int) -> tf.train.CheckpointManager:
    """Saves `directory/ckpt-STEP` (pass `checkpoint_number=step`), keeping the last `keep`."""
    return tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=keep,
                                      checkpoint_name=CHECKPOINT_NAME)


def training_checkpoints(run_path: Path) -> list[str]:
    """Prefixes of the run's kept training checkpoints, oldest first."""
    state = tf.train.get_checkpoint_state(str(checkpoint_dir(run_path)))
    return list(state.all_model_checkpoint_paths) if state else []


def checkpoint_step(prefix: str | Path) -> int:
    """The step of `.../ckpt-STEP`."""
    return int(str(prefix).rsplit("-", 1)[1])


def model_checkpoint(model: keras.Model, **trackables) -> tf.train.Checkpoint:
    """A checkpoint of the model's variables (as the list `model.variables`, in their creation
    order) and of `trackables` (e.g. `optimizer=`).

    TF's object tracking does not see Keras 3 layers held in Python lists (the Transformer's
    encoder and decoder stacks): `tf.train.Checkpoint(model=model)` would save the embedding
    alone. Variable paths are no key either: they hold per-process layer counters.
    """
    return tf.train.Checkpoint(model=list(model.variables), **trackables)


def restore_model(model: keras.Model, prefix: str | Path) -> None:
    """Loads the model's variables from a training or an averaged checkpoint."""
    status = model_checkpoint(model).read(str(prefix))
    status.expect_partial().assert_existing_objects_matched()


def replace_directory(new: Path, target: Path) -> None:
    """Moves the complete directory `new` to `target`, replacing any old one, by renames."""
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    new.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def default_checkpoint(run_path: Path) -> str:
    """The averaged checkpoint if there is one, else the latest training checkpoint."""
    averaged = averaged_prefix(run_path)
    if Path(f"{averaged}.index").exists():
        return str(averaged)
    checkpoints = training_checkpoints(run_path)
    if not checkpoints:
        raise InputError(f"{run_path / 'checkpoints'}: no checkpoint; run "
                         f"`keras-transformer train` first")
    return checkpoints[-1]
