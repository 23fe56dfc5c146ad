"""A run's checkpoints: checkpoints/ckpt-STEP (the model, the optimizer, whose iteration
count is the step and drives the learning-rate schedule, and the training clock) and
checkpoints/averaged/ckpt (the model alone); `CheckpointSaver` writes the training ones.

Never half-written: TF writes a checkpoint's data and index files under temporary names and
renames them once complete, then tf.train.CheckpointManager rewrites the `checkpoint` index
file atomically (a temporary file renamed over it). The latest checkpoint is read from that
index, so a process killed while saving leaves the previous checkpoint the latest (and at most
temporary files that the next save of that step overwrites). `averaged` is written in a
temporary directory renamed into place.
"""
from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import keras
import tensorflow as tf

from pipelines import InputError
from pipelines.files import atomic_open
from pipelines.paths import CHECKPOINT_NAME, RunPaths
from pipelines.strategy import any_worker, is_chief, task_id

if TYPE_CHECKING:
    from pipelines.budget import TrainingClock
    from pipelines.config import TrainConfig


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
    if recorded.is_file() and recorded.read_text().strip() != _sha256(paths.spm_model):
        raise InputError(f"{paths.checkpoints}: trained with another vocabulary than "
                         f"{paths.spm_model} (prepared again since); move the checkpoints away "
                         f"to train afresh")


def record_vocabulary(paths: RunPaths) -> None:
    """Records the SentencePiece model the run's checkpoints are trained with."""
    if not paths.checkpoint_vocabulary.is_file():
        with atomic_open(paths.checkpoint_vocabulary, "w") as file:
            file.write(_sha256(paths.spm_model) + "\n")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def newest_readable_checkpoint(directory: Path, repair_index: bool) -> str | None:
    """The checkpoint to resume from: the index's latest, else, when the index is unreadable
    or names a checkpoint whose files are gone, the newest `ckpt-STEP` on disk whose files are
    complete. Then, with `repair_index`, the index is rewritten to list the complete ones, so
    that training resumes there and never starts again over good checkpoints.

    Raises:
        InputError: checkpoint files that are all incomplete.
    """
    listed = tf.train.latest_checkpoint(str(directory))  # None (a TF warning) if unreadable
    if listed is not None and _complete(listed):
        return listed
    on_disk = sorted((str(index)[:-len(".index")]
                      for index in directory.glob(f"{CHECKPOINT_NAME}-*.index")),
                     key=checkpoint_step)
    complete = [prefix for prefix in on_disk if _complete(prefix)]
    if not complete:
        if on_disk or list(directory.glob(f"{CHECKPOINT_NAME}-*.data-*")):
            raise InputError(f"{directory}: no checkpoint there is complete (an index or data "
                             f"file is missing); move the directory away to train from step 0")
        return None
    if repair_index:  # with timestamps, which CheckpointManager needs to keep track of them
        saved = [Path(f"{prefix}.index").stat().st_mtime for prefix in complete]
        tf.compat.v1.train.update_checkpoint_state(
            str(directory), complete[-1], all_model_checkpoint_paths=complete,
            all_model_checkpoint_timestamps=saved, last_preserved_timestamp=min(saved) - 1)
    return complete[-1]


def _complete(prefix: str) -> bool:
    """Whether the checkpoint's index reads and all its data shards exist."""
    try:
        tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError):
        return False
    shards = list(Path(prefix).parent.glob(f"{Path(prefix).name}.data-*-of-*"))
    return bool(shards) and len(shards) == int(shards[0].name.rsplit("-of-", 1)[1])


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
        self.latest = (newest_readable_checkpoint(self.directory, repair_index=self.chief)
                       if self.directory.is_dir() else None)
        if self.latest is not None:
            check_vocabulary(paths)
        write_dir = self.directory if self.chief else self.directory / f".{task_id(strategy)}"
        self.manager = make_manager(model_checkpoint(model, optimizer=optimizer, clock=clock),
                                    write_dir, settings.keep_checkpoints)
        self.last_save = time.monotonic()

    def restore(self) -> int:
        """Restores the latest checkpoint, if any; returns its step (0 without one)."""
        if self.latest is None:
            return 0
        weights = model_checkpoint(self.model, optimizer=self.optimizer)
        weights.restore(self.latest).assert_existing_objects_matched()
        # Checkpoints of versions without a clock still resume: their time is not known.
        tf.train.Checkpoint(clock=self.clock).restore(self.latest).expect_partial()
        step = int(self.optimizer.iterations.numpy())
        if step != checkpoint_step(self.latest):
            raise RuntimeError(f"{self.latest} holds step {step}, not "
                               f"{checkpoint_step(self.latest)}")
        self.clock.restored()
        return step

    def due(self, step: int, every_steps: int) -> bool:
        minutes = self.settings.checkpoint_every_minutes
        if every_steps and step % every_steps == 0:
            return True
        elapsed = time.monotonic() - self.last_save
        return bool(minutes) and any_worker(self.strategy, elapsed >= 60 * minutes)

    def save(self, step: int) -> None:
        self.clock.before_save()
        path = self.manager.save(checkpoint_number=step)
        self.last_save = time.monotonic()
        if self.chief:
            self.latest = path
            record_vocabulary(self.paths)
        else:
            shutil.rmtree(self.manager.directory, ignore_errors=True)
