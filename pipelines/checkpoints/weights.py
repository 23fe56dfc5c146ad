"""The model's weights in checkpoints: how a checkpoint lays them out (`model_checkpoint`),
model-only checkpoints written whole (`write_weights`: averaged/, ema/, best/ckpt-STEP/),
restored after checking them (`restore_model`), and which checkpoint a stage reads
(`weights_checkpoint`: evaluate.weights).

Restores check the checkpoint whole (pipelines.checkpoints.files.check_complete) and of the
model's architecture (pipelines.checkpoints.records.check_architecture) first, so that a
truncated copy or an edited `model` section is one line naming the file or the field.

Example:
    >>> restore_model(model, weights_checkpoint(RunPaths(run_dir), "averaged"))
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import keras
import tensorflow as tf

from export.versions import staging_directory
from keras_transformer.config import ModelConfig
from pipelines import InputError
from pipelines.checkpoints.best import best_checkpoint
from pipelines.checkpoints.files import (check_complete, replace_directory, restoring,
                                         tf_write_errors, training_checkpoints)
from pipelines.checkpoints.records import check_architecture, record_model
from pipelines.paths import CHECKPOINT_NAME, RunPaths


def model_checkpoint(model: keras.Model, **trackables) -> tf.train.Checkpoint:
    """A checkpoint of the model's variables (as the list `model.variables`, in their creation
    order) and of `trackables` (e.g. `optimizer=`).

    TF's object tracking does not see Keras 3 layers held in Python lists (the Transformer's
    encoder and decoder stacks): `tf.train.Checkpoint(model=model)` would save the embedding
    alone. Variable paths are no key either: they hold per-process layer counters.
    """
    return tf.train.Checkpoint(model=list(model.variables), **trackables)


def write_weights(variables: list, model_config: ModelConfig, directory: Path,
                  notes: dict) -> None:
    """Writes a model-only checkpoint of `variables` (in `model.variables`' order, as
    `model_checkpoint` saves them) as directory/ckpt, with directory/model.json and
    directory/NAME.json holding `notes` (NAME the directory's): built in a staging directory
    and renamed into place, so never half-written.

    Raises:
        OSError: TensorFlow's error of a full disk or an unwritable directory.
    """
    temporary = staging_directory(directory.parent, f".{directory.name}")
    try:
        with tf_write_errors(directory.parent):
            tf.train.Checkpoint(model=list(variables)).write(str(temporary / CHECKPOINT_NAME))
        record_model(temporary, model_config)
        (temporary / f"{directory.name}.json").write_text(json.dumps(notes, indent=2) + "\n")
        replace_directory(temporary, directory)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def restore_model(model: keras.Model, prefix: str | Path) -> None:
    """Loads the model's variables from a training or an averaged checkpoint.

    Raises:
        InputError: the checkpoint is incomplete, corrupt or of another architecture.
    """
    check_complete(prefix)
    check_architecture(model, prefix)
    with restoring(prefix):
        status = model_checkpoint(model).read(str(prefix))
    status.expect_partial().assert_existing_objects_matched()


def weights_checkpoint(paths: RunPaths, weights: str = "averaged") -> str:
    """The checkpoint prefix of `weights`: "averaged" (the latest training checkpoint while
    `average` has not run), "ema", "best" or "latest".

    Raises:
        InputError: the run has no such checkpoint.
    """
    if weights == "ema":
        if not paths.ema_index.exists():
            raise InputError(f"{paths.ema}: no moving average of the weights; train with "
                             f"train.ema_decay (e.g. 0.999), or choose other evaluate.weights")
        return str(paths.ema)
    if weights == "best":
        return best_checkpoint(paths)
    if weights == "averaged" and paths.averaged_index.exists():
        return str(paths.averaged)
    checkpoints = training_checkpoints(paths)
    if not checkpoints:
        raise InputError(f"{paths.checkpoints}: no checkpoint; run `keras-transformer train` "
                         f"first")
    return checkpoints[-1]

