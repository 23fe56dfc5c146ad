"""What a run's checkpoints were trained with, recorded beside them and checked before they are
resumed, averaged, fine-tuned or exported: the SentencePiece model (checkpoints/vocabulary.sha256)
and the model config (model.json beside each kind of checkpoint; without one, the shapes of the
checkpoint's variables), so that an edited `model` section or a vocabulary prepared again is
one line naming the fields, not a traceback or wrong translations.

Example:
    >>> record_vocabulary(paths)  # train, at each save
    >>> check_vocabulary(paths)  # average, evaluate, export, a resumed train: raises InputError
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import keras
import tensorflow as tf

from keras_transformer.config import ModelConfig
from pipelines import InputError
from pipelines.files import atomic_open, file_sha256
from pipelines.paths import MODEL_RECORD, RunPaths

# ModelConfig fields no weight depends on: a run may resume or decode with other values
# (max_length sizes no weight with sinusoidal positions; learned ones differ in shape).
NON_ARCHITECTURE_FIELDS = ("dropout", "attention_dropout", "relu_dropout", "label_smoothing",
                           "max_length", "alignment_heads")


def check_vocabulary(paths: RunPaths) -> None:
    """Refuses checkpoints trained with another SentencePiece model than the run's (a prepare
    run again since: the same ids would name other pieces).

    Raises:
        InputError: the recorded vocabulary differs from vocab/spm.model.
    """
    recorded = paths.checkpoint_vocabulary
    if recorded.is_file() and recorded.read_text().strip() != file_sha256(paths.spm_model):
        raise InputError(f"{paths.checkpoints}: trained with another vocabulary than "
                         f"{paths.spm_model} (prepared again since); move the checkpoints away "
                         f"to train afresh")


def record_vocabulary(paths: RunPaths) -> None:
    """Records the SentencePiece model the run's checkpoints are trained with."""
    with atomic_open(paths.checkpoint_vocabulary, "w") as file:
        file.write(file_sha256(paths.spm_model) + "\n")


def record_model(directory: Path, model_config: ModelConfig) -> None:
    """Records the model config of the checkpoints in `directory` (directory/model.json)."""
    with atomic_open(directory / MODEL_RECORD, "w") as file:
        json.dump(model_config.to_dict(), file, indent=2)
        file.write("\n")


def check_architecture(model: keras.Model, prefix: str | Path) -> None:
    """Refuses a checkpoint of another architecture than `model`'s (the `model` section edited
    since it was trained): by the config recorded in its directory, else (no record: runs of
    older versions) by the shapes of its variables.

    Raises:
        InputError: naming the fields that differ, or the first variable.
    """
    check_recorded_architecture(prefix, model.model_config, "set the `model` section back, or "
                                "train afresh in another run_dir")
    saved, built = _saved_shapes(prefix), [list(variable.shape) for variable in model.variables]
    if saved != built:
        detail = (f"{len(saved)} variables there, {len(built)} in the config's model"
                  if len(saved) != len(built) else next(
                      f"variable {index} is {there} there, {here} in the config's model"
                      for index, (there, here) in enumerate(zip(saved, built)) if there != here))
        raise InputError(f"{prefix} holds another model than the `model` section describes "
                         f"({detail}): set the section back to the one it was trained with")


def check_recorded_architecture(prefix: str | Path, model_config: ModelConfig, fix: str) -> None:
    """Refuses a checkpoint whose recorded config (model.json in its directory, if any) differs
    from `model_config` in a field that weights depend on.

    Raises:
        InputError: `PREFIX was trained with FIELD VALUE, ...; the config says FIELD VALUE, ...:
            FIX`.
    """
    trained = _recorded_model(Path(prefix).parent / MODEL_RECORD)
    configured = model_config.to_dict()
    changed = [name for name, value in configured.items()
               if name not in NON_ARCHITECTURE_FIELDS and name in trained
               and trained[name] != value]
    if changed:
        raise InputError(f"{prefix} was trained with {_fields(trained, changed)}; the config says "
                         f"{_fields(configured, changed)}: {fix}")


def _recorded_model(record: Path) -> dict:
    """The recorded model config, {} if there is none or it does not read."""
    try:
        return json.loads(record.read_text())
    except (OSError, ValueError):
        return {}


def _fields(values: dict, names: list[str]) -> str:
    """`name value, ...`, the values as YAML writes them (true, null)."""
    return ", ".join(f"{name} {json.dumps(values[name]).strip(chr(34))}" for name in names)


def _saved_shapes(prefix: str | Path) -> list[list[int]]:
    """The shapes of the model variables a checkpoint holds, in `model_checkpoint`'s order."""
    shapes = tf.train.load_checkpoint(str(prefix)).get_variable_to_shape_map()
    found = {int(match[1]): shape for key, shape in shapes.items()
             if (match := re.fullmatch(r"model/(\d+)/\.ATTRIBUTES/VARIABLE_VALUE", key))}
    return [list(found[index]) for index in sorted(found)]

