"""The compiled update: a Transformer, Adam on eq. 3 and the distributed training step.

An update sums `accumulate_steps` batches per replica; the loss is the label-smoothed
cross-entropy summed over real target tokens and divided by the real target tokens of the whole
update (plus, with `train.guided_alignment_weight`, that weight times the guided-alignment
cross-entropy of one head, summed over target pieces: keras_transformer.guided_alignment;
the loss reported is the translation's alone),
all-reduced over replicas, so N replicas make the update one replica makes on the union
of their batches. mixed_float16 adds dynamic loss scaling, whose skip-or-apply verdict is
taken once for all replicas and workers. `train.jit_compile` compiles the forward and backward
passes with XLA, once per batch shape, with the loss in chunks of rows as without XLA (no
[batch, time, vocab] logits).

Example:
    >>> trainer = Trainer(config, vocab_size, strategy, clock)
    >>> loss = trainer.step(batches)  # one update: accumulate_steps batches per replica
"""
from __future__ import annotations

from typing import Callable

import keras
import tensorflow as tf

from keras_transformer.alignment import alignment_layer
from keras_transformer.guided_alignment import GUIDED_HEAD, guided_alignment_loss
from keras_transformer.losses import projected_label_smoothed_cross_entropy
from keras_transformer.schedules import paper_optimizer
from keras_transformer.tokenizer import PAD_ID
from pipelines.training.budget import TrainingClock
from pipelines.config import PipelineConfig
from pipelines.models import build_model
from pipelines.training.weight_average import WeightAverage

Batch = dict[str, tf.Tensor]


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
            self.weight_average = (
                WeightAverage(self.model.trainable_variables, config.train.ema_decay,
                              _compression(config, clock))
                if config.train.ema_decay else None)
        self.guided_weight = config.train.guided_alignment_weight
        self.loss_scaling = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        self._gradients = (tf.function(self._batch_gradients, jit_compile=True,
                                       autograph=False)
                           if config.train.jit_compile else self._batch_gradients)
        self.train_step: tf.types.experimental.GenericFunction | None = None
        self.compiled_shapes: set[tuple[tuple[int, ...], ...]] = set()  # by XLA, this worker

    def loss_scale(self) -> float | None:
        """The dynamic loss scale of mixed_float16 (None without loss scaling)."""
        return float(self.optimizer.dynamic_scale.numpy()) if self.loss_scaling else None

    @property
    def step(self) -> int:
        """Updates applied so far (the optimizer's iterations)."""
        return int(self.optimizer.iterations.numpy())

    def learning_rate(self) -> float:
        return float(self.optimizer.learning_rate)

    def compile(self, element_spec) -> None:
        """Compiles `train_step` for per-replica batches of `element_spec` (a distributed
        dataset's): it takes a tuple of accumulate_steps batches and returns (mean loss,
        real target tokens, whether every replica's gradients were finite), all global. With
        loss scaling a non-finite step is skipped everywhere and the loss scale halved; without,
        it is applied and the caller must stop (`pipelines.training.train` does, before saving)."""
        specs = (element_spec,) * self.config.train.accumulate_steps
        self.train_step = tf.function(self._distributed_step, input_signature=[specs],
                                      autograph=False)

    def new_compiled_shapes(self, batches: tuple[Batch, ...]) -> list[tuple[tuple[int, ...], ...]]:
        """The ([batch, source], [batch, target]) shapes among this worker's replicas'
        `batches` that XLA has not compiled the update for yet, from now on counted as
        compiled; always empty without `train.jit_compile`."""
        if not self.config.train.jit_compile:
            return []
        new = []
        for batch in batches:
            for source, target in zip(*(self.strategy.experimental_local_results(batch[key])
                                        for key in ("source_ids", "target_ids"))):
                shape = (tuple(source.shape), tuple(target.shape))
                if shape not in self.compiled_shapes:
                    self.compiled_shapes.add(shape)
                    new.append(shape)
        return new

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
                batch_loss, batch_grads = self._gradients(
                    batch["source_ids"], batch["target_ids"], global_tokens,
                    batch.get("alignment") if self.guided_weight else None)
            loss_sum += batch_loss
            batch_grads = [tf.convert_to_tensor(g) for g in batch_grads]  # dense
            grads = batch_grads if grads is None else [a + b for a, b in zip(grads, batch_grads)]
        finite = _all_finite(context, grads)
        if self.loss_scaling:
            grads = _agree_on_overflow(grads, finite)
        if self.weight_average is None:
            self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        else:
            applied_before = tf.identity(self.optimizer.iterations)
            self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
            self.weight_average.update(self.model.trainable_variables, applied_before, finite)
        loss = context.all_reduce(tf.distribute.ReduceOp.SUM, loss_sum) / global_tokens
        return loss, global_tokens, finite

    def _batch_gradients(self, source_ids: tf.Tensor, target_ids: tf.Tensor,
                         global_tokens: tf.Tensor, alignment: tf.Tensor | None = None
                         ) -> tuple[tf.Tensor, list[tf.Tensor]]:
        """(summed loss of the batch, gradients of its share of the update's mean loss).
        alignment: float32 [b, t, s] gold links of target_ids' pieces (guided alignment)."""
        labels = target_ids[:, 1:]  # [b, t - 1]
        smoothing = self.model.model_config.label_smoothing
        inputs = {"source_ids": source_ids, "target_ids": target_ids[:, :-1]}
        with tf.GradientTape() as tape:
            if alignment is None:
                hidden = self.model.features(inputs, training=True)  # [b, t - 1, d_model]
            else:
                hidden, attention = self.model.features_and_cross_attention(
                    inputs, alignment_layer(self.model.model_config), training=True)
            loss_sum, _ = projected_label_smoothed_cross_entropy(
                labels, hidden, self.model.embedding.embeddings, smoothing, PAD_ID,
                static_shapes=self.config.train.jit_compile)
            total = loss_sum  # the translation loss alone is reported
            if alignment is not None:  # the head's rows predict labels: gold rows 1 ..
                total += self.guided_weight * guided_alignment_loss(
                    attention[:, GUIDED_HEAD], alignment[:, 1:])  # [b, t - 1, s]
            scaled = self.optimizer.scale_loss(total / global_tokens)
        return loss_sum, tape.gradient(scaled, self.model.trainable_variables)


def _compression(config: PipelineConfig, clock: TrainingClock | None) -> Callable[[], tf.Tensor]:
    """The budget's compression of the recipe, r = compressed / configured warm-up (1 without
    a budget or a plan), read when the step runs."""
    if clock is None:
        return lambda: tf.constant(1.0)
    return lambda: tf.cast(clock.warmup_steps, tf.float32) / config.train.warmup_steps


def _all_finite(context: tf.distribute.ReplicaContext, grads: list[tf.Tensor]) -> tf.Tensor:
    """Whether every replica's gradients (of every worker) are finite: one verdict, the same
    on all of them. A scalar bool."""
    local = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
    overflowed = context.all_reduce(tf.distribute.ReduceOp.SUM, 1.0 - tf.cast(local, tf.float32))
    return overflowed == 0


def _agree_on_overflow(grads: list[tf.Tensor], finite: tf.Tensor) -> list[tf.Tensor]:
    """`grads` with NaN in the first gradient where another replica's overflowed.

    LossScaleOptimizer decides to skip the update from the gradients it is given, before they
    are all-reduced: under MirroredStrategy replica 0's verdict is taken for all, under
    MultiWorkerMirroredStrategy each worker takes its own, and one that applies enters the
    all-reduce that another skipped (a hang). Poisoned by the agreed verdict, every replica's
    gradients say the same, so all skip (the loss scale halved) or all apply.
    """
    poison = tf.where(finite, 0.0, float("nan"))
    return [grads[0] + tf.cast(poison, grads[0].dtype), *grads[1:]]


def _real_tokens(labels: tf.Tensor) -> tf.Tensor:
    return tf.reduce_sum(tf.cast(labels != PAD_ID, tf.float32))  # scalar
