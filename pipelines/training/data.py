"""tf.data input pipeline: text files -> token-budget batches of length-bucketed id tensors.

Each element is `{"source_ids": int32 [batch, src_time], "target_ids": int32 [batch, tgt_time]}`
padded with PAD_ID, and with `alignments` (guided-alignment training) `"alignment": float32
[batch, tgt_time, src_time]`, the gold links of each target piece to source pieces
(`keras_transformer.guided_alignment.gold_alignment`, from prepare's word alignments), padded
with 0. The source ends with EOS (the encoder needs no BOS); the target is
BOS ... EOS, so the trainer feeds `target_ids[:, :-1]` to the decoder and scores
`target_ids[:, 1:]`. `max_length` counts these special tokens.

Shards of several corpora (`corpora`, `weights`: `data.corpora`) are read as one stream per
corpus, each repeated and sharded per worker on its own (every worker reads its share of every
corpus), mixed by `tf.data.Dataset.sample_from_datasets` with the corpora's weights, then
shuffled and length-bucketed as one; each element then has `"corpus": int32 [batch]`, the
index of the corpus of each pair, from which the trainer counts the realised mix. Each
corpus's noise (`noise`: typos, casing, end punctuation, inline tags; pipelines/training/
noise.py) goes into its pairs after the mix and the shuffle, before tokenization, so the length
filter and the buckets see the noised pairs.

Pairs go to a bucket per side (its length rounded up to a bucket boundary), so a batch holds
pairs of similar source and of similar target lengths, and each batch has as many pairs as
fit the token budget on both sides, counted on padded sizes:
`batch * padded_length <= budget`. With `pad_to_bucket_boundary` every batch of a bucket has
the same shape; with `one_bucket_per_batch` too both sides are padded to the bucket of the
longer side, so that endless batches take one shape per bucket, not per pair of buckets (what
XLA compiles for: 12 shapes instead of 144 at max_length 128).

Example:
    >>> dataset = make_dataset(RunPaths(run_dir).train_shards(), spm_model, batch_tokens=4096,
    ...                        max_length=128, repeat=True)
    >>> batch = next(iter(dataset))  # {"source_ids": [b, s], "target_ids": [b, t]}
"""
from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from keras_transformer.guided_alignment import gold_alignment
from keras_transformer.tokenizer import PAD_ID, Tokenizer
from keras_transformer.words import vocabulary_word_marks
from pipelines.config.data import NoiseConfig
from pipelines.training.buckets import batch_tokens_problem, bucket_boundaries
from pipelines.training.noise import is_noisy, noised

TOKENIZE_BATCH = 1024
LENGTHS_BATCH = 4096
INTERLEAVED_SHARDS = 8  # shards read at once
# tf.data converts each dataset function with autograph at every trace unless told not to; none
# of these branches on a tensor in Python (as noise.py's).
no_autograph = tf.autograph.experimental.do_not_convert


@dataclasses.dataclass(frozen=True)
class LengthStats:
    """Token counts of a corpus, special tokens included, as the pipeline sees them, and the
    padding efficiency of its bucketed batches."""

    pairs: int
    too_long: int  # pairs with a side over max_length: the pipeline skips them
    src_tokens: int
    tgt_tokens: int
    padding_efficiency: tuple[float, float]  # (source, target) real / padded batch tokens


def make_dataset(shards: Sequence[tuple[str | Path, str | Path]], spm_model_path: str | Path,
                 *, batch_tokens: int, max_length: int, shuffle: bool = True,
                 shuffle_buffer: int = 100_000, seed: int | None = None, repeat: bool = False,
                 input_context: tf.distribute.InputContext | None = None, num_replicas: int = 1,
                 pad_to_bucket_boundary: bool = True, one_bucket_per_batch: bool = False,
                 boundaries: tuple[int, ...] | None = None,
                 parallel_calls: int | None = None,
                 alignments: Sequence[str | Path] | None = None,
                 corpora: Sequence[int] | None = None,
                 weights: Sequence[float] | None = None,
                 noise: Sequence[NoiseConfig | None] | None = None,
                 gold_alignment: bool = True) -> tf.data.Dataset:
    """Batches of token ids from parallel text files, tokenized in the graph.

    Args:
        shards: (source file, target file) pairs, one sentence a line, aligned by line
            (`pipelines.corpus.shards.train_shards`, or one pair of split files).
        spm_model_path: the shared SentencePiece model.
        batch_tokens: token budget of a batch per side, counted on padded sizes. With an
            `input_context` (`strategy.distribute_datasets_from_function`) batches are per
            replica and get `batch_tokens // num_replicas_in_sync`.
        max_length: pairs with more tokens on a side (BOS/EOS included) are skipped.
        shuffle, shuffle_buffer, seed: pair order, reshuffled each epoch.
        repeat: endless; batches then never come short at the end of the data.
        input_context: each input pipeline (worker) reads its own shards when there are at
            least as many shards as pipelines, else its own lines of every shard.
        num_replicas: without `input_context`, batch sizes are kept multiples of this.
        pad_to_bucket_boundary: pad to the bucket's length, not the batch's longest pair.
        one_bucket_per_batch: bucket a pair by its longer side and pad both sides to that
            bucket's length (with pad_to_bucket_boundary: one batch shape per bucket).
        boundaries: bucket lengths (default `bucket_boundaries(max_length)`).
        parallel_calls: shards read and tokenizer calls at once (default: tf.data's autotuning).
        alignments: a word-alignment file per shard (`I-J ...` lines, by line with the shard's
            pairs: `pipelines.corpus.shards.train_alignments`), for an "alignment" element.
        corpora: the corpus index of each shard (0 .. len(weights) - 1), with `weights`.
        weights: each corpus's share of the pairs, relative to the others' (default: one
            corpus). With several, the elements get "corpus".
        noise: each corpus's noise (`pipelines.training.noise`), drawn from `seed` (needed
            then) and the input pipeline's id, put into the pairs before tokenization, so
            that the lengths bucketed are the noised pairs'.
        gold_alignment: with `alignments`, the "alignment" element; without, the alignments
            only place the noise's inline tags.

    Returns:
        A dataset of `{"source_ids": [batch, src_time], "target_ids": [batch, tgt_time]}`.
    """
    bounds = boundaries or bucket_boundaries(max_length)
    replicas = input_context.num_replicas_in_sync if input_context else num_replicas
    budget, multiple = (batch_tokens // replicas, 1) if input_context else (batch_tokens, replicas)
    if bounds[-1] < max_length:
        raise ValueError(f"the last bucket boundary {bounds[-1]} is below max_length {max_length}")
    problem = batch_tokens_problem(batch_tokens, max_length, replicas, bounds)
    if problem:
        raise ValueError(f"batch_tokens: {problem}")
    tokenizer = Tokenizer.from_file(spm_model_path)
    parallel = parallel_calls or tf.data.AUTOTUNE
    mixed = weights is not None and len(weights) > 1
    if mixed and (corpora is None or sorted(set(corpora)) != list(range(len(weights)))):
        raise ValueError(f"corpora: each of the {len(weights)} weighted corpora needs shards, "
                         f"got shard corpora {corpora}")
    dataset = (_mixed(shards, corpora, weights, input_context, shuffle, seed,
                      parallel, alignments, repeat) if mixed else
               _pairs(shards, input_context, shuffle, seed, parallel, alignments))
    if shuffle:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat and not mixed:  # each corpus repeats on its own, keeping the mix
        dataset = dataset.repeat()
    if is_noisy(noise):
        if seed is None:
            raise ValueError("noise needs a seed")
        dataset = noised(dataset, noise, seed,
                         input_context.input_pipeline_id if input_context else 0,
                         links=alignments is not None, corpus=mixed)
    gold = alignments is not None and gold_alignment
    if alignments is not None and not gold:
        dataset = dataset.map(no_autograph(lambda src, tgt, links, *rest: (src, tgt, *rest)))
    extra = ("links",) * gold + ("corpus",) * mixed
    dataset = _tokenized(dataset, tokenizer, parallel, extra)
    dataset = dataset.filter(no_autograph(lambda ex: _longest_side(ex) <= max_length))
    if gold:
        dataset = dataset.map(no_autograph(_with_gold_alignment(tokenizer)),
                              num_parallel_calls=parallel)
    dataset = _bucketed(dataset, bounds, budget, multiple, pad_to_bucket_boundary,
                        one_bucket_per_batch)
    return dataset.prefetch(tf.data.AUTOTUNE)


def any_pair_fits(shards: Sequence[tuple[str | Path, str | Path]], spm_model_path: str | Path,
                  max_length: int) -> bool:
    """Whether some pair of `shards` has at most `max_length` tokens on each side (BOS / EOS
    included), tokenized as in training. Reads up to the first such pair, eagerly in blocks
    that grow from 64 lines: at the start of every training, where building a tf.data pipeline
    would cost more than reading the first lines."""
    tokenizer = Tokenizer.from_file(spm_model_path)
    for source_path, target_path in shards:
        _check_files([source_path, target_path])
        with open(source_path, "rb") as sources, open(target_path, "rb") as targets:
            pairs, block = zip(sources, targets), 64
            while lines := list(itertools.islice(pairs, block)):
                source, target = ([line.rstrip(b"\n") for line in side] for side in zip(*lines))
                encoded = _encoded(tokenizer, tf.constant(source), tf.constant(target))
                longest = tf.maximum(encoded["source_ids"].row_lengths(),
                                     encoded["target_ids"].row_lengths())  # [block]
                if bool(tf.reduce_any(longest <= max_length)):
                    return True
                block = min(2 * block, LENGTHS_BATCH)
    return False


def length_stats(src_path: str | Path, tgt_path: str | Path, spm_model_path: str | Path, *,
                 max_length: int, boundaries: tuple[int, ...] | None = None) -> LengthStats:
    """Counts pairs, those over `max_length` and tokens per side, tokenized as in training.

    The padding efficiency (real tokens over batch tokens, per side) is that of
    `make_dataset(..., pad_to_bucket_boundary=True)`, whatever the batch sizes and order:
    there every pair that fits is padded to its bucket's boundary on each side.
    """
    bounds = np.array(boundaries or bucket_boundaries(max_length))
    tokenizer = Tokenizer.from_file(spm_model_path)
    pairs = _pairs([(src_path, tgt_path)], None, False, None, tf.data.AUTOTUNE)
    lengths = pairs.batch(LENGTHS_BATCH).map(no_autograph(
        lambda src, tgt: (tokenizer.tokenize(src, add_eos=True).row_lengths(),  # [chunk]
                          tokenizer.tokenize(tgt, add_bos=True, add_eos=True).row_lengths())),
        num_parallel_calls=tf.data.AUTOTUNE)
    chunks = list(lengths.as_numpy_iterator())  # [(source [chunk], target [chunk])]
    src_len, tgt_len = (np.concatenate([np.zeros(0, np.int64)] + [chunk[side] for chunk in chunks])
                        for side in (0, 1))
    fits = np.maximum(src_len, tgt_len) <= max_length
    padded = [bounds[np.searchsorted(bounds, side[fits])] for side in (src_len, tgt_len)]
    return LengthStats(
        pairs=len(src_len), too_long=int(np.count_nonzero(~fits)),
        src_tokens=int(src_len.sum()), tgt_tokens=int(tgt_len.sum()),
        padding_efficiency=tuple(float(side[fits].sum() / max(pad.sum(), 1))
                                 for side, pad in zip((src_len, tgt_len), padded)))


def _pairs(shards: Sequence[tuple[str | Path, str | Path]],
           input_context: tf.distribute.InputContext | None, shuffle: bool, seed: int | None,
           parallel: int, alignments: Sequence[str | Path] | None = None) -> tf.data.Dataset:
    """(source line, target line) string pairs of this input pipeline's shards, interleaved
    (shard order shuffled each epoch when `shuffle`); (source, target, alignment line) triples
    with `alignments` (a file per shard)."""
    columns = [[str(pair[side]) for pair in shards] for side in (0, 1)]
    if alignments is not None:
        columns.append([str(path) for path in alignments])
    for column in columns:
        _check_files(column)
    pipelines = input_context.num_input_pipelines if input_context else 1
    files = tf.data.Dataset.from_tensor_slices(tuple(columns))
    by_file = pipelines > 1 and len(shards) >= pipelines
    if by_file:
        files = files.shard(pipelines, input_context.input_pipeline_id)
    if shuffle and len(shards) > 1:
        files = files.shuffle(len(shards), seed=seed, reshuffle_each_iteration=True)
    cycle = min(len(shards), INTERLEAVED_SHARDS)
    dataset = files.interleave(
        no_autograph(lambda *paths: tf.data.Dataset.zip(*map(tf.data.TextLineDataset, paths))),
        cycle_length=cycle, num_parallel_calls=min(parallel, cycle) if parallel > 0 else parallel)
    if pipelines > 1 and not by_file:
        dataset = dataset.shard(pipelines, input_context.input_pipeline_id)
    return dataset


def _check_files(paths: Sequence[str | Path]) -> None:
    """A FileNotFoundError naming the first of `paths` that is not a file."""
    for path in paths:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: no such file")


def _mixed(shards: Sequence[tuple[str | Path, str | Path]], corpora: Sequence[int],
           weights: Sequence[float], input_context: tf.distribute.InputContext | None,
           shuffle: bool, seed: int | None, parallel: int,
           alignments: Sequence[str | Path] | None, repeat: bool) -> tf.data.Dataset:
    """The pairs of each corpus (`_pairs` of its shards, repeated when `repeat`, and its index
    as a last item: int32), sampled by `weights`."""
    streams = []
    for corpus in range(len(weights)):
        mine = [i for i, owner in enumerate(corpora) if owner == corpus]
        stream = _pairs([shards[i] for i in mine], input_context, shuffle, seed, parallel,
                        None if alignments is None else [alignments[i] for i in mine])
        stream = stream.map(no_autograph(
            lambda *pair, corpus=corpus: (*pair, tf.constant(corpus, tf.int32))))
        streams.append(stream.repeat() if repeat else stream)
    total = sum(weights)
    return tf.data.Dataset.sample_from_datasets(streams, [w / total for w in weights], seed=seed)


def _encoded(tokenizer: Tokenizer, src: tf.Tensor, tgt: tf.Tensor) -> dict[str, tf.RaggedTensor]:
    """Source and target lines [chunk] -> {"source_ids": [chunk, (src_len)] (.. EOS),
    "target_ids": [chunk, (tgt_len)] (BOS .. EOS)}."""
    return {"source_ids": tokenizer.tokenize(src, add_eos=True),
            "target_ids": tokenizer.tokenize(tgt, add_bos=True, add_eos=True)}


def _tokenized(pairs: tf.data.Dataset, tokenizer: Tokenizer, parallel: int,
               extra: tuple[str, ...] = ()) -> tf.data.Dataset:
    """String pairs -> {"source_ids": [src_len] (.. EOS), "target_ids": [tgt_len] (BOS .. EOS)};
    items after the pair are kept under the names `extra` (an alignment line as "links", the
    corpus index as "corpus")."""

    def encode(src: tf.Tensor, tgt: tf.Tensor, *values: tf.Tensor) -> dict[str, tf.Tensor]:
        return {**_encoded(tokenizer, src, tgt), **dict(zip(extra, values))}  # values: [chunk]

    return (pairs.batch(TOKENIZE_BATCH)
            .map(no_autograph(encode), num_parallel_calls=parallel)
            .unbatch()
            # unbatched ragged rows come typed as ragged: make them dense
            .map(no_autograph(lambda ex: ex)))


def _with_gold_alignment(tokenizer: Tokenizer
                         ) -> Callable[[dict[str, tf.Tensor]], dict[str, tf.Tensor]]:
    """A pair's "links" line -> "alignment": float32 [tgt_len, src_len] (`gold_alignment`)."""
    marks = tf.constant(vocabulary_word_marks(tokenizer.model_proto))  # int32 [vocab]

    def add(ex: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        kept = {key: value for key, value in ex.items() if key != "links"}
        return {**kept, "alignment": gold_alignment(ex["source_ids"], ex["target_ids"],
                                                    ex["links"], marks)}

    return add


def _longest_side(ex: dict[str, tf.Tensor]) -> tf.Tensor:
    return tf.maximum(tf.size(ex["source_ids"]), tf.size(ex["target_ids"]))


def _bucketed(dataset: tf.data.Dataset, bounds: tuple[int, ...], budget: int, multiple: int,
              pad_to_bucket_boundary: bool, one_bucket_per_batch: bool) -> tf.data.Dataset:
    """Groups pairs by (source bucket, target bucket), or by the longer side's bucket, into
    padded token-budget batches."""
    n = len(bounds)
    # Batch size of bucket key src * n + tgt: the largest multiple of `multiple` whose padded
    # size fits the budget on the longer side.
    sizes = [budget // max(s, t) // multiple * multiple for s in bounds for t in bounds]
    bounds_t = tf.constant(bounds, tf.int64)  # [n]
    sizes_t = tf.constant(sizes, tf.int64)  # [n * n]

    def side_bucket(ids: tf.Tensor) -> tf.Tensor:
        length = tf.size(ids, out_type=tf.int64)[None]  # [1]
        return tf.searchsorted(bounds_t, length, side="left", out_type=tf.int64)[0]  # scalar

    def key(ex: dict[str, tf.Tensor]) -> tf.Tensor:
        src, tgt = side_bucket(ex["source_ids"]), side_bucket(ex["target_ids"])
        if one_bucket_per_batch:
            src = tgt = tf.maximum(src, tgt)
        return src * n + tgt

    def batch(bucket: tf.Tensor, window: tf.data.Dataset) -> tf.data.Dataset:
        if pad_to_bucket_boundary:
            src_len, tgt_len = bounds_t[bucket // n], bounds_t[bucket % n]
            shapes = {"source_ids": tf.reshape(src_len, [1]),
                      "target_ids": tf.reshape(tgt_len, [1]),
                      "alignment": tf.stack([tgt_len, src_len]), "corpus": []}
        else:
            shapes = {"source_ids": [None], "target_ids": [None], "alignment": [None, None],
                      "corpus": []}
        padding = {"source_ids": PAD_ID, "target_ids": PAD_ID, "alignment": 0.0, "corpus": 0}
        present = dataset.element_spec
        return window.padded_batch(
            sizes_t[bucket], padded_shapes={k: v for k, v in shapes.items() if k in present},
            padding_values={k: v for k, v in padding.items() if k in present})

    return dataset.group_by_window(no_autograph(key), no_autograph(batch),
                                   window_size_func=no_autograph(lambda bucket: sizes_t[bucket]))
