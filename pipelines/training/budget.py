"""A wall-clock budget for the train stage (`train.max_minutes`).

The clock counts the stage's wall time (set-up, compilation, updates, validation, saving) over
all its invocations: the total is saved in every checkpoint, so a resumed run goes on from the
time spent up to its checkpoint.

When the budget, not `steps`, will end training, the recipe is compressed in time to fit:
once the first updates are timed, the updates that fit the rest of the budget are predicted,
and with r = planned / configured steps, `warmup_steps` and the checkpoint, dev loss and dev
BLEU intervals are scaled by r and the learning rate by sqrt(r). Eq. 3 then gives at step s
the rate the configured run has at step s / r: the same curve and peak in fewer steps, leaving
warm-up at the same fraction of the run (never left in it); the last `average_last`
checkpoints cover the same final share of it. (Shortening the warm-up alone would raise the
peak rate by 1 / sqrt(r), which stalls short runs.) After warm-up the steps are planned again
at every checkpoint, from the wall-clock time per step since the first plan (validation and
saving included) and keeping the time the final validation took; the learning-rate curve and
the intervals stay as first planned. The plan is saved with the checkpoints: a resumed run
keeps it, or plans anew when `max_minutes` changed (a warm-up already passed keeps its curve).
Training also stops, with a checkpoint, when the next update and the final validation would
overrun the budget (the first plan cannot know what validation costs). An invocation's first
update compiles the step again; its time is saved too, and a resumed run whose budget left
would not fit it does not start one.

Example:
    clock = TrainingClock(config.train)       # saved in checkpoints as `clock`
    recipe = clock.recipe(config.train)       # steps and intervals to follow
"""
from __future__ import annotations

import dataclasses
import math
import time

import tensorflow as tf

from pipelines.config.train import TrainConfig

CALIBRATION_UPDATES = 10  # timed updates before the plan (fewer on a budget of seconds)
CALIBRATION_SHARE = 0.05  # ... or this share of the budget spent, after at least 2 updates
PLANNED_SHARE = 0.95  # of the remaining time given to updates; the rest covers the others


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The schedule of a run: the configured one, or the configured one compressed."""

    steps: int
    warmup_steps: int
    learning_rate_scale: float
    checkpoint_every_steps: int
    validate_every_steps: int
    bleu_every_steps: int

    @classmethod
    def compress(cls, train: TrainConfig, steps: int) -> Recipe:
        """`train`'s recipe with every length scaled by steps / train.steps (at most 1)."""
        ratio = min(1.0, steps / train.steps)

        def scale(length: int) -> int:  # 0 (off) stays off
            return max(1, round(length * ratio)) if length else 0

        return cls(steps=min(steps, train.steps), warmup_steps=scale(train.warmup_steps),
                   learning_rate_scale=train.learning_rate_scale * math.sqrt(ratio),
                   checkpoint_every_steps=scale(train.checkpoint_every_steps),
                   validate_every_steps=scale(train.validate_every_steps),
                   bleu_every_steps=scale(train.bleu_every_steps))

    def interval(self, metric: str) -> int:
        """The steps between validations of `metric` (dev_loss, dev_bleu, dev_chrf)."""
        return self.validate_every_steps if metric == "dev_loss" else self.bleu_every_steps

    def validates(self, metric: str, step: int, last: bool) -> bool:
        """Whether `metric` is measured after `step`: every interval(metric) steps and at the
        last step, never with an interval of 0 (off)."""
        interval = self.interval(metric)
        return bool(interval) and (last or step % interval == 0)


def steps_that_fit(step: int, seconds_left: float, seconds_per_update: float) -> int:
    """The step reached by spending PLANNED_SHARE of `seconds_left` on updates."""
    return step + max(1, int(PLANNED_SHARE * seconds_left / max(seconds_per_update, 1e-9)))


class TrainingClock(tf.Module):
    """The stage's wall time and its budget plan, as variables saved in every checkpoint.

    Args:
        train: the `train` section; `max_minutes` 0 means no budget.
    """

    def __init__(self, train: TrainConfig) -> None:
        super().__init__(name="training_clock")
        self.budget_seconds = 60.0 * train.max_minutes or None
        self.seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False)  # at the last save
        self.planned_steps = tf.Variable(0, dtype=tf.int64, trainable=False)  # 0: no plan
        self.planned_budget = tf.Variable(0.0, dtype=tf.float64, trainable=False)  # seconds
        # The steps the schedule and the intervals were compressed to (the first plan's).
        self.schedule_steps = tf.Variable(0, dtype=tf.int64, trainable=False)
        # The learning-rate schedule reads these, so that a plan can compress it.
        self.warmup_steps = tf.Variable(float(train.warmup_steps), trainable=False)
        self.learning_rate_scale = tf.Variable(train.learning_rate_scale, trainable=False)
        # The last invocation's first update, its compilation included (0: none yet).
        self.first_update_seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False)
        self._started = time.monotonic()
        self._restored_seconds = 0.0

    def restored(self) -> None:
        """Call after restoring a checkpoint: the time it holds counts as spent."""
        self._restored_seconds = float(self.seconds.numpy())
        self._started = time.monotonic()
        if float(self.planned_budget.numpy()) != (self.budget_seconds or 0.0):
            self.planned_steps.assign(0)  # the budget changed: plan again

    def elapsed(self) -> float:
        """Seconds spent in this stage, over all invocations."""
        return self._restored_seconds + time.monotonic() - self._started

    def seconds_left(self) -> float:
        return (self.budget_seconds or float("inf")) - self.elapsed()

    def first_update_problem(self) -> str | None:
        """Why the budget left cannot fit this invocation's first update, or None."""
        first_update, left = float(self.first_update_seconds.numpy()), self.seconds_left()
        if left <= 0:
            return f"the {self.budget_seconds / 60:g}-minute budget is spent"
        if left < first_update:
            return (f"the {left:.0f} s left of the {self.budget_seconds / 60:g}-minute budget "
                    f"cannot fit the first update, which compiles ({first_update:.0f} s "
                    f"last time)")
        return None

    def before_save(self) -> None:
        self.seconds.assign(self.elapsed())

    @property
    def planned(self) -> bool:
        return int(self.planned_steps.numpy()) > 0

    def recipe(self, train: TrainConfig) -> Recipe:
        """The configured recipe, compressed to the plan if there is one."""
        if not self.planned:
            return Recipe.compress(train, train.steps)
        recipe = Recipe.compress(train, int(self.schedule_steps.numpy()))
        return dataclasses.replace(
            recipe, steps=int(self.planned_steps.numpy()),
            warmup_steps=round(float(self.warmup_steps.numpy())),
            learning_rate_scale=float(self.learning_rate_scale.numpy()))

    def calibration_time_spent(self) -> bool:
        """Whether this worker's clock has spent CALIBRATION_SHARE of the budget."""
        return self.elapsed() >= CALIBRATION_SHARE * (self.budget_seconds or float("inf"))

    def calibrated(self, timed_updates: int, time_spent: bool) -> bool:
        """Whether enough updates were timed to plan (with a budget and no plan yet):
        CALIBRATION_UPDATES, or 2 once `time_spent` (`calibration_time_spent`, agreed by all
        workers)."""
        if self.budget_seconds is None or self.planned:
            return False
        return timed_updates >= CALIBRATION_UPDATES or (timed_updates >= 2 and time_spent)

    def plan(self, train: TrainConfig, step: int, seconds_per_update: float,
             reserve: float = 0.0) -> Recipe:
        """Fixes the plan from the measured time per update, keeping `reserve` seconds spare;
        returns the recipe to follow. Past warm-up, the learning-rate schedule stays."""
        fit = steps_that_fit(step, self.seconds_left() - reserve, seconds_per_update)
        recipe = Recipe.compress(train, fit)
        first = int(self.schedule_steps.numpy()) == 0
        if first or step < float(self.warmup_steps.numpy()):  # a warm-up passed stays
            self.schedule_steps.assign(recipe.steps)
            self.warmup_steps.assign(float(recipe.warmup_steps))
            self.learning_rate_scale.assign(recipe.learning_rate_scale)
        self.planned_steps.assign(recipe.steps)
        self.planned_budget.assign(self.budget_seconds)
        return self.recipe(train)
