"""The train stage: the paper's recipe (section 5) under a tf.distribute strategy.

runs/NAME/{data,vocab} -> runs/NAME/checkpoints/ckpt-STEP, runs/NAME/logs (TensorBoard).

* Strategy: `pipelines.training.strategy.make_strategy` (MirroredStrategy, or
  MultiWorkerMirroredStrategy under a TF_CONFIG cluster); each worker reads its own train
  shards through `distribute_datasets_from_function`, each replica batches of
  train.batch_tokens / replicas.
* Update: `pipelines.training.trainer.Trainer`, `accumulate_steps` batches per replica in one
  compiled tf.function whose input signature leaves every batch shape free (it traces once).
* Checkpoints every N steps and/or minutes (and at the end), the last K kept; a rerun resumes
  from the latest with its step, optimizer state and schedule (`pipelines.training.checkpoints`).
* Fine-tuning (`train.init_from`, `pipelines.training.parent`): a run without checkpoints
  starts from its parent's weights, with a fresh optimizer and schedule; the parent is recorded.
  The data order is reseeded with the step, so a resumed run does not replay its first batches.
* Observability: dev loss and greedy dev BLEU every N steps (`pipelines.training.validation`),
  TensorBoard scalars, a progress line, the realised mix of several corpora (`data.corpora`:
  each one's share of the pairs trained on, in TensorBoard and the summary); a non-finite loss
  or gradient stops the run naming the step, before any checkpoint of the bad weights is
  written.

Example:
    summary = train(load_config("demo"))
"""
from __future__ import annotations

import dataclasses
import json
import math
import time

import keras
import numpy as np
import tensorflow as tf

from pipelines.training.buckets import bucket_boundaries
from pipelines.training.best_checkpoints import BestCheckpoints
from pipelines.training.budget import TrainingClock
from pipelines.training.checkpoints import CheckpointSaver
from pipelines.config import PipelineConfig
from pipelines.corpus.shards import train_corpora
from pipelines.files import atomic_open, check_writable
from pipelines.models import run_tokenizer
from pipelines.training.size_choice import sized_for_budget
from pipelines.training.parent import start_from_parent
from pipelines.paths import RunPaths
from pipelines.progress import Progress
from pipelines.training.strategy import (any_worker, check_same_step_as_chief, chief_value,
                                         is_chief, is_multi_worker, make_strategy,
                                         mean_over_workers, strategy_name, task_id,
                                         wait_for_chief, workers)
from pipelines.training.interruption import (Preempted, PreemptionSignals, preempted_line,
                                             worker_lost)
from pipelines.training.tensorboard import write_scalars
from pipelines.training.train_data import (Batches, DatasetFn, check_batch_tokens,
                                            train_dataset_fn)
from pipelines.training.train_report import Mix, TrainSummary, Window
from pipelines.training.trainer import Trainer
from pipelines.training.validation import Validator


VALIDATED = ("dev_loss", "dev_bleu")  # what the chief may measure after an update


class TrainingDiverged(RuntimeError):
    """The loss or the gradients became NaN or Inf; no checkpoint holds the bad weights."""


class NothingToTrain(Exception):
    """The run's latest checkpoint is beyond `train.steps` (lowered since): no update is made.
    Not an error: rerunning a finished run is not one."""


def train(config: PipelineConfig, *, strategy: tf.distribute.Strategy | None = None,
          dataset_fn: DatasetFn | None = None) -> TrainSummary:
    """Trains (or resumes training) the run of `config` to `train.steps` updates, or until its
    `train.max_minutes` budget is spent (`pipelines.training.budget`).

    Args:
        config: the pipeline config; reads runs/NAME/vocab/spm.model and data/.
        strategy: default `make_strategy()`.
        dataset_fn: per-worker training batches (default: the run's train split, endless).

    Raises:
        InputError: the run is not prepared, or its checkpoints cannot be resumed (incomplete,
            of another vocabulary or architecture), or its `train.init_from` parent cannot be
            fine-tuned (see `pipelines.training.parent`).
        OSError: the run directory cannot be written, or a checkpoint cannot (a full disk).
        TrainingDiverged: a non-finite loss or gradient.
        NothingToTrain: the run's latest checkpoint is beyond `train.steps`.

    The chief writes the summary to logs/train_summary.json (`run`'s report reads it) when this
    invocation trained, or when there is none yet.
    """
    run = TrainingRun(config, strategy=strategy, dataset_fn=dataset_fn)
    summary = run.run()
    path = run.paths.train_summary
    if is_chief(run.strategy) and (summary.step > summary.start_step or not path.exists()):
        with atomic_open(path, "w") as file:  # keeps the summary of the run that trained
            json.dump(dataclasses.asdict(summary), file, indent=2, default=str)
    return summary


class TrainingRun:
    """One train invocation: the set-up (restoring the latest checkpoint) in the constructor,
    the loop in `run`; `trainer` gives access to the model and the compiled step."""

    def __init__(self, config: PipelineConfig, *, strategy: tf.distribute.Strategy | None = None,
                 dataset_fn: DatasetFn | None = None) -> None:
        self.started = time.monotonic()
        self.config, self.settings = config, config.train
        self.paths = RunPaths(config.run_path)
        tokenizer = run_tokenizer(self.paths)
        for directory in (self.paths.checkpoints, self.paths.logs):
            check_writable(directory)
        keras.utils.set_random_seed(self.settings.seed)
        self.strategy = strategy or make_strategy(self.settings.worker_timeout_minutes)
        self.workers = workers(self.strategy)  # TYPE-ID -> address, the order of any_worker flags
        check_batch_tokens(config, self.strategy.num_replicas_in_sync)
        self.clock = TrainingClock(self.settings)
        config, self.size_choice = sized_for_budget(config, tokenizer.vocab_size, self.strategy,
                                                    self.clock, dataset_fn)
        self.config = config
        self.trainer = Trainer(config, tokenizer.vocab_size, self.strategy, self.clock)
        self.saver = CheckpointSaver(self.trainer.model, self.trainer.optimizer, self.clock,
                                     self.strategy, self.settings, self.paths,
                                     self.trainer.weight_average)
        self.start_step = self.saver.restore()
        self.step = self.start_step  # the last update applied (the optimizer's may run ahead)
        check_same_step_as_chief(self.strategy, self.start_step, self.paths.checkpoints)
        if self.start_step > self.settings.steps:
            raise NothingToTrain(f"the run is already at step {self.start_step:,}, beyond "
                                 f"train.steps {self.settings.steps}: nothing to train (raise "
                                 f"train.steps to train further)")
        self.skipped_updates = 0  # by loss scaling
        self.init_from = start_from_parent(config, self.start_step, self.trainer.model,
                                           chief=is_chief(self.strategy))
        if self.init_from and not self.start_step and self.trainer.weight_average:
            self.trainer.weight_average.reset(self.trainer.model.trainable_variables)
        self.recipe = self.clock.recipe(self.settings)
        self._planned_at = (self.clock.elapsed(), self.start_step)  # when and where planned
        self.dataset = self.strategy.distribute_datasets_from_function(
            dataset_fn or train_dataset_fn(config, seed=config.data.seed + self.start_step))
        # The run's own batches take one shape per length bucket (XLA compiles for each).
        self._batch_shapes = None if dataset_fn else len(bucket_boundaries(config.data.max_length))
        self.trainer.compile(self.dataset.element_spec)
        corpora = train_corpora(self.paths.data) if "corpus" in self.dataset.element_spec else []
        self.mix = Mix([c.name for c in corpora], [c.weight for c in corpora]) if corpora else None
        chief = is_chief(self.strategy)
        self.validator = Validator(config, self.trainer.model, tokenizer) if chief else None
        stopping = self.settings.early_stopping
        self.best = (BestCheckpoints(self.paths, self.settings.keep_best, stopping)
                     if chief and (self.settings.keep_best or stopping.patience) else None)
        self.stop_reason: str | None = None
        self.writer = (tf.summary.create_file_writer(str(self.paths.logs)) if chief
                       else tf.summary.create_noop_writer())
        self.progress = Progress(self.recipe.steps, enabled=chief, elapsed=self.clock.elapsed,
                                 budget_seconds=self.clock.budget_seconds)

    def run(self) -> TrainSummary:
        """Trains to the recipe's steps or to the budget, validating, logging and saving.

        Raises:
            Preempted: SIGTERM or SIGINT reached a worker; every worker saved after the
                update in flight (`pipelines.training.interruption`).
            WorkerLost: another worker died or stopped answering (multi-worker only).
        """
        batches = Batches(self.dataset)
        try:
            self.progress.message(f"dtype {self.trainer.dtype_reason}")
            if self.size_choice is not None:
                self.progress.message(f"model size {self.size_choice.size} (preset auto): "
                                      f"{self.size_choice.reason}")
            with PreemptionSignals() as self.signals:
                return self._run(batches)
        except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError) as error:
            if not is_multi_worker(self.strategy):
                raise
            raise worker_lost(error, self.workers, task_id(self.strategy),
                              self.step, self.saver.latest,
                              self.settings.worker_timeout_minutes) from None
        finally:
            batches.close()
            self.progress.close()

    def _run(self, batches: Batches) -> TrainSummary:
        for damage in self.saver.damage:
            self.progress.message(damage)
        if self.init_from and not self.start_step:
            self.progress.message(f"fine-tuning from {self.init_from}: its weights, a fresh "
                                  f"optimizer and schedule")
        if self.start_step:
            self.progress.message(f"resumed from {self.saver.latest} at step "
                                  f"{self.start_step:,} ({self.clock.elapsed() / 60:.1f} min "
                                  f"spent)")
        window, overall = Window(), Window()
        step, loss = self.start_step, math.nan
        problem = self.clock.first_update_problem()
        out_of_time, *signalled = any_worker(self.strategy,
                                             [problem is not None, *self._signal_flags()])
        if any(signalled):
            raise self._preempted(step, signalled)
        if out_of_time:
            self.progress.message(problem or "another worker's budget is spent")
        while step < self.recipe.steps and not out_of_time:
            step_started = time.monotonic()
            update = tuple(next(batches) for _ in range(self.settings.accumulate_steps))
            self._log_compilations(update)
            step_loss, tokens, finite = self.trainer.train_step(update)
            step_loss, tokens = float(step_loss), float(tokens)
            if not self._applied(step, step_loss, bool(finite)):
                continue
            if self.mix:  # the pairs of applied updates only
                self.mix.add(np.concatenate([
                    local.numpy() for batch in update
                    for local in self.strategy.experimental_local_results(batch["corpus"])]))
            seconds = time.monotonic() - step_started
            window.add(step_loss, tokens, seconds)
            step = self.step = self.trainer.step
            if step == self.start_step + 1:
                self.progress.begin(step)  # the rate leaves out the compiling step
                self.clock.first_update_seconds.assign(seconds)
            else:
                overall.add(step_loss, tokens, seconds)
            calibration_spent, out_of_time, minutes_due, *signalled = any_worker(
                self.strategy, [*self._clock_flags(overall.seconds_per_update() or seconds),
                                *self._signal_flags()])
            if any(signalled):
                self.saver.save(step)
                raise self._preempted(step, signalled)
            if self.clock.calibrated(overall.updates, calibration_spent):
                self._plan(step, overall.seconds_per_update())
            last = step >= self.recipe.steps or out_of_time
            logging = step % self.settings.log_every_steps == 0 or last
            self._show(step, window, logging)
            if logging:
                loss = window.mean_loss()
                window = Window()
            measured = (self.validator.maybe_run(step, last, self.recipe, self.writer,
                                                 self.progress) if self.validator else {})
            if any(self.recipe.validates(metric, step, last) for metric in VALIDATED):
                wait_for_chief(self.strategy)  # its validation may outlast the workers' timeout
            stopped = self._early_stopped(step, measured)
            if last or stopped or self.saver.due(step, self.recipe.checkpoint_every_steps,
                                                 minutes_due):
                self.saver.save(step)
                if not (last or stopped):
                    self._replan(step)
            if stopped:
                break
        self.writer.flush()
        if out_of_time and step < self.recipe.steps and not self.stop_reason:
            self.progress.message(f"the {self.settings.max_minutes:g}-minute budget ended "
                                  f"training at step {step:,}")
        return TrainSummary(
            run_dir=self.config.run_path, strategy=strategy_name(self.strategy),
            replicas=self.strategy.num_replicas_in_sync, start_step=self.start_step, step=step,
            loss=loss, tokens_per_second=overall.tokens_per_second(),
            dev_loss=self.validator.dev_loss if self.validator else None,
            dev_bleu=self.validator.dev_bleu if self.validator else None,
            checkpoint=self.saver.latest, seconds=self.clock.elapsed(),
            multi_worker=is_multi_worker(self.strategy), dtype=self.trainer.dtype,
            dtype_reason=self.trainer.dtype_reason,
            ended_by=("early_stopping" if self.stop_reason else
                      "budget" if step < self.settings.steps else "steps"),
            stop_reason=self.stop_reason,
            budget_minutes=self.settings.max_minutes or None,
            planned_steps=self.recipe.steps, warmup_steps=self.recipe.warmup_steps,
            learning_rate_scale=self.recipe.learning_rate_scale, init_from=self.init_from,
            skipped_updates=self.skipped_updates, loss_scale=self.trainer.loss_scale(),
            model_size=self.size_choice.size if self.size_choice else None,
            model_size_reason=self.size_choice.reason if self.size_choice else None,
            corpus_mix=self.mix.shares() if self.mix else ())

    def _signal_flags(self) -> list[bool]:
        """For each worker (`workers` order), whether a preemption signal reached it: this
        worker's own flag in its place (any_worker agrees them)."""
        here = task_id(self.strategy)
        return [name == here and self.signals.received is not None for name in self.workers]

    def _preempted(self, step: int, signalled: list[bool]) -> Preempted:
        """The exception that ends every worker once the checkpoint of `step` is saved."""
        self.writer.flush()
        names = [name for name, flag in zip(self.workers, signalled) if flag]
        return Preempted(preempted_line(names, self.signals.received, step, self.saver.latest,
                                        is_multi_worker(self.strategy)))

    def _early_stopped(self, step: int, measured: dict[str, float]) -> bool:
        """Records the validation metric where it was measured (the best checkpoints, chief
        only) and whether early stopping ends training here, agreed by every worker at the
        steps the metric is due."""
        stopping, reason = self.settings.early_stopping, None
        if self.best is not None and stopping.metric in measured:
            reason = self.best.add(step, measured[stopping.metric], self.trainer.model)
        if not stopping.patience or step % self.recipe.interval(stopping.metric):
            return False
        (stopped,) = any_worker(self.strategy, [reason is not None])
        if stopped:
            self.stop_reason = reason or "early stopping (by the chief's validation)"
            self.progress.message(self.stop_reason)
        return stopped

    def _plan(self, step: int, seconds_per_update: float) -> None:
        """Compresses the recipe to the steps that fit the budget (the same on every worker)."""
        seconds_per_update = mean_over_workers(self.strategy, seconds_per_update)
        self.recipe = self.clock.plan(self.settings, step, seconds_per_update)
        self.progress.total = self.recipe.steps
        self._planned_at = (self.clock.elapsed(), step)
        if self.recipe.steps < self.settings.steps:
            self.progress.message(
                f"budget: {self.settings.max_minutes:g} min fit about {self.recipe.steps:,} of "
                f"{self.settings.steps:,} steps at {seconds_per_update:.2f} s/update; warm-up "
                f"{self.recipe.warmup_steps:,} steps, learning-rate scale "
                f"{self.recipe.learning_rate_scale:.3f}, a checkpoint every "
                f"{self.recipe.checkpoint_every_steps:,}")

    def _replan(self, step: int) -> None:
        """After warm-up, fits the steps to the wall-clock time per step since the plan."""
        since, planned_step = self._planned_at
        if not self.clock.planned or step < self.recipe.warmup_steps or step == planned_step:
            return
        seconds_per_step = mean_over_workers(
            self.strategy, (self.clock.elapsed() - since) / (step - planned_step))
        reserve = chief_value(self.strategy, self.validator.seconds if self.validator else 0.0)
        self.recipe = self.clock.plan(self.settings, step, seconds_per_step, reserve)
        self.progress.total = self.recipe.steps

    def _log_compilations(self, batches: tuple) -> None:
        """Under XLA, a line for each batch shape met for the first time (it compiles)."""
        for source, target in self.trainer.new_compiled_shapes(batches):
            self.progress.message(
                f"XLA: compiling the update for batches of {source[0]} x {source[1]} source, "
                f"{target[1]} target tokens (shape {len(self.trainer.compiled_shapes)}"
                f"{f' of at most {self._batch_shapes}' if self._batch_shapes else ''})")

    def _applied(self, step: int, loss: float, finite: bool) -> bool:
        """Whether the update after `step` was applied: False where mixed_float16's loss
        scaling skipped it (every replica's gradients are checked together).

        Raises:
            TrainingDiverged: a non-finite loss, non-finite gradients without loss scaling, or
                with a loss scale fallen below 1 (no scale makes them finite).
        """
        scale = self.trainer.loss_scale()
        if finite and math.isfinite(loss):
            return True
        if not finite and scale is not None and scale >= 1:
            self.skipped_updates += 1
            self.progress.message(f"step {step + 1:,}: float16 gradients overflowed; update "
                                  f"skipped, loss scale lowered to {scale:g}")
            return False
        scaled = f", loss scale {scale:g}" if scale is not None else ""
        raise TrainingDiverged(
            f"non-finite loss or gradient at step {step + 1:,} (loss {loss}{scaled}); the last "
            f"good checkpoint is {self.saver.latest or 'none (none saved yet)'}")

    def _clock_flags(self, seconds_per_update: float) -> tuple[bool, bool, bool]:
        """This worker's clock's verdicts (any_worker agrees them): the calibration share of
        the budget spent; another update and the final validation would overrun the budget;
        a checkpoint due by minutes."""
        budget = self.clock.budget_seconds
        needed = seconds_per_update + (self.validator.seconds if self.validator else 0.0)
        return (budget is not None and self.clock.calibration_time_spent(),
                budget is not None and self.clock.seconds_left() < needed,
                self.saver.minutes_due())

    def _show(self, step: int, window: Window, logging: bool) -> None:
        """The progress line after every update; TensorBoard scalars at logging steps."""
        loss, rate = window.mean_loss(), window.tokens_per_second()
        learning_rate = self.trainer.learning_rate()
        if logging:
            mix = {f"mix/{name}": share for name, _, share in self.mix.shares()} if self.mix else {}
            write_scalars(self.writer, step, {"train/loss": loss,
                                              "train/learning_rate": learning_rate,
                                              "train/tokens_per_second": rate, **mix})
        self.progress.update(step, {"loss": f"{loss:.4f}", "tok/s": f"{rate:,.0f}",
                                    "lr": f"{learning_rate:.2e}"}, log=logging)
