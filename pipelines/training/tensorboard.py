"""TensorBoard scalars, written with core TF (tf.summary.scalar needs the `tensorboard`
package).

Example:
    >>> write_scalars(writer, step=1000, values={"train/loss": 4.21})
"""
from __future__ import annotations

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))


def write_scalars(writer: tf.summary.SummaryWriter, step: int,
                  values: dict[str, float]) -> None:
    """TensorBoard scalars (shown by its Scalars dashboard) at `step`."""
    with writer.as_default(step=step):
        for name, value in values.items():
            tf.summary.write(name, tf.constant(value, tf.float32), metadata=SCALAR_METADATA)
