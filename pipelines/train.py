"""The train stage: the paper's recipe (section 5) under a tf.distribute strategy.

runs/NAME/{data,vocab} -> runs/NAME/checkpoints/ckpt-STEP, runs/NAME/logs (TensorBoard).

* Strategy: `pipelines.strategy.make_strategy` (MirroredStrategy, or MultiWorkerMirroredStrategy
  under a TF_CONFIG cluster); each worker reads its own train shards through
  `distribute_datasets_from_function`, each replica batches of data.batch_tokens / replicas.
* Update: `pipelines.trainer.Trainer`, `accumulate_steps` batches per replica in one compiled
  tf.function whose input signature leaves every batch shape free (it traces once).
* Checkpoints every N steps and/or minutes (and at the end), the last K kept; a rerun resumes
  from the latest with its step, optimizer state and schedule (`pipelines.checkpoints`).
* Fine-tuning (`train.init_from`, `pipelines.parent`): a run without checkpoints starts from
  its parent's weights, with a fresh optimizer and schedule; the parent is recorded.
  The data order is reseeded with the step, so a resumed run does not replay its first batches.
* Observability: dev loss and greedy dev BLEU every N steps (`pipelines.validation`),
  TensorBoard scalars, a progress line; a non-finite loss or gradient stops the run naming the
  step, before any checkpoint of the bad weights is written.

Example:
    summary = train(load_config("demo"))
"""
from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Callable

import keras
import tensorflow as tf

from pipelines import InputError
from pipelines.budget import TrainingClock
from pipelines.checkpoints import CheckpointSaver, restore_model
from pipelines.config import PipelineConfig
from pipelines.data import any_pair_fits, make_dataset
from pipelines.files import check_writable
from pipelines.models import run_tokenizer
from pipelines.parent import check_parent_vocabulary, find_parent, recorded_parent, record_parent
from pipelines.paths import RunPaths
from pipelines.progress import Progress
from pipelines.strategy import (any_worker, chief_value, is_chief, is_multi_worker,
                                make_strategy, mean_over_workers, strategy_name)
from pipelines.tensorboard import write_scalars
from pipelines.trainer import Trainer
from pipelines.validation import Validator

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]


class TrainingDiverged(RuntimeError):
    """The loss or the gradients became NaN or Inf; no checkpoint holds the bad weights."""


@dataclasses.dataclass(frozen=True)
class TrainSummary:
    """What a train run did."""

    run_dir: Path
    strategy: str
    replicas: int
    start_step: int  # the checkpoint resumed from; 0 for a fresh run
    step: int
    loss: float  # over the last logging window
    tokens_per_second: float  # real target tokens, after the first (compiling) step
    dev_loss: float | None
    dev_bleu: float | None
    checkpoint: str | None
    seconds: float  # the stage's wall time, over all its invocations
    multi_worker: bool
    dtype: str  # the Keras dtype policy trained in (`auto` resolved)
    dtype_reason: str  # why that policy, e.g. "mixed_bfloat16: the CPU has amx_bf16 and ..."
    ended_by: str = "steps"  # or "budget": train.max_minutes ended it before train.steps
    budget_minutes: float | None = None
    planned_steps: int | None = None  # steps of the recipe followed (compressed by a budget)
    warmup_steps: int | None = None
    learning_rate_scale: float | None = None
    init_from: str | None = None  # the parent checkpoint of a fine-tuning run

    def format(self) -> str:
        """The summary as the CLI prints it."""
        resumed = f"resumed at step {self.start_step:,}, " if self.start_step else ""
        lines = [f"trained {self.run_dir} to step {self.step:,} ({resumed}{self.strategy}, "
                 f"{self.replicas} replica(s)) in {self.seconds:.0f} s"]
        if self.init_from:
            lines.append(f"  parent    {self.init_from} (fine-tuned from its weights)")
        lines += [
                 f"  loss      {self.loss:.4f} (train)" + (
                     f", {self.dev_loss:.4f} (dev)" if self.dev_loss is not None else ""),
                 f"  speed     {self.tokens_per_second:,.0f} target tokens/s",
                 f"  dtype     {self.dtype_reason}"]
        if self.dev_bleu is not None:
            lines.append(f"  dev BLEU  {self.dev_bleu:.2f} (greedy)")
        if self.ended_by == "budget":
            lines.append(f"  budget    {self.budget_minutes:g} min ended training at step "
                         f"{self.step:,}: a {self.planned_steps:,}-step recipe, warm-up "
                         f"{self.warmup_steps:,}, learning-rate scale "
                         f"{self.learning_rate_scale:.3f}")
        lines.append(f"  saved     {self.checkpoint}")
        return "\n".join(lines)


def train(config: PipelineConfig, *, strategy: tf.distribute.Strategy | None = None,
          dataset_fn: DatasetFn | None = None) -> TrainSummary:
    """Trains (or resumes training) the run of `config` to `train.steps` updates, or until its
    `train.max_minutes` budget is spent (`pipelines.budget`).

    Args:
        config: the pipeline config; reads runs/NAME/vocab/spm.model and data/.
        strategy: default `make_strategy()`.
        dataset_fn: per-worker training batches (default: the run's train split, endless).

    Raises:
        InputError: the run is not prepared, or its checkpoints cannot be resumed (incomplete,
            of another vocabulary or architecture), or its `train.init_from` parent cannot be
            fine-tuned (see `pipelines.parent`).
        OSError: the run directory cannot be written, or a checkpoint cannot (a full disk).
        TrainingDiverged: a non-finite loss or gradient.
    """
    return TrainingRun(config, strategy=strategy, dataset_fn=dataset_fn).run()


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
        self.strategy = strategy or make_strategy()
        self.clock = TrainingClock(self.settings)
        self.trainer = Trainer(config, tokenizer.vocab_size, self.strategy, self.clock)
        self.saver = CheckpointSaver(self.trainer.model, self.trainer.optimizer, self.clock,
                                     self.strategy, self.settings, self.paths)
        self.start_step = self.saver.restore()
        self.init_from = self._init_from_parent(chief=is_chief(self.strategy))
        self.recipe = self.clock.recipe(self.settings)
        self._planned_at = (self.clock.elapsed(), self.start_step)  # when and where planned
        self.dataset = self.strategy.distribute_datasets_from_function(
            dataset_fn or train_dataset_fn(config, seed=config.data.seed + self.start_step))
        self.trainer.compile(self.dataset.element_spec)
        chief = is_chief(self.strategy)
        self.validator = Validator(config, self.trainer.model, tokenizer) if chief else None
        self.writer = (tf.summary.create_file_writer(str(self.paths.logs)) if chief
                       else tf.summary.create_noop_writer())
        self.progress = Progress(self.recipe.steps, enabled=chief, elapsed=self.clock.elapsed,
                                 budget_seconds=self.clock.budget_seconds)

    def _init_from_parent(self, chief: bool) -> str | None:
        """A fine-tuning run without checkpoints starts from its parent's weights (the
        optimizer and the schedule start afresh); one with checkpoints resumes from them, which
        must descend from the parent that `train.init_from` names. Returns the parent
        checkpoint the run descends from, if any."""
        init_from = self.settings.init_from
        recorded = recorded_parent(self.paths)
        if self.start_step and init_from is not None:
            named = Path(init_from).resolve()
            if recorded is None or not (named == Path(recorded) or named in Path(recorded).parents):
                origin = f"fine-tuned from {recorded}" if recorded else "trained from scratch"
                raise InputError(f"train.init_from: {init_from}: {self.paths.checkpoints} holds "
                                 f"a run {origin} (step {self.start_step:,}); move it away "
                                 f"to fine-tune from {init_from}")
        if self.start_step:
            return recorded
        if init_from is None:
            if chief:  # a record of a fine-tuning whose checkpoints were moved away
                self.paths.checkpoint_parent.unlink(missing_ok=True)
            return None
        parent = find_parent(self.config)
        check_parent_vocabulary(parent, self.paths)
        restore_model(self.trainer.model, parent.checkpoint)
        if chief:
            record_parent(self.paths, parent)
        return str(Path(parent.checkpoint).resolve())

    def run(self) -> TrainSummary:
        """Trains to the recipe's steps or to the budget, validating, logging and saving."""
        try:
            self.progress.message(f"dtype {self.trainer.dtype_reason}")
            return self._run()
        finally:
            self.progress.close()

    def _run(self) -> TrainSummary:
        for problem in self.saver.skipped:
            self.progress.message(f"skipped an incomplete checkpoint: {problem}")
        if self.init_from and not self.start_step:
            self.progress.message(f"fine-tuning from {self.init_from}: its weights, a fresh "
                                  f"optimizer and schedule")
        if self.start_step:
            self.progress.message(f"resumed from {self.saver.latest} at step "
                                  f"{self.start_step:,} ({self.clock.elapsed() / 60:.1f} min "
                                  f"spent)")
        iterator = iter(self.dataset)
        window, overall = _Window(), _Window()
        step, loss = self.start_step, math.nan
        out_of_time = self.clock.seconds_left() <= 0
        if out_of_time:
            self.progress.message(f"the {self.settings.max_minutes:g}-minute budget is spent")
        while step < self.recipe.steps and not out_of_time:
            step_started = time.monotonic()
            batches = tuple(next(iterator) for _ in range(self.settings.accumulate_steps))
            step_loss, tokens, finite = self.trainer.train_step(batches)
            step_loss, tokens = float(step_loss), float(tokens)
            if not bool(finite):
                raise TrainingDiverged(
                    f"non-finite loss or gradient at step {step + 1:,} (loss {step_loss}); the "
                    f"last good checkpoint is {self.saver.latest or 'none (none saved yet)'}")
            seconds = time.monotonic() - step_started
            window.add(step_loss, tokens, seconds)
            if self.trainer.step == step:  # mixed_float16 skipped an update that overflowed
                continue
            step = self.trainer.step
            if step == self.start_step + 1:
                self.progress.begin(step)  # the rate leaves out the compiling step
            else:
                overall.add(step_loss, tokens, seconds)
            if self.clock.calibrated(overall.updates):
                self._plan(step, overall.seconds_per_update())
            out_of_time = self._out_of_time(overall.seconds_per_update() or seconds)
            last = step >= self.recipe.steps or out_of_time
            logging = step % self.settings.log_every_steps == 0 or last
            self._show(step, window, logging)
            if logging:
                loss = window.mean_loss()
                window = _Window()
            if self.validator is not None:
                self.validator.maybe_run(step, last, self.recipe, self.writer, self.progress)
            if last or self.saver.due(step, self.recipe.checkpoint_every_steps):
                self.saver.save(step)
                if not last:
                    self._replan(step)
        self.writer.flush()
        if out_of_time and step < self.recipe.steps:
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
            ended_by="budget" if step < self.settings.steps else "steps",
            budget_minutes=self.settings.max_minutes or None,
            planned_steps=self.recipe.steps, warmup_steps=self.recipe.warmup_steps,
            learning_rate_scale=self.recipe.learning_rate_scale, init_from=self.init_from)

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

    def _out_of_time(self, seconds_per_update: float) -> bool:
        """Whether another update and the final validation would overrun the budget."""
        if self.clock.budget_seconds is None:
            return False
        needed = seconds_per_update + (self.validator.seconds if self.validator else 0.0)
        return any_worker(self.strategy, self.clock.seconds_left() < needed)

    def _show(self, step: int, window: _Window, logging: bool) -> None:
        """The progress line after every update; TensorBoard scalars at logging steps."""
        loss, rate = window.mean_loss(), window.tokens_per_second()
        learning_rate = self.trainer.learning_rate()
        if logging:
            write_scalars(self.writer, step, {"train/loss": loss,
                                              "train/learning_rate": learning_rate,
                                              "train/tokens_per_second": rate})
        self.progress.update(step, {"loss": f"{loss:.4f}", "tok/s": f"{rate:,.0f}",
                                    "lr": f"{learning_rate:.2e}"}, log=logging)


def train_dataset_fn(config: PipelineConfig, seed: int) -> DatasetFn:
    """The run's train split as endless shuffled batches, sharded per worker; an InputError
    if no pair fits data.max_length (the batches would never come)."""
    paths, data = RunPaths(config.run_path), config.data
    shards = paths.train_shards()
    if not any_pair_fits(shards, paths.spm_model, data.max_length):
        raise InputError(f"{paths.train_manifest}: no train pair fits data.max_length "
                         f"({data.max_length} tokens a side, BOS and EOS included)")

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return make_dataset(shards, paths.spm_model, batch_tokens=data.batch_tokens,
                            max_length=data.max_length, shuffle_buffer=data.shuffle_buffer,
                            seed=seed, repeat=True, input_context=context)

    return dataset_fn


class _Window:
    """Token-weighted mean loss and training throughput over some steps."""

    def __init__(self) -> None:
        self.loss_sum = self.tokens = self.seconds = 0.0
        self.updates = 0

    def add(self, loss: float, tokens: float, seconds: float) -> None:
        self.loss_sum += loss * tokens
        self.tokens += tokens
        self.seconds += seconds
        self.updates += 1

    def seconds_per_update(self) -> float:
        return self.seconds / max(self.updates, 1)

    def mean_loss(self) -> float:
        return self.loss_sum / max(self.tokens, 1.0)

    def tokens_per_second(self) -> float:
        """Real target tokens per second of training (validation and saving left out)."""
        return self.tokens / max(self.seconds, 1e-9)
