"""The train stage's input: the run's train shards as endless shuffled batches, sharded per
worker (with their gold word alignments for guided-alignment training), the corpora of
`data.corpora` mixed by their weights and noised as their config says (pipelines/training/
data.py, noise.py), the token budget checked against the replicas that split it, and the
batches read (`Batches`: an iterator deleted without making the run wait).

Example:
    >>> check_batch_tokens(config, replicas=strategy.num_replicas_in_sync)
    >>> dataset = strategy.distribute_datasets_from_function(train_dataset_fn(config, seed=1))
    >>> batches = Batches(dataset)  # next(batches) ..., then batches.close()
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import tensorflow as tf

from pipelines import InputError
from pipelines.corpus.shards import has_alignments, train_alignments, train_corpora
from pipelines.training.buckets import batch_tokens_problem
from pipelines.config import NoiseConfig, PipelineConfig
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
    mixed by their weights (with "corpus" in the batches when there are several) and noised as
    data.corpora[i].noise (data.noise) says, drawn from `seed`; an InputError if no pair fits
    data.max_length (the batches would never come)."""
    paths, data, train = RunPaths(config.run_path), config.data, config.train
    shards = paths.train_shards()
    corpora = train_corpora(paths.data)
    if not any_pair_fits(shards, paths.spm_model, data.max_length):
        raise InputError(f"{paths.train_manifest}: no train pair fits data.max_length "
                         f"({data.max_length} tokens a side, BOS and EOS included)")

    # Guided alignment: each shard's word alignments too (an InputError, before any work, if
    # the split was prepared without them); inline tags of the noise are put at aligned words
    # when the split has them.
    noise = corpus_noise(config, [corpus.name for corpus in corpora])
    tags = any(corpus and corpus.inline_tags for corpus in noise)
    alignments = (train_alignments(paths.data) if train.guided_alignment_weight or (
        tags and has_alignments(paths.data)) else None)

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return make_dataset(shards, paths.spm_model, batch_tokens=train.batch_tokens,
                            max_length=data.max_length, shuffle_buffer=train.shuffle_buffer,
                            seed=seed, repeat=True, input_context=context,
                            one_bucket_per_batch=train.jit_compile, alignments=alignments,
                            corpora=[index for index, corpus in enumerate(corpora)
                                     for _ in corpus.pairs],
                            weights=[corpus.weight for corpus in corpora], noise=noise,
                            gold_alignment=bool(train.guided_alignment_weight))

    return dataset_fn


def corpus_noise(config: PipelineConfig, names: Sequence[str]) -> list[NoiseConfig | None]:
    """The noise of each of the prepared corpora `names` (data.corpora[i].noise, data.noise).

    Raises:
        InputError: a corpus with noise that the prepared train split does not have (the
            config changed since prepare).
    """
    noise = config.data.corpus_noise()
    for index, (name, corpus) in enumerate(noise.items()):
        if corpus and name not in names:
            key = f"data.corpora[{index}].noise" if config.data.corpora else "data.noise"
            raise InputError(f"{key}: corpus {name} is not in the prepared train split "
                             f"({', '.join(names)}); run `keras-transformer prepare` again")
    return [noise.get(name) for name in names]


class Batches:
    """`iter(dataset)` (a distributed dataset's batches) whose `close()` hands the iterator to
    a thread that deletes it. TensorFlow's deletion of an iterator waits for its tf.data
    autotuning thread, whose wake-ups double from 10 ms (5.1 s, 10.2 s, 20.5 s... after the
    start) and which misses, about every other time, the wake-up the deletion sends: a run
    would idle up to its own length again before returning (measured: 3 to 9 s after a
    20-step tiny run), `keras-transformer run` before its next stage. The interpreter waits
    for the thread before it exits; a worker's os._exit (`exit_worker`) does not."""

    def __init__(self, dataset: Any) -> None:
        self._iterator = iter(dataset)

    def __next__(self) -> Any:
        return next(self._iterator)

    def close(self) -> None:
        """Deletes the iterator in the background (the thread holds the only reference,
        dropped as it ends); nothing can be read after."""
        threading.Thread(target=lambda iterator: None, args=(vars(self).pop("_iterator"),),
                         name="deleting the train batches' iterator").start()
