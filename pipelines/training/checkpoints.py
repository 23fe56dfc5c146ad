"""The training checkpoints: checkpoints/ckpt-STEP (the model, the optimizer, whose iteration
count is the step and drives the learning-rate schedule, and the training clock, and with
train.ema_decay the moving average), saved by steps and minutes and resumed by
`CheckpointSaver`, which also writes checkpoints/ema/ckpt (the moving average, model only).

Never half-written: TF writes a checkpoint's data and index files under temporary names and
renames them once complete, then tf.train.CheckpointManager rewrites the `checkpoint` index
file atomically (a temporary file renamed over it). The latest checkpoint is read from that
index, so a process killed while saving leaves the previous checkpoint the latest (and at most
temporary files that the next save of that step overwrites). A save that fails (a full disk)
leaves no partial checkpoint and says so in one line. Before resuming, the latest checkpoint is
checked of the run's vocabulary and the model's architecture.

What evaluate, export and average read of them (finding and checking the files, the records
beside them, the model's weights): pipelines.checkpoints.

Example:
    >>> saver = CheckpointSaver(model, optimizer, clock, strategy, config.train, paths)
    >>> step = saver.restore()  # 0 without a checkpoint
    >>> saver.save(step)
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import keras
import tensorflow as tf

from pipelines.checkpoints.files import (checkpoint_step, newest_readable_checkpoint,
                                         remove_partial_checkpoint, restoring, tf_write_errors)
from pipelines.checkpoints.records import (check_architecture, check_vocabulary, record_model,
                                           record_vocabulary)
from pipelines.checkpoints.weights import model_checkpoint, write_weights
from pipelines.paths import CHECKPOINT_NAME, RunPaths
from pipelines.training.strategy import is_chief, task_id

if TYPE_CHECKING:
    from pipelines.training.budget import TrainingClock
    from pipelines.training.weight_average import WeightAverage
    from pipelines.config.train import TrainConfig


def make_manager(checkpoint: tf.train.Checkpoint, directory: Path,
                 keep: int) -> tf.train.CheckpointManager:
    """Saves `directory/ckpt-STEP` (pass `checkpoint_number=step`), keeping the last `keep`."""
    return tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=keep,
                                      checkpoint_name=CHECKPOINT_NAME)


class CheckpointSaver:
    """Checkpoints of the model, its optimizer (whose iterations are the step) and the training
    clock, by steps and minutes. Under MultiWorkerMirroredStrategy every worker saves (saving
    may need collectives), the chief into checkpoints/, the others into a temporary directory
    removed at once."""

    def __init__(self, model: keras.Model, optimizer: keras.optimizers.Optimizer,
                 clock: TrainingClock, strategy: tf.distribute.Strategy, settings: TrainConfig,
                 paths: RunPaths, weight_average: WeightAverage | None = None) -> None:
        self.model, self.optimizer, self.clock = model, optimizer, clock
        self.weight_average = weight_average
        self.strategy, self.settings = strategy, settings
        self.directory = paths.checkpoints
        self.chief, self.paths = is_chief(strategy), paths
        self.latest, self.damage = (  # damage: a line for each damage repaired
            newest_readable_checkpoint(paths, repair_index=self.chief)
            if self.directory.is_dir() else (None, []))
        if self.latest is not None:
            check_vocabulary(paths)
            check_architecture(model, self.latest)
        write_dir = self.directory if self.chief else self.directory / f".{task_id(strategy)}"
        averages = {"ema": weight_average} if weight_average else {}
        self.manager = make_manager(
            model_checkpoint(model, optimizer=optimizer, clock=clock, **averages), write_dir,
            settings.keep_checkpoints)
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
            if self.weight_average is not None:
                self._restore_weight_average()
        step = int(self.optimizer.iterations.numpy())
        if step != checkpoint_step(self.latest):
            raise RuntimeError(f"{self.latest} holds step {step}, not "
                               f"{checkpoint_step(self.latest)}")
        self.clock.restored()
        return step

    def _restore_weight_average(self) -> None:
        """The moving average the latest checkpoint holds; one saved without (train.ema_decay
        set on a resumed run) starts it from the restored weights."""
        names = tf.train.load_checkpoint(self.latest).get_variable_to_shape_map()
        if any(name.startswith("ema/") for name in names):
            tf.train.Checkpoint(ema=self.weight_average).restore(self.latest).expect_partial()
        else:
            self.weight_average.reset(self.model.trainable_variables)

    def minutes_due(self) -> bool:
        """Whether train.checkpoint_every_minutes have passed since the last save, on this
        worker's clock (`pipelines.training.strategy.any_worker` agrees it)."""
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
                self.manager.save(checkpoint_number=step)
        except BaseException:
            remove_partial_checkpoint(directory / f"{CHECKPOINT_NAME}-{step}")
            raise
        finally:
            if not self.chief:
                shutil.rmtree(directory, ignore_errors=True)
        self.last_save = time.monotonic()
        self.latest = str(self.directory / f"{CHECKPOINT_NAME}-{step}")  # the chief's, everywhere
        if self.chief:
            record_vocabulary(self.paths)
            record_model(self.directory, self.model.model_config)
            if self.weight_average is not None:
                write_weights(self.weight_average.model_variables(self.model),
                              self.model.model_config, self.paths.ema.parent,
                              {"step": step, "decay": self.settings.ema_decay})

