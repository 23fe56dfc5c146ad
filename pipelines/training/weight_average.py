"""An exponential moving average of the trainable weights (`train.ema_decay`), updated after
every applied update, saved in the training checkpoints (as `ema`) and written as a model-only
checkpoint, checkpoints/ema/ckpt, that evaluate and export read like the averaged one.

    average = ema_decay if the run follows its configured steps, else compressed (below)
    decay_n = min(average, (1 + n) / (10 + n))       n: updates applied before this one
    shadow  = decay_n * shadow + (1 - decay_n) * weight

The (1 + n) / (10 + n) warm-up is tf.train.ExponentialMovingAverage's `num_updates` rule
(OpenNMT-tf's `moving_average_decay`): the first updates are not held back by the random
initial weights. A budget that compresses the recipe by r (`pipelines.training.budget`) divides
the average's horizon 1 / (1 - decay) by r too, so that it covers the same share of the run.
Keras optimizers' own `use_ema` has a fixed momentum without that warm-up and updates in the
replica context with an aggregation MirroredStrategy refuses, hence this module.

Example:
    >>> ema = WeightAverage(model.trainable_variables, decay=0.999)
    >>> ema.update(model.trainable_variables, updates, applied)  # in the step
"""
from __future__ import annotations

from typing import Callable

import keras
import tensorflow as tf


class WeightAverage(tf.Module):
    """Shadow copies of `variables` (float32 trainable weights), created under the current
    strategy scope, one per variable, in the same order.

    Args:
        variables: the model's trainable variables.
        decay: the configured decay in (0, 1).
        compression: () -> the budget's compression ratio r in (0, 1], read at each update:
            the average's horizon is multiplied by it.
    """

    def __init__(self, variables: list[keras.Variable], decay: float,
                 compression: Callable[[], tf.Tensor] = lambda: tf.constant(1.0)) -> None:
        super().__init__(name="weight_average")
        self.decay = decay
        self.compression = compression
        self.shadows = [
            tf.Variable(variable.value, trainable=False,
                        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                        name=f"average_{index}")
            for index, variable in enumerate(variables)]  # each [the variable's shape]

    def current_decay(self, updates: tf.Tensor) -> tf.Tensor:
        """The decay of the update after `updates` applied ones (module docstring)."""
        compressed = 1.0 - (1.0 - self.decay) / tf.maximum(self.compression(), 1e-6)
        n = tf.cast(updates, tf.float32)
        return tf.maximum(tf.minimum(compressed, (1.0 + n) / (10.0 + n)), 0.0)

    def update(self, variables: list[keras.Variable], updates: tf.Tensor,
               applied: tf.Tensor) -> None:
        """Moves the shadows towards `variables`, where `applied` (a bool scalar: loss
        scaling may skip an update, and then the average does not move)."""
        decay = tf.where(applied, self.current_decay(updates), 1.0)
        for shadow, variable in zip(self.shadows, variables):
            shadow.assign(decay * shadow + (1.0 - decay) * variable.value)

    def reset(self, variables: list[keras.Variable]) -> None:
        """Sets the shadows to `variables` (weights loaded from elsewhere: a parent)."""
        for shadow, variable in zip(self.shadows, variables):
            shadow.assign(variable.value)

    def model_variables(self, model: keras.Model) -> list[tf.Variable]:
        """model.variables with each trainable one replaced by its shadow: the list that
        `pipelines.checkpoints.weights.model_checkpoint` saves, so that the averaged weights
        restore into any model of the same architecture."""
        shadows = {id(variable): shadow
                   for variable, shadow in zip(model.trainable_variables, self.shadows)}
        return [shadows.get(id(variable), variable) for variable in model.variables]
