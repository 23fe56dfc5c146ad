"""The train stage's input: the run's train shards as endless shuffled batches, sharded per
worker (with their gold word alignments for guided-alignment training), the corpora of
`data.corpora` mixed by their weights (pipelines/training/data.py), and the token budget
checked against the replicas that split it.

Example:
    >>> check_batch_tokens(config, replicas=strategy.num_replicas_in_sync)
    >>> dataset = strategy.distribute_datasets_from_function(train_dataset_fn(config, seed=1))
"""
from __future__ import annotations

from typing import Callable

import tensorflow as tf

from pipelines import InputError
from pipelines.corpus.shards import train_alignments, train_corpora
from pipelines.training.buckets import batch_tokens_problem
from pipelines.config import PipelineConfig
from pipelines.training.data import any_pair_fits, make_dataset
from pipelines.paths import RunPaths

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]


def check_batch_tokens(config: PipelineConfig, replicas: int) -> None:
    """Refuses a train.batch_tokens whose per-replica share cannot hold a pair of the longest
    length bucket (`pipelines.training.buckets.batch_tokens_problem`; the config checked 1
    replica).

    Raises:
        InputError: `train.batch_tokens: ` and the rule's message.
    """
    problem = batch_tokens_problem(config.train.batch_tokens, config.data.max_length, replicas)
    if problem:
        raise InputError(f"train.batch_tokens: {problem}")


def train_dataset_fn(config: PipelineConfig, seed: int) -> DatasetFn:
    """The run's train split as endless shuffled batches, sharded per worker, its corpora
    mixed by their weights (with "corpus" in the batches when there are several); an
    InputError if no pair fits data.max_length (the batches would never come)."""
    paths, data, train = RunPaths(config.run_path), config.data, config.train
    shards = paths.train_shards()
    corpora = train_corpora(paths.data)
    if not any_pair_fits(shards, paths.spm_model, data.max_length):
        raise InputError(f"{paths.train_manifest}: no train pair fits data.max_length "
                         f"({data.max_length} tokens a side, BOS and EOS included)")

    # Guided alignment: each shard's word alignments too (an InputError, before any work, if
    # the split was prepared without them).
    alignments = train_alignments(paths.data) if train.guided_alignment_weight else None

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return make_dataset(shards, paths.spm_model, batch_tokens=train.batch_tokens,
                            max_length=data.max_length, shuffle_buffer=train.shuffle_buffer,
                            seed=seed, repeat=True, input_context=context,
                            one_bucket_per_batch=train.jit_compile, alignments=alignments,
                            corpora=[index for index, corpus in enumerate(corpora)
                                     for _ in corpus.pairs],
                            weights=[corpus.weight for corpus in corpora])

    return dataset_fn
