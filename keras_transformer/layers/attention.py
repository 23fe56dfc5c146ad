"""Multi-head scaled dot-product attention (section 3.2), with projected keys/values exposed
so that a decoder can cache them.

`MultiHeadAttention` attends from a query [batch, q_time, d_model] over a key_value sequence
(itself by default) or over keys and values already projected by `project_key_value`
([batch, heads, k_time, d_k|d_v]); a decoding step's query is [batch, d_model] (one position,
its output too), or, with `queries_per_key` g, [n, d_model] over keys and values of one row
per g consecutive query rows ([n / g, heads, k_time, d]: a sentence's memory read by its g
beams); a mask is boolean, broadcastable to [batch, heads, q_time, k_time] (a step's of rank
4), True keeping a position; the scores and softmax are float32 whatever the layer's dtype.
A step runs in the ops TensorFlow's CPU kernels run fastest at its sizes (`_attend_step`),
or, traced within `onnx_step_form()`, in those ONNX Runtime fuses (`export.onnx_attention`).
`record_attention` wraps a call as a sub-layer function that keeps its weights.

Example:
    attention = MultiHeadAttention(num_heads=8, key_dim=64, value_dim=64)
    y = attention(x, attention_mask=padding_mask)  # [batch, time, d_model]
    key, value = attention.project_key_value(memory)  # [batch, 8, source_time, 64] each
    y, weights = attention(x, key=key, value=value, return_attention_scores=True)
    # weights float32 [batch, 8, time, source_time]
    y_t = attention(x_t, key=key, value=value, queries_per_key=4)  # x_t [batch * 4, d_model]
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, Iterator

import keras
import tensorflow as tf

from keras_transformer.layers.projection import Projection

_ONNX_STEP_FORM = contextvars.ContextVar("onnx_step_form", default=False)


@contextlib.contextmanager
def onnx_step_form() -> Iterator[None]:
    """Traces a decoding step's attention, within it, as a sequence's is traced (BatchMatMulV2,
    Softmax, the groups' transposes): the pattern `export.onnx_attention` fuses into ONNX
    Runtime's MultiHeadAttention.

    Example:
        with onnx_step_form():
            concrete = search.get_concrete_function(*specs)
    """
    token = _ONNX_STEP_FORM.set(True)
    try:
        yield
    finally:
        _ONNX_STEP_FORM.reset(token)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = softmax(Q_i K_i^T / sqrt(d_k)) V_i.

    Args:
        num_heads: h, the number of parallel heads.
        key_dim: d_k, the per-head size of queries and keys.
        value_dim: d_v, the per-head size of values.
        dropout: dropout on the attention weights (0 in the paper).

    Masks are boolean and broadcastable to [batch, heads, query_time, key_time]; True keeps a
    position. Example:
        attention = MultiHeadAttention(num_heads=8, key_dim=64, value_dim=64)
        outputs = attention(x, x, attention_mask=padding_mask)  # [batch, time, d_model]
    """

    def __init__(self, num_heads: int, key_dim: int, value_dim: int, dropout: float = 0.0,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.dropout = dropout
        self.query_dense = Projection(num_heads * key_dim, dtype=self.dtype_policy,
                                      name="query")
        self.key_dense = Projection(num_heads * key_dim, dtype=self.dtype_policy,
                                    name="key")
        self.value_dense = Projection(num_heads * value_dim, dtype=self.dtype_policy,
                                      name="value")
        self.output_dense = None
        self.weights_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, query_shape, key_value_shape=None) -> None:
        d_model = query_shape[-1]
        key_value_shape = key_value_shape or query_shape
        self.query_dense.build(query_shape)
        self.key_dense.build(key_value_shape)
        self.value_dense.build(key_value_shape)
        self.output_dense = Projection(d_model, dtype=self.dtype_policy, name="output")
        self.output_dense.build((*query_shape[:-1], self.num_heads * self.value_dim))

    def project_key_value(self, key_value: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Projects [batch, time, d_model] to keys [batch, heads, time, d_k] and values (a
        step's [batch, d_model]: time 1)."""
        key = self._split_heads(self.key_dense(key_value), self.key_dim)
        value = self._split_heads(self.value_dense(key_value), self.value_dim)
        return key, value

    def call(self, query: tf.Tensor, key_value: tf.Tensor | None = None,
             key: tf.Tensor | None = None, value: tf.Tensor | None = None,
             attention_mask: tf.Tensor | None = None, training: bool | None = None,
             return_attention_scores: bool = False,
             queries_per_key: int = 1) -> tf.Tensor | tuple[tf.Tensor, tf.Tensor]:
        """Attends from `query` [batch, q_time, d_model] over `key_value` [batch, k_time, d_model],
        or over already projected `key`/`value` [batch, heads, k_time, d_k|d_v]. Returns
        [batch, q_time, d_model], and the float32 attention weights [batch, heads, q_time,
        k_time] too with `return_attention_scores`. A step's `query` [batch, d_model] (q_time
        1) returns [batch, d_model]; with `queries_per_key` g, its rows in groups of g over
        `key`/`value` [batch / g, heads, k_time, d] (weights [batch / g, heads, g, k_time])."""
        if key is None or value is None:
            key, value = self.project_key_value(query if key_value is None else key_value)
        if (query.shape.rank == 2 and not return_attention_scores and not training
                and not _ONNX_STEP_FORM.get()):
            return self._attend_step(query, key, value, attention_mask, queries_per_key)
        weights = self._weights(query, key, attention_mask, queries_per_key)  # [b, h, q, k]
        dropped = self.weights_dropout(tf.cast(weights, self.compute_dtype), training=training)
        context = tf.matmul(dropped, value)  # [b, h, q, d_v]
        if query.shape.rank == 2 and queries_per_key > 1:  # [n / g, h, g, d_v] -> [n, h * d_v]
            context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]),
                                 [-1, self.num_heads * self.value_dim])
        elif query.shape.rank == 2:  # a step's (q = 1): [b, h * d_v]
            context = tf.reshape(context, [-1, self.num_heads * self.value_dim])
        else:
            context = tf.transpose(context, [0, 2, 1, 3])  # [b, q, h, d_v]
            batch, time = tf.shape(context)[0], tf.shape(context)[1]
            context = tf.reshape(context, [batch, time, self.num_heads * self.value_dim])
        output = self.output_dense(context)  # [b, q, d_model] (a step's [b, d_model])
        return (output, weights) if return_attention_scores else output

    def _attend_step(self, query: tf.Tensor, key: tf.Tensor, value: tf.Tensor,
                     attention_mask: tf.Tensor | None, queries_per_key: int) -> tf.Tensor:
        """`call`'s step, query [n, d_model] -> [n, d_model], in groups of g = `queries_per_key`
        rows over `key`/`value` [n / g, heads, k_time, d], without a transpose: every product
        broadcasts a group's one row of keys or values over its g queries; the softmax is
        exp(log_softmax) and float32 products are BatchMatMulV3 (`_step_product`)."""
        rows = [-1]  # [n, h, 1, d]; in groups, [n / g, g, h, 1, d] over [n / g, 1, h, k, d]
        if queries_per_key > 1:
            rows = [-1, queries_per_key]
            key, value = key[:, None], value[:, None]
            attention_mask = None if attention_mask is None else attention_mask[:, None]
        heads = tf.reshape(self.query_dense(query), [*rows, self.num_heads, 1, self.key_dim])
        scores = _step_product(heads, key, adjoint_y=True)  # [..., h, 1, k]
        scores = tf.cast(scores, tf.float32) * (self.key_dim ** -0.5)
        if attention_mask is not None:
            scores = tf.where(attention_mask, scores, tf.float32.min)
        weights = tf.cast(tf.exp(tf.nn.log_softmax(scores, axis=-1)), self.compute_dtype)
        context = _step_product(weights, value)  # [..., h, 1, d_v]
        return self.output_dense(tf.reshape(context, [-1, self.num_heads * self.value_dim]))

    def attention_weights(self, query: tf.Tensor, key_value: tf.Tensor,
                          attention_mask: tf.Tensor | None = None) -> tf.Tensor:
        """The float32 weights [batch, heads, q_time, k_time] that `call` attends with, and
        nothing else: no values, no context, no output projection."""
        key = self._split_heads(self.key_dense(key_value), self.key_dim)  # [b, h, k, d_k]
        return self._weights(query, key, attention_mask)

    def _weights(self, query: tf.Tensor, key: tf.Tensor, attention_mask: tf.Tensor | None,
                 queries_per_key: int = 1) -> tf.Tensor:
        """float32 [batch, heads, q_time, k_time]: softmax(Q K^T / sqrt(d_k)) of `query`
        [batch, q_time, d_model] (a step's [batch, d_model], in groups of `queries_per_key`:
        `call`) over projected keys [batch, heads, k_time, d_k], masked (False: left out) by
        `attention_mask`."""
        heads = self._split_heads(self.query_dense(query), self.key_dim,
                                  queries_per_key)  # [b, h, q, d_k]
        scores = tf.matmul(heads, key, transpose_b=True)  # [b, h, q, k]
        scores = tf.cast(scores, tf.float32) * (self.key_dim ** -0.5)
        if attention_mask is not None:
            scores = tf.where(attention_mask, scores, tf.float32.min)
        return tf.nn.softmax(scores, axis=-1)

    def _split_heads(self, x: tf.Tensor, depth: int, queries_per_key: int = 1) -> tf.Tensor:
        """[batch, time, heads * depth] -> [batch, heads, time, depth]; a step's [batch,
        heads * depth] -> [batch, heads, 1, depth], or in groups of g = `queries_per_key`
        consecutive rows [batch / g, heads, g, depth]."""
        if x.shape.rank == 2 and queries_per_key > 1:
            grouped = tf.reshape(x, [-1, queries_per_key, self.num_heads, depth])
            return tf.transpose(grouped, [0, 2, 1, 3])
        if x.shape.rank == 2:
            return tf.reshape(x, [-1, self.num_heads, 1, depth])
        batch, time = tf.shape(x)[0], tf.shape(x)[1]
        x = tf.reshape(x, [batch, time, self.num_heads, depth])
        return tf.transpose(x, [0, 2, 1, 3])

    def compute_output_shape(self, query_shape, key_value_shape=None):
        return query_shape

    def get_config(self) -> dict:
        return {**super().get_config(), "num_heads": self.num_heads, "key_dim": self.key_dim,
                "value_dim": self.value_dim, "dropout": self.dropout}


def _step_product(x: tf.Tensor, y: tf.Tensor, adjoint_y: bool = False) -> tf.Tensor:
    """x y (y's last two axes swapped with `adjoint_y`), batch axes broadcast, for a decoding
    step's attention. TensorFlow's x86 packages run float32 MatMul, BatchMatMulV2, Softmax and
    Transpose as oneDNN's kernels on CPUs with AVX-512 VNNI or BF16 or with AMX, at a fixed
    cost per call about ten times a step's product; BatchMatMulV3, LogSoftmax and Exp stay
    Eigen's, as every op does on older CPUs (docs/decoding-speed.md). bfloat16 stays a
    BatchMatMulV2: Eigen's bfloat16 products are emulated, slower from batch 32 on."""
    if x.dtype == tf.float32:
        return tf.raw_ops.BatchMatMulV3(x=x, y=y, adj_y=adjoint_y, Tout=tf.float32)
    return tf.matmul(x, y, adjoint_b=adjoint_y)


def record_attention(attention: MultiHeadAttention, scores: dict[str, tf.Tensor], name: str,
               *args, **kwargs) -> Callable[[tf.Tensor], tf.Tensor]:
    """A sub-layer function calling `attention(h, *args, **kwargs)` that keeps its attention
    weights in scores[name]."""
    def attend(h: tf.Tensor) -> tf.Tensor:
        output, scores[name] = attention(h, *args, return_attention_scores=True, **kwargs)
        return output
    return attend
