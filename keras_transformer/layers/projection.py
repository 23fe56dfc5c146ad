"""The learned linear projection x W + b: keras.layers.Dense as one matrix product at any rank.

`Projection` is keras.layers.Dense (the same arguments, weights `kernel` [in, units] and `bias`
[units], config and checkpoint keys) whose input of rank 3 or more is flattened to rows
[positions, in] for one MatMul and the product reshaped back. Keras's own product of such an
input is tf.tensordot, whose dynamic shape arithmetic (Gather, Prod, Transpose and more) goes
into every graph traced from the model: training steps, the exported searches, and the graphs
that TF Serving and tf2onnx then optimize or convert (docs/figures.md). The numbers are the
same: tf.tensordot multiplies the same flattened rows.

Example:
    query = Projection(512, name="query")
    q = query(x)  # [batch, time, d_model] -> [batch, time, 512]; [batch, d_model] -> [batch, 512]
"""
from __future__ import annotations

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="keras_transformer")
class Projection(keras.layers.Dense):
    """x W + b (then the activation, if any) over the last axis of x, of any rank >= 2.

    Example:
        inner = Projection(2048, activation="relu", name="inner")
        hidden = inner(x)  # [batch, time, 512] -> [batch, time, 2048]
    """

    def call(self, inputs: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        if inputs.shape.rank == 2:
            outputs = tf.matmul(inputs, self.kernel)  # [rows, units]
        else:
            rows = tf.reshape(inputs, [-1, inputs.shape[-1]])  # [positions, in]
            outputs = tf.reshape(tf.matmul(rows, self.kernel),
                                 tf.concat([tf.shape(inputs)[:-1], [self.units]], axis=0))
        if self.bias is not None:
            outputs = tf.nn.bias_add(outputs, self.bias)  # the op Keras adds a bias with
        return outputs if self.activation is None else self.activation(outputs)
