"""FLOP accounting for bench/train_throughput.py: the analytic FLOPs of a training update and
the best GFLOP/s of a large tf.matmul (the machine's practical peak)."""
from __future__ import annotations

import time
from typing import Sequence

import tensorflow as tf

from keras_transformer.config import ModelConfig

MATMUL_SIZE = 2048
Update = Sequence[dict[str, tf.Tensor]]  # accumulate_steps (distributed) batches


def training_flops(config: ModelConfig, batch: int, source_time: int, target_time: int) -> float:
    """FLOPs of training on one [batch, source_time] source / [batch, target_time] target_ids
    batch (the decoder reads target_time - 1 positions), counted on the padded shapes.

    Counts the forward multiply-adds of every dense projection (attention queries, keys,
    values and output; both feed-forward layers), of the attention score and value matmuls
    (causal ones in full, as computed) and of the tied pre-softmax projection; 2 FLOPs per
    multiply-add, times 3 for forward + backward (the backward pass costs two forward ones).
    Embedding lookups, softmax, layer norm, dropout and the optimizer are left out.

    Example:
        >>> training_flops(ModelConfig.from_preset("small", vocab_size=8000), 112, 35, 36)
        181440430080
    """
    d, heads = config.d_model, config.num_heads
    keys, values = heads * config.head_key_dim, heads * config.head_value_dim
    source, target = source_time, target_time - 1

    def attention(queries: int, memory: int) -> int:  # multiply-adds per sequence
        projections = queries * d * keys + memory * d * (keys + values) + queries * values * d
        return projections + queries * memory * (keys + values)  # + scores, weighted values

    def feed_forward(time: int) -> int:
        return 2 * time * d * config.d_ff

    encoder = config.num_encoder_layers * (attention(source, source) + feed_forward(source))
    decoder = config.num_decoder_layers * (attention(target, target)
                                           + attention(target, source) + feed_forward(target))
    softmax = target * d * config.vocab_size
    return 2 * 3 * batch * (encoder + decoder + softmax)


def update_flops(config: ModelConfig, strategy: tf.distribute.Strategy, update: Update) -> float:
    """training_flops summed over the update's batches and replicas."""
    total = 0.0
    for batch in update:
        sources = strategy.experimental_local_results(batch["source_ids"])
        targets = strategy.experimental_local_results(batch["target_ids"])
        for source, target in zip(sources, targets):
            total += training_flops(config, source.shape[0], source.shape[1], target.shape[1])
    return total


def matmul_peak(dtype: tf.DType, size: int = MATMUL_SIZE, repeats: int = 5) -> float:
    """Best GFLOP/s of `repeats` timed [size, size] x [size, size] tf.matmul in `dtype`, after
    an untimed one."""
    a, b = (tf.cast(tf.random.normal([size, size]), dtype) for _ in range(2))
    tf.matmul(a, b)[0, 0].numpy()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        tf.matmul(a, b)[0, 0].numpy()  # waits for the product
        best = min(best, time.perf_counter() - started)
    return 2 * size ** 3 / best / 1e9
