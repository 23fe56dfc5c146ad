"""Random sampling of translations (back-translation: varied sources, not the most likely
one), one token at a time with greedy search's loop (`keras_transformer.greedy`).

    sample_picker(Sampling(top_k, top_p, temperature, seed)) -> pick(log_probs, step) -> tokens

Each parameter is a tensor [batch]: a row's own value, so that requests that a server batches
together keep theirs. At each step a row's log-probabilities are divided by its temperature,
cut to its top_k most likely tokens (0: the whole vocabulary) and then to the smallest set
whose probabilities reach top_p (1: no cut; the most likely token always stays), and one token
is drawn from what is left with TensorFlow's stateless sampler seeded by (seed, step): a row's
draw depends on its seed and its own probabilities only, never on the other rows, so a line
samples alike in any batch and run (`translate` seeds line i with seed + i).

Graph ops: Sort (TopKV2 over the vocabulary), Cumsum, StatelessMultinomial in a While loop
over the rows (tf.map_fn: one seed per row), on top of greedy search's.

Example:
    sampling = Sampling(top_k=tf.constant([0, 40]), top_p=tf.constant([0.9, 1.0]),
                        temperature=tf.constant([1.0, 0.7]),
                        seed=tf.constant([7, 8], tf.int64))  # each [batch 2]
    ids, log_probs = greedy_search(fn, cache, max_lengths, bos_id=BOS_ID, eos_id=EOS_ID,
                                   pad_id=PAD_ID, pick=sample_picker(sampling))
"""
from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from keras_transformer.greedy import PickFn


class Sampling(NamedTuple):
    top_k: tf.Tensor        # int32 [batch]: tokens kept, 0 for all
    top_p: tf.Tensor        # float32 [batch]: the probability mass kept, in (0, 1]
    temperature: tf.Tensor  # float32 [batch], > 0
    seed: tf.Tensor         # int64 [batch]


def sample_picker(sampling: Sampling) -> PickFn:
    """The `pick` of `greedy_search` that draws each row's token as `sampling` says."""
    def pick(log_probs: tf.Tensor, step: tf.Tensor) -> tf.Tensor:
        logits = filtered_logits(log_probs, sampling)  # [batch, vocab]
        seeds = tf.stack([sampling.seed, tf.fill(tf.shape(sampling.seed),
                                                 tf.cast(step, tf.int64))], axis=1)  # [b, 2]

        def draw(row: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
            row_logits, seed = row
            return tf.random.stateless_categorical(row_logits[None], 1, seed,
                                                   dtype=tf.int32)[0, 0]

        return tf.map_fn(draw, (logits, seeds), fn_output_signature=tf.int32)  # [batch]

    return pick


def filtered_logits(log_probs: tf.Tensor, sampling: Sampling) -> tf.Tensor:
    """log_probs float32 [batch, vocab] -> logits [batch, vocab] divided by the temperature,
    -inf outside each row's top_k and top_p."""
    logits = log_probs / sampling.temperature[:, None]
    vocab = tf.shape(logits)[1]
    ordered = tf.math.top_k(logits, k=vocab).values  # [batch, vocab], descending
    top_k = tf.where(sampling.top_k > 0, tf.minimum(sampling.top_k, vocab), vocab)  # [batch]
    kth = tf.gather(ordered, top_k - 1, axis=1, batch_dims=1)  # [batch]
    probs = tf.nn.softmax(tf.where(ordered >= kth[:, None], ordered, -float("inf")))
    mass_before = tf.cumsum(probs, axis=1, exclusive=True)  # [batch, vocab]
    kept = tf.reduce_sum(tf.cast(mass_before < sampling.top_p[:, None], tf.int32), axis=1)
    kept = tf.minimum(tf.maximum(kept, 1), top_k)  # [batch]: the most likely always stays
    threshold = tf.gather(ordered, kept - 1, axis=1, batch_dims=1)  # [batch]
    return tf.where(logits >= threshold[:, None], logits, -float("inf"))
