"""The train stage: the paper's recipe (section 5) under a tf.distribute strategy.

runs/NAME/{data,vocab} -> runs/NAME/checkpoints/ckpt-STEP, runs/NAME/logs (TensorBoard).

* Strategy: `pipelines.strategy.make_strategy` (MirroredStrategy, or MultiWorkerMirroredStrategy
  under a TF_CONFIG cluster); each worker reads its shard of the data through
  `distribute_datasets_from_function`, each replica batches of data.batch_tokens / replicas.
* Update: `accumulate_steps` batches per replica, one compiled tf.function whose input
  signature leaves every batch shape free (it traces once). The loss is the label-smoothed
  cross-entropy summed over real target tokens and divided by the real target tokens of the
  whole update, all-reduced over replicas; Keras sums the replicas' gradients, so N replicas
  make the update one replica makes on the union of their batches. Adam(0.9, 0.98, 1e-9) on
  the schedule of eq. 3; mixed_float16 adds dynamic loss scaling; `jit_compile` compiles the
  forward and backward passes with XLA (once per batch shape).
* Checkpoints every N steps and/or minutes (and at the end), the last K kept; a rerun resumes
  from the latest with its step, optimizer state and schedule (`pipelines.checkpoints`).
  The data order is reseeded with the step, so a resumed run does not replay its first batches.
* Observability: dev loss and greedy dev BLEU every N steps, TensorBoard scalars, a progress
  line; a non-finite loss or gradient stops the run naming the step, before any checkpoint of
  the bad weights is written.

Example:
    summary = train(load_config("demo"))
"""
from __future__ import annotations

import dataclasses
import math
import shutil
import time
from pathlib import Path
from typing import Callable

import keras
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from keras_transformer.config import ModelConfig
from keras_transformer.losses import (label_smoothed_cross_entropy,
                                      projected_label_smoothed_cross_entropy)
from keras_transformer.model import Transformer
from keras_transformer.schedules import paper_optimizer
from keras_transformer.tokenizer import PAD_ID, Tokenizer
from pipelines import InputError
from pipelines.budget import Recipe, TrainingClock
from pipelines.checkpoints import (checkpoint_dir, checkpoint_step, make_manager,
                                   model_checkpoint)
from pipelines.config import ConfigError, PipelineConfig
from pipelines.data import make_dataset
from pipelines.shards import train_shards
from pipelines.progress import Progress
from pipelines.strategy import (any_worker, chief_value, is_chief, is_multi_worker,
                                make_strategy, mean_over_workers, task_id)
from pipelines.validation import DevBleu, DevLoss

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]
Batch = dict[str, tf.Tensor]
# TensorBoard's scalar summaries, written with core TF (tf.summary.scalar needs `tensorboard`).
SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))


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

    def format(self) -> str:
        """The summary as the CLI prints it."""
        resumed = f"resumed at step {self.start_step:,}, " if self.start_step else ""
        lines = [f"trained {self.run_dir} to step {self.step:,} ({resumed}{self.strategy}, "
                 f"{self.replicas} replica(s)) in {self.seconds:.0f} s",
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


def build_model(config: PipelineConfig, vocab_size: int, dtype: str | None = None) -> Transformer:
    """The Transformer of the `model` section in the Keras dtype policy `dtype` (default: the
    section's, `auto` resolved), its weights created under the current strategy scope, if any.

    Raises:
        ConfigError: the preset with its overrides is not a valid ModelConfig.
    """
    try:
        model_config = ModelConfig.from_preset(config.model.preset, vocab_size=vocab_size,
                                               pad_id=PAD_ID, **config.model.overrides())
    except ValueError as error:
        raise ConfigError(f"model: {error}") from None
    if model_config.max_length < config.data.max_length:
        raise ConfigError(f"model.max_length ({model_config.max_length}) is below "
                          f"data.max_length ({config.data.max_length})")
    return Transformer(model_config, dtype=dtype or config.model.resolved_dtype()[0])


def make_optimizer(config: PipelineConfig, d_model: int, dtype: str,
                   clock: TrainingClock | None = None) -> keras.optimizers.Optimizer:
    """Adam on eq. 3 (its warm-up and scale read from the clock's variables if given, so that
    a budget can compress it), with dynamic loss scaling when the dtype policy `dtype` is
    mixed_float16."""
    optimizer = paper_optimizer(
        d_model, clock.warmup_steps if clock else config.train.warmup_steps,
        clock.learning_rate_scale if clock else config.train.learning_rate_scale)
    if dtype == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


class Trainer:
    """The model, its optimizer and the compiled update under a strategy.

    Example:
        trainer = Trainer(config, vocab_size, strategy)
        dataset = strategy.distribute_datasets_from_function(dataset_fn)
        trainer.compile(dataset.element_spec)
        loss, tokens, finite = trainer.train_step(tuple(next(iterator) for _ in range(k)))
    """

    def __init__(self, config: PipelineConfig, vocab_size: int,
                 strategy: tf.distribute.Strategy, clock: TrainingClock | None = None) -> None:
        self.config = config
        self.strategy = strategy
        self.dtype, self.dtype_reason = config.model.resolved_dtype()
        with strategy.scope():
            self.model = build_model(config, vocab_size, self.dtype)
            self.optimizer = make_optimizer(config, self.model.model_config.d_model, self.dtype,
                                            clock)
            self.optimizer.build(self.model.trainable_variables)
        clock_state = {"clock": clock} if clock else {}  # saved with the weights
        self.checkpoint = model_checkpoint(self.model, optimizer=self.optimizer, **clock_state)
        self.loss_scaling = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        self._gradients = (tf.function(self._batch_gradients, jit_compile=True)
                           if config.train.jit_compile else self._batch_gradients)
        self.train_step: tf.types.experimental.GenericFunction | None = None

    @property
    def step(self) -> int:
        """Updates applied so far (the optimizer's iterations)."""
        return int(self.optimizer.iterations.numpy())

    def learning_rate(self) -> float:
        return float(self.optimizer.learning_rate)

    def compile(self, element_spec) -> None:
        """Compiles `train_step` for per-replica batches of `element_spec` (a distributed
        dataset's): it takes a tuple of accumulate_steps batches and returns (mean loss,
        real target tokens, whether the loss and gradients were finite), all global."""
        specs = (element_spec,) * self.config.train.accumulate_steps
        self.train_step = tf.function(self._distributed_step, input_signature=[specs])

    def _distributed_step(self, batches: tuple[Batch, ...]) -> tuple[tf.Tensor, ...]:
        results = self.strategy.run(self._replica_step, args=(batches,))
        # Every result is all-reduced: each replica holds the same values.
        return tuple(self.strategy.experimental_local_results(r)[0] for r in results)

    def _replica_step(self, batches: tuple[Batch, ...]) -> tuple[tf.Tensor, ...]:
        context = tf.distribute.get_replica_context()
        tokens = tf.add_n([_real_tokens(batch["target_ids"][:, 1:]) for batch in batches])
        global_tokens = context.all_reduce(tf.distribute.ReduceOp.SUM, tokens)
        loss_sum, grads = tf.constant(0.0), None
        for batch in batches:
            with tf.control_dependencies(grads or []):  # one batch's activations at a time
                batch_loss, batch_grads = self._gradients(batch["source_ids"],
                                                          batch["target_ids"], global_tokens)
            loss_sum += batch_loss
            batch_grads = [tf.convert_to_tensor(g) for g in batch_grads]  # dense
            grads = batch_grads if grads is None else [a + b for a, b in zip(grads, batch_grads)]
        finite = tf.math.is_finite(tf.linalg.global_norm(grads)) | self.loss_scaling
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        loss = context.all_reduce(tf.distribute.ReduceOp.SUM, loss_sum) / global_tokens
        bad = context.all_reduce(tf.distribute.ReduceOp.SUM, 1.0 - tf.cast(finite, tf.float32))
        return loss, global_tokens, tf.math.is_finite(loss) & (bad == 0)

    def _batch_gradients(self, source_ids: tf.Tensor, target_ids: tf.Tensor,
                         global_tokens: tf.Tensor) -> tuple[tf.Tensor, list[tf.Tensor]]:
        """(summed loss of the batch, gradients of its share of the update's mean loss)."""
        labels = target_ids[:, 1:]  # [b, t - 1]
        smoothing = self.model.model_config.label_smoothing
        inputs = {"source_ids": source_ids, "target_ids": target_ids[:, :-1]}
        with tf.GradientTape() as tape:
            if self.config.train.jit_compile:  # XLA plans the buffers of whole logits itself
                logits = self.model(inputs, training=True)  # [b, t - 1, vocab] float32
                loss_sum, _ = label_smoothed_cross_entropy(labels, logits, smoothing, PAD_ID)
            else:
                hidden = self.model.features(inputs, training=True)  # [b, t - 1, d_model]
                loss_sum, _ = projected_label_smoothed_cross_entropy(
                    labels, hidden, self.model.embedding.embeddings, smoothing, PAD_ID)
            scaled = self.optimizer.scale_loss(loss_sum / global_tokens)
        return loss_sum, tape.gradient(scaled, self.model.trainable_variables)


def train(config: PipelineConfig, *, strategy: tf.distribute.Strategy | None = None,
          dataset_fn: DatasetFn | None = None) -> TrainSummary:
    """Trains (or resumes training) the run of `config` to `train.steps` updates, or until its
    `train.max_minutes` budget is spent (`pipelines.budget`).

    Args:
        config: the pipeline config; reads runs/NAME/vocab/spm.model and data/.
        strategy: default `make_strategy()`.
        dataset_fn: per-worker training batches (default: the run's train split, endless).

    Raises:
        InputError: the run is not prepared.
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
        spm_path = config.run_path / "vocab" / "spm.model"
        if not spm_path.is_file():
            raise InputError(f"{spm_path}: no such file; run `keras-transformer prepare` first")
        keras.utils.set_random_seed(self.settings.seed)
        self.strategy = strategy or make_strategy()
        tokenizer = Tokenizer.from_file(spm_path)
        self.clock = TrainingClock(self.settings)
        self.trainer = Trainer(config, tokenizer.vocab_size, self.strategy, self.clock)
        self.saver = _Saver(self.trainer, config.run_path, self.clock)
        self.start_step = self.saver.restore()
        self.recipe = self.clock.recipe(self.settings)
        self._planned_at = (self.clock.elapsed(), self.start_step)  # when and where planned
        self.dataset = self.strategy.distribute_datasets_from_function(
            dataset_fn or train_dataset_fn(config, seed=config.data.seed + self.start_step))
        self.trainer.compile(self.dataset.element_spec)
        chief = is_chief(self.strategy)
        self.validator = _Validator(config, self.trainer.model, tokenizer) if chief else None
        self.writer = (tf.summary.create_file_writer(str(config.run_path / "logs")) if chief
                       else tf.summary.create_noop_writer())
        self.progress = Progress(self.recipe.steps, enabled=chief, elapsed=self.clock.elapsed,
                                 budget_seconds=self.clock.budget_seconds)

    def run(self) -> TrainSummary:
        """Trains to the recipe's steps or to the budget, validating, logging and saving."""
        try:
            self.progress.message(f"dtype {self.trainer.dtype_reason}")
            return self._run()
        finally:
            self.progress.close()

    def _run(self) -> TrainSummary:
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
            run_dir=self.config.run_path, strategy=_strategy_name(self.strategy),
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
            learning_rate_scale=self.recipe.learning_rate_scale)

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


def write_scalars(writer: tf.summary.SummaryWriter, step: int,
                  values: dict[str, float]) -> None:
    """TensorBoard scalars (shown by its Scalars dashboard) at `step`."""
    with writer.as_default(step=step):
        for name, value in values.items():
            tf.summary.write(name, tf.constant(value, tf.float32), metadata=SCALAR_METADATA)


def train_dataset_fn(config: PipelineConfig, seed: int) -> DatasetFn:
    """The run's train split as endless shuffled batches, sharded per worker."""
    run, data = config.run_path, config.data
    shards = train_shards(run / "data")

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return make_dataset(shards, run / "vocab" / "spm.model", batch_tokens=data.batch_tokens,
                            max_length=data.max_length, shuffle_buffer=data.shuffle_buffer,
                            seed=seed, repeat=True, input_context=context)

    return dataset_fn


def _strategy_name(strategy: tf.distribute.Strategy) -> str:
    # MultiWorkerMirroredStrategy's class is CollectiveAllReduceStrategy.
    return "MultiWorkerMirroredStrategy" if is_multi_worker(strategy) else type(strategy).__name__


def _real_tokens(labels: tf.Tensor) -> tf.Tensor:
    return tf.reduce_sum(tf.cast(labels != PAD_ID, tf.float32))  # scalar


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


class _Saver:
    """Checkpoints by steps and minutes. Under MultiWorkerMirroredStrategy every worker saves
    (saving may need collectives), the chief into checkpoints/, the others into a temporary
    directory removed at once."""

    def __init__(self, trainer: Trainer, run: Path, clock: TrainingClock) -> None:
        self.trainer = trainer
        self.clock = clock
        self.settings = trainer.config.train
        self.directory = checkpoint_dir(run)
        self.chief = is_chief(trainer.strategy)
        write_dir = (self.directory if self.chief
                     else self.directory / f".{task_id(trainer.strategy)}")
        self.manager = make_manager(trainer.checkpoint, write_dir, self.settings.keep_checkpoints)
        self.latest: str | None = tf.train.latest_checkpoint(str(self.directory))
        self.last_save = time.monotonic()

    def restore(self) -> int:
        """Restores the latest checkpoint, if any; returns its step (0 without one)."""
        if self.latest is None:
            return 0
        weights = model_checkpoint(self.trainer.model, optimizer=self.trainer.optimizer)
        weights.restore(self.latest).assert_existing_objects_matched()
        # Checkpoints of versions without a clock still resume: their time is not known.
        tf.train.Checkpoint(clock=self.clock).restore(self.latest).expect_partial()
        if self.trainer.step != checkpoint_step(self.latest):
            raise RuntimeError(f"{self.latest} holds step {self.trainer.step}, not "
                               f"{checkpoint_step(self.latest)}")
        self.clock.restored()
        return self.trainer.step

    def due(self, step: int, every_steps: int) -> bool:
        minutes = self.settings.checkpoint_every_minutes
        if every_steps and step % every_steps == 0:
            return True
        elapsed = time.monotonic() - self.last_save
        return bool(minutes) and any_worker(self.trainer.strategy, elapsed >= 60 * minutes)

    def save(self, step: int) -> None:
        self.clock.before_save()
        path = self.manager.save(checkpoint_number=step)
        self.last_save = time.monotonic()
        if self.chief:
            self.latest = path
        else:
            shutil.rmtree(self.manager.directory, ignore_errors=True)


class _Validator:
    """Dev loss and dev BLEU at their intervals and at the last step (chief only)."""

    def __init__(self, config: PipelineConfig, model: Transformer, tokenizer: Tokenizer) -> None:
        self.settings = config.train
        data_dir, data = config.run_path / "data", config.data
        src, tgt = data_dir / "dev.src", data_dir / "dev.tgt"
        has_dev = src.is_file() and tgt.is_file()
        self.loss = self.bleu = None
        if has_dev and self.settings.validate_every_steps:
            self.loss = DevLoss(model, make_dataset(
                [(src, tgt)], config.run_path / "vocab" / "spm.model", shuffle=False,
                batch_tokens=data.batch_tokens, max_length=data.max_length))
        if has_dev and self.settings.bleu_every_steps:
            self.bleu = DevBleu(model, tokenizer, src, tgt, self.settings.bleu_max_sentences)
        self.dev_loss: float | None = None
        self.dev_bleu: float | None = None
        self.loss_seconds = self.bleu_seconds = 0.0  # the last runs' durations

    @property
    def seconds(self) -> float:
        """What the final validation is expected to take (0 before any has run)."""
        return self.loss_seconds + self.bleu_seconds

    def maybe_run(self, step: int, last: bool, recipe: Recipe, writer: tf.summary.SummaryWriter,
                  progress: Progress) -> None:
        if self.loss is not None and (last or step % recipe.validate_every_steps == 0):
            started = time.monotonic()
            self.dev_loss, perplexity = self.loss()
            self.loss_seconds = time.monotonic() - started
            write_scalars(writer, step, {"dev/loss": self.dev_loss, "dev/perplexity": perplexity})
            progress.message(f"step {step:,}: dev loss {self.dev_loss:.4f}, "
                             f"perplexity {perplexity:.2f}")
        if self.bleu is not None and (last or step % recipe.bleu_every_steps == 0):
            started = time.monotonic()
            self.dev_bleu = self.bleu()
            self.bleu_seconds = time.monotonic() - started
            write_scalars(writer, step, {"dev/bleu": self.dev_bleu})
            progress.message(f"step {step:,}: dev BLEU {self.dev_bleu:.2f} (greedy, "
                             f"{len(self.bleu.references)} sentences)")
