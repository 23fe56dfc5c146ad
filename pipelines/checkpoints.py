"""A run's checkpoints: checkpoints/ckpt-STEP (the model, the optimizer, whose iteration
count is the step and drives the learning-rate schedule, and the training clock) and
checkpoints/averaged/ckpt (the model alone); `CheckpointSaver` writes the training ones.

Never half-written: TF writes a checkpoint's data and index files under temporary names and
renames them once complete, then tf.train.CheckpointManager rewrites the `checkpoint` index
file atomically (a temporary file renamed over it). The latest checkpoint is read from that
index, so a process killed while saving leaves the previous checkpoint the latest (and at most
temporary files that the next save of that step overwrites). `averaged` is written in a
temporary directory renamed into place.

Before a restore, a checkpoint is checked whole (`checkpoint_problem`: its index reads, its
data files hold the bytes the index lists) and of the model's architecture (`check_architecture`:
the config recorded beside it, model.json, else the variables' shapes), so that a truncated
copy or an edited `model` section is one line naming the file or the field, not a traceback.
A save that fails (a full disk) leaves no partial checkpoint and says so in one line.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.config import ModelConfig
from pipelines import InputError
from pipelines.files import atomic_open
from pipelines.paths import CHECKPOINT_NAME, MODEL_RECORD, RunPaths
from pipelines.strategy import is_chief, task_id

if TYPE_CHECKING:
    from pipelines.budget import TrainingClock
    from pipelines.config import TrainConfig

# ModelConfig fields no weight depends on: a run may resume or decode with other values
# (max_length sizes no weight with sinusoidal positions; learned ones differ in shape).
NON_ARCHITECTURE_FIELDS = ("dropout", "attention_dropout", "relu_dropout", "label_smoothing",
                           "max_length")
# What a full disk or an unwritable directory makes TensorFlow's file writes fail with.
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


def make_manager(checkpoint: tf.train.Checkpoint, directory: Path,
                 keep: int) -> tf.train.CheckpointManager:
    """Saves `directory/ckpt-STEP` (pass `checkpoint_number=step`), keeping the last `keep`."""
    return tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=keep,
                                      checkpoint_name=CHECKPOINT_NAME)


def training_checkpoints(paths: RunPaths) -> list[str]:
    """Prefixes of the run's kept training checkpoints, oldest first."""
    state = tf.train.get_checkpoint_state(str(paths.checkpoints))
    return list(state.all_model_checkpoint_paths) if state else []


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


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, in hexadecimal."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def newest_readable_checkpoint(directory: Path,
                               repair_index: bool) -> tuple[str | None, list[str]]:
    """(the checkpoint to resume from, why each newer one cannot be): the newest `ckpt-STEP`
    on disk whose files are complete (`checkpoint_problem`), whatever the index says. When the
    index does not name it latest (the index unreadable, its latest truncated or gone), with
    `repair_index` the index is rewritten to list the complete ones, so that training resumes
    there and never starts again over good checkpoints.

    Raises:
        InputError: checkpoint files that are all incomplete.
    """
    on_disk = sorted({match[1] for path in directory.glob(f"{CHECKPOINT_NAME}-*")
                      if (match := re.fullmatch(rf"({CHECKPOINT_NAME}-\d+)\.(index|data-.*)",
                                                path.name))}, key=checkpoint_step)
    newest, skipped = None, []
    for name in reversed(on_disk):
        problem = checkpoint_problem(directory / name)
        if problem is None:
            newest = str(directory / name)
            break
        skipped.append(problem)
    if newest is None:
        if skipped:
            raise InputError(f"{directory}: no checkpoint there is complete ({skipped[0]}); "
                             f"move the directory away to train from step 0")
        return None, []
    listed = tf.train.latest_checkpoint(str(directory))  # None (a TF warning) if unreadable
    if repair_index and (listed is None or Path(listed) != Path(newest)):
        # with timestamps, which CheckpointManager needs to keep track of them
        complete = [str(directory / older) for older in on_disk
                    if checkpoint_step(older) <= checkpoint_step(newest)
                    and checkpoint_problem(directory / older) is None]
        saved = [Path(f"{prefix}.index").stat().st_mtime for prefix in complete]
        with tf_write_errors(directory):
            tf.compat.v1.train.update_checkpoint_state(
                str(directory), newest, all_model_checkpoint_paths=complete,
                all_model_checkpoint_timestamps=saved, last_preserved_timestamp=min(saved) - 1)
    return newest, skipped


def checkpoint_problem(prefix: str | Path) -> str | None:
    """Why the checkpoint `prefix` cannot be restored, naming the file: its index missing or
    unreadable, a data file missing or shorter than the index says (a copy or a save cut
    short); None when it is complete."""
    prefix = Path(prefix)
    index = prefix.with_name(f"{prefix.name}.index")
    shards = sorted(prefix.parent.glob(f"{prefix.name}.data-*-of-*"))
    if not index.is_file():
        return f"{index}: no such file"
    if not shards or len(shards) != int(shards[0].name.rsplit("-of-", 1)[1]):
        return f"{prefix}.data-*: a data file is missing"
    data = shards[0] if len(shards) == 1 else f"{prefix}.data-*"
    try:
        reader = tf.train.load_checkpoint(str(prefix))
    except (tf.errors.OpError, ValueError) as error:
        return f"{index}: unreadable ({_reason(error)})"
    try:
        expected = _data_bytes(reader)
    except (tf.errors.OpError, IndexError) as error:  # reading its strings
        return f"{data}: truncated or corrupt ({_reason(error)})"
    present = sum(shard.stat().st_size for shard in shards)
    if present < expected:
        return f"{data}: truncated ({present:,} of {expected:,} bytes)"
    return None


def _data_bytes(reader: tf.train.CheckpointReader) -> int:
    """The bytes of a checkpoint's data files by its index (at least): each numeric tensor's
    elements, a string tensor's as TF's bundle writer lays them out (a varint length per
    string, a 4-byte checksum of the lengths, the strings)."""
    total = 0
    shapes = reader.get_variable_to_shape_map()
    for key, dtype in reader.get_variable_to_dtype_map().items():
        if dtype == tf.string:
            value = reader.get_tensor(key)
            strings = [value] if isinstance(value, bytes) else list(np.ravel(value))
            total += 4 + sum(max(1, math.ceil(len(s).bit_length() / 7)) + len(s)
                             for s in strings)
        elif dtype.is_numpy_compatible:  # (no other kind in our checkpoints: a lower bound)
            total += dtype.size * math.prod(shapes[key])
    return total


def check_complete(prefix: str | Path) -> None:
    """Raises InputError naming the file if the checkpoint is incomplete."""
    problem = checkpoint_problem(prefix)
    if problem is not None:
        raise InputError(f"{problem}; checkpoint {prefix} cannot be restored")


@contextlib.contextmanager
def restoring(prefix: str | Path) -> Iterator[None]:
    """Turns TensorFlow's errors of reading a corrupt checkpoint (a data checksum that does
    not match ...) into an InputError naming it."""
    try:
        yield
    except (tf.errors.OpError, IndexError) as error:
        raise InputError(f"{prefix}: unreadable checkpoint ({_reason(error)})") from None


@contextlib.contextmanager
def tf_write_errors(directory: Path) -> Iterator[None]:
    """Turns TensorFlow's errors of a full disk or an unwritable directory, while writing under
    `directory`, into the OSError the CLI prints in one line (`DIRECTORY: no space left on
    device`)."""
    try:
        yield
    except (tf.errors.ResourceExhaustedError, tf.errors.PermissionDeniedError) as error:
        number = next((n for n in WRITE_ERRNOS if os.strerror(n) in error.message), None)
        if number is None:
            raise
        raise OSError(number, os.strerror(number), str(directory)) from None


def _reason(error: Exception) -> str:
    """The first line of an error's message, without TF's `{{function_node ...}}` prefix."""
    message = getattr(error, "message", None) or str(error)
    return re.sub(r"^\{\{[^}]*\}\}\s*", "", message.strip().splitlines()[0])


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
    """Loads the model's variables from a training or an averaged checkpoint.

    Raises:
        InputError: the checkpoint is incomplete, corrupt or of another architecture.
    """
    check_complete(prefix)
    check_architecture(model, prefix)
    with restoring(prefix):
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


def default_checkpoint(paths: RunPaths) -> str:
    """The averaged checkpoint if there is one, else the latest training checkpoint."""
    if paths.averaged_index.exists():
        return str(paths.averaged)
    checkpoints = training_checkpoints(paths)
    if not checkpoints:
        raise InputError(f"{paths.checkpoints}: no checkpoint; run `keras-transformer train` "
                         f"first")
    return checkpoints[-1]


class CheckpointSaver:
    """Checkpoints of the model, its optimizer (whose iterations are the step) and the training
    clock, by steps and minutes. Under MultiWorkerMirroredStrategy every worker saves (saving
    may need collectives), the chief into checkpoints/, the others into a temporary directory
    removed at once."""

    def __init__(self, model: keras.Model, optimizer: keras.optimizers.Optimizer,
                 clock: TrainingClock, strategy: tf.distribute.Strategy, settings: TrainConfig,
                 paths: RunPaths) -> None:
        self.model, self.optimizer, self.clock = model, optimizer, clock
        self.strategy, self.settings = strategy, settings
        self.directory = paths.checkpoints
        self.chief, self.paths = is_chief(strategy), paths
        self.latest, self.skipped = (
            newest_readable_checkpoint(self.directory, repair_index=self.chief)
            if self.directory.is_dir() else (None, []))
        if self.latest is not None:
            check_vocabulary(paths)
            check_architecture(model, self.latest)
        write_dir = self.directory if self.chief else self.directory / f".{task_id(strategy)}"
        self.manager = make_manager(model_checkpoint(model, optimizer=optimizer, clock=clock),
                                    write_dir, settings.keep_checkpoints)
        self.last_save = time.monotonic()

    def restore(self) -> int:
        """Restores the latest checkpoint, if any; returns its step (0 without one)."""
        if self.latest is None:
            return 0
        weights = model_checkpoint(self.model, optimizer=self.optimizer)
        with restoring(self.latest):
            weights.restore(self.latest).assert_existing_objects_matched().expect_partial()
            # Checkpoints of versions without a clock still resume: their time is not known.
            tf.train.Checkpoint(clock=self.clock).restore(self.latest).expect_partial()
        step = int(self.optimizer.iterations.numpy())
        if step != checkpoint_step(self.latest):
            raise RuntimeError(f"{self.latest} holds step {step}, not "
                               f"{checkpoint_step(self.latest)}")
        self.clock.restored()
        return step

    def minutes_due(self) -> bool:
        """Whether train.checkpoint_every_minutes have passed since the last save, on this
        worker's clock (`pipelines.strategy.any_worker` agrees it)."""
        minutes = self.settings.checkpoint_every_minutes
        return bool(minutes) and time.monotonic() - self.last_save >= 60 * minutes

    @staticmethod
    def due(step: int, every_steps: int, minutes_due: bool) -> bool:
        """Whether to save at `step`: every `every_steps`, or when `minutes_due`."""
        return minutes_due or bool(every_steps and step % every_steps == 0)

    def save(self, step: int) -> None:
        """Saves checkpoint `step`; a failed save (a full disk) leaves no part of it.

        Raises:
            OSError: TensorFlow's error of a full disk or an unwritable directory.
        """
        self.clock.before_save()
        directory = Path(self.manager.directory)
        try:
            with tf_write_errors(directory):
                path = self.manager.save(checkpoint_number=step)
        except BaseException:
            _remove_partial_checkpoint(directory / f"{CHECKPOINT_NAME}-{step}")
            raise
        finally:
            if not self.chief:
                shutil.rmtree(directory, ignore_errors=True)
        self.last_save = time.monotonic()
        if self.chief:
            self.latest = path
            record_vocabulary(self.paths)
            record_model(self.directory, self.model.model_config)


def _remove_partial_checkpoint(prefix: Path) -> None:
    """Removes what a failed save of `prefix` left: TensorFlow's temporary directory and index
    file, and the checkpoint's files unless they are complete (the save failed after writing
    them)."""
    shutil.rmtree(prefix.with_name(f"{prefix.name}_temp"), ignore_errors=True)
    for temporary in prefix.parent.glob("checkpoint.tmp*"):  # the index being rewritten
        temporary.unlink(missing_ok=True)
    if checkpoint_problem(prefix) is not None:
        for path in prefix.parent.glob(f"{prefix.name}.*"):
            path.unlink(missing_ok=True)
