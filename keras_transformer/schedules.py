"""The paper's learning-rate schedule (section 5.3, eq. 3) and optimizer.

`TransformerSchedule` gives lrate = scale * d_model^-0.5 * min(step_num^-0.5, step_num *
warmup_steps^-1.5), step_num counting updates from 1; `warmup_steps` and `scale` may be
variables that a trainer sets later. `paper_optimizer` is Adam(beta_1=0.9, beta_2=0.98,
epsilon=1e-9) on it.

Example:
    optimizer = paper_optimizer(d_model=512, warmup_steps=4000)
    TransformerSchedule(512, 4000)(3999)  # the peak, at step_num 4000: 512^-0.5 * 4000^-0.5
"""
from __future__ import annotations

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale * d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5).

    `step_num` counts updates from 1, so the optimizer's iteration 0 applies step_num 1.

    Args:
        d_model: the model width.
        warmup_steps: linear warm-up length (4000 in the paper); a variable lets a trainer
            set it once it knows how many steps a time budget allows.
        scale: a multiplier on the whole schedule (1 in the paper); also a variable or a float.
    """

    def __init__(self, d_model: int, warmup_steps: int | tf.Variable = 4000,
                 scale: float | tf.Variable = 1.0) -> None:
        if float(warmup_steps) <= 0:
            raise ValueError(f"warmup_steps must be positive, got {warmup_steps!r}")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step: tf.Tensor) -> tf.Tensor:
        step_num = tf.cast(step, tf.float32) + 1.0
        warmup = tf.cast(self.warmup_steps, tf.float32)
        decay = tf.minimum(tf.math.rsqrt(step_num), step_num * warmup ** -1.5)
        return tf.cast(self.scale, tf.float32) * self.d_model ** -0.5 * decay

    def get_config(self) -> dict:
        return {"d_model": self.d_model, "warmup_steps": float(self.warmup_steps),
                "scale": float(self.scale)}


def paper_optimizer(d_model: int, warmup_steps: int | tf.Variable = 4000,
                    scale: float | tf.Variable = 1.0,
                    **kwargs) -> keras.optimizers.Adam:
    """Adam(beta_1=0.9, beta_2=0.98, epsilon=1e-9) on the schedule of eq. 3."""
    return keras.optimizers.Adam(TransformerSchedule(d_model, warmup_steps, scale),
                                 beta_1=0.9, beta_2=0.98, epsilon=1e-9, **kwargs)
