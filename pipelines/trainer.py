"""The compiled update: a Transformer, Adam on eq. 3 and the distributed training step.

An update sums `accumulate_steps` batches per replica; the loss is the label-smoothed
cross-entropy summed over real target tokens and divided by the real target tokens of the whole
update, all-reduced over replicas, so N replicas make the update one replica makes on the union
of their batches. mixed_float16 adds dynamic loss scaling; `train.jit_compile` compiles the
forward and backward passes with XLA (once per batch shape).
"""
from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.losses import (label_smoothed_cross_entropy,
                                      projected_label_smoothed_cross_entropy)
from keras_transformer.schedules import paper_optimizer
from keras_transformer.tokenizer import PAD_ID
from pipelines.budget import TrainingClock
from pipelines.config import PipelineConfig
from pipelines.models import build_model

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


def _real_tokens(labels: tf.Tensor) -> tf.Tensor:
    return tf.reduce_sum(tf.cast(labels != PAD_ID, tf.float32))  # scalar
