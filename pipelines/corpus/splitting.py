"""A corpus -> filtered, de-duplicated, held-out split files, in two streaming passes.

Memory stays bounded whatever the corpus size: nothing holds the pairs, only a 64-bit digest
of each (8 bytes a pair, about 290 MB at 36M pairs, sorted once between the passes).

Pass 1 reads the pool, drops pairs with an empty side or a character length ratio over
`max_length_ratio`, records each remaining pair's digest (a hash of seed and pair) and keeps
the pairs the source assigns to dev / test, or else the `holdout` pairs of smallest digest per
missing split. Sorting the digests then finds each pair's first occurrence (the others are
duplicates). Pass 2 reads the pool again and writes the train pairs round-robin into shard
files, and uniform samples of them for the vocabulary and for the statistics; held-out pairs
with a side that occurs in train are dropped, and dev / test are written last. Splits the
source gives (its dev / test) are written as they are.

Example:
    >>> splits = write_splits(open_source(config.data), config.data, Path("runs/demo/data"))
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import heapq
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

import numpy as np

from pipelines import CorpusError
from pipelines.corpus.shards import shard_count, shard_stem
from pipelines.corpus.sources import Pair, Source

if TYPE_CHECKING:
    from pipelines.config import DataConfig

STATS_SAMPLE = 100_000  # train pairs the summary statistics are estimated from
WRITE_BUFFER = 1 << 18
PROGRESS_EVERY = 1 << 14  # pairs between progress callbacks
VOCAB, STATS = 1, 2  # sample membership bits
Report = Callable[[str, int, float | None], None]  # (pass, pairs read, fraction read)


@dataclasses.dataclass(frozen=True)
class Splits:
    """What `write_splits` wrote into its directory.

    Attributes:
        pairs: split -> pairs written.
        dropped: reason -> pairs left out.
        shard_pairs: pairs in each train shard (`shard_stem(i, len(shard_pairs))`.src / .tgt).
        vocab_sample: files of train sentences to learn the vocabulary from (source, target).
        stats_sample: files of train pairs to estimate the statistics from.
        stats_pairs: pairs in `stats_sample` (all train pairs when there are few).
    """

    pairs: dict[str, int]
    dropped: dict[str, int]
    shard_pairs: list[int]
    vocab_sample: tuple[Path, Path]
    stats_sample: tuple[Path, Path]
    stats_pairs: int


@dataclasses.dataclass
class _Held:
    """A pool pair kept for dev or test: its index among the filtered pairs, and the pair."""

    index: int
    split: str
    pair: Pair


def rejection(src: str, tgt: str, max_ratio: float) -> str | None:
    """Why a pool pair is dropped before de-duplication, or None to keep it."""
    shorter, longer = (len(src), len(tgt)) if len(src) <= len(tgt) else (len(tgt), len(src))
    if not shorter:
        return "empty side"
    if max_ratio and longer > max_ratio * shorter:
        return f"length ratio over {max_ratio:g}"
    return None


def pair_digest(src: str, tgt: str, seed: int) -> int:
    """64 bits of SHA-256 over seed and pair: equal pairs are equal, and the order of digests
    is the seed's pseudo-random order of pairs (held-out pairs have the smallest)."""
    text = f"{seed}\t{src}\t{tgt}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")


def write_splits(source: Source, data: DataConfig, out_dir: Path,
                 report: Report = lambda *_: None) -> Splits:
    """Streams `source` into `out_dir`: the train shards, dev.{src,tgt}, test.{src,tgt}, and
    the samples (see `Splits`). `report` is called now and then with the progress.

    Raises:
        CorpusError: a malformed corpus, or no train pair left (found in pass 1, before
            anything is written).
    """
    dropped = collections.Counter(source.dropped)
    missing = [name for name in ("dev", "test") if name not in source.given]
    digests, held = _first_pass(source, data, missing, dropped, report)
    given = {name: sum(1 for _ in read()) for name, read in source.given.items()}  # validates
    keep = _first_occurrences(digests)
    del digests
    dropped["duplicate pair"] += len(keep) - int(keep.sum())
    held = [h for h in held if keep[h.index]]
    train_pairs = int(keep.sum()) - len(held)
    if train_pairs <= 0:
        reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(dropped.items()) if n)
        raise CorpusError(f"{source.where}: no training pairs left after filtering "
                          f"(dropped: {reasons or 'none'})")
    shards = shard_count(train_pairs, data.shards)
    marks = _sample_marks(train_pairs, data.vocab_max_sentences, data.seed)
    stats_marks = _sample_marks(train_pairs, STATS_SAMPLE, data.seed + 1)
    np.bitwise_or(marks, stats_marks << 1, out=marks)
    del stats_marks
    out_dir.mkdir(parents=True, exist_ok=True)
    shard_pairs, shared = _second_pass(source, data, keep.data, held, marks.data, shards,
                                       out_dir, report)
    pairs = {"train": train_pairs}
    for name in ("dev", "test"):
        if name in source.given:
            pairs[name] = _write_pairs(out_dir, name, source.given[name]())
            if pairs[name] != given[name]:
                raise CorpusError(f"{source.where}: the {name} split changed while it was read")
            continue
        kept = [h.pair for h in sorted(held, key=lambda h: h.index) if h.split == name
                and h.pair[0] not in shared[0] and h.pair[1] not in shared[1]]
        overlap = sum(h.split == name for h in held) - len(kept)
        if overlap:
            dropped[f"{name} pair sharing a side with train"] += overlap
        pairs[name] = _write_pairs(out_dir, name, kept)
    return Splits(pairs=pairs, dropped={k: n for k, n in sorted(dropped.items()) if n},
                  shard_pairs=shard_pairs,
                  vocab_sample=(out_dir / "vocab_sample.src", out_dir / "vocab_sample.tgt"),
                  stats_sample=(out_dir / "stats_sample.src", out_dir / "stats_sample.tgt"),
                  stats_pairs=int(np.count_nonzero(marks & STATS)))


def _filtered(source: Source, data: DataConfig, dropped: collections.Counter[str] | None,
              label: str, report: Report) -> Iterator[tuple[str, str, str | None]]:
    """The pool's pairs that pass `rejection`, counting the others in `dropped` (if given)."""
    source.meter.done = 0
    for count, (src, tgt, split) in enumerate(source.pool(), 1):
        if count % PROGRESS_EVERY == 0:
            report(label, count, source.meter.fraction())
        reason = rejection(src, tgt, data.max_length_ratio)
        if reason is None:
            yield src, tgt, split
        elif dropped is not None:
            dropped[reason] += 1


def _first_pass(source: Source, data: DataConfig, missing: list[str],
                dropped: collections.Counter[str], report: Report) -> tuple[array, list[_Held]]:
    """Digests of the filtered pool pairs, and the pairs held out for dev and test: those the
    source assigns, or the `holdout` smallest distinct digests for each missing split."""
    digests = array("Q")
    assigned: list[_Held] = []
    capacity = data.holdout * len(missing)
    smallest: list[tuple[int, int, Pair]] = []  # a max-heap of (-digest, index, pair)
    in_heap: set[int] = set()
    for index, (src, tgt, split) in enumerate(_filtered(source, data, dropped, "reading", report)):
        digest = pair_digest(src, tgt, data.seed)
        digests.append(digest)
        if split in ("dev", "test"):
            assigned.append(_Held(index, split, (src, tgt)))
        elif split is None and capacity and digest not in in_heap and (
                len(smallest) < capacity or digest < -smallest[0][0]):
            if len(smallest) == capacity:
                in_heap.discard(-heapq.heappop(smallest)[0])
            heapq.heappush(smallest, (-digest, index, (src, tgt)))
            in_heap.add(digest)
    ranked = sorted(smallest, reverse=True)  # ascending digests
    held = [_Held(index, missing[rank // data.holdout], pair)
            for rank, (_, index, pair) in enumerate(ranked)]
    return digests, assigned + held


def _first_occurrences(digests: array) -> np.ndarray:
    """bool [n]: whether pair i's digest occurs at no smaller index."""
    values = np.frombuffer(digests, dtype=np.uint64) if len(digests) else np.zeros(0, np.uint64)
    order = np.argsort(values, kind="stable")  # equal digests in index order
    ordered = values[order]
    first = np.ones(len(values), bool)
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    del ordered
    keep = np.zeros(len(values), bool)
    keep[order[first]] = True
    return keep


def _sample_marks(population: int, size: int, seed: int) -> np.ndarray:
    """uint8 [population]: 1 for a uniform random sample of `size` items (all if fewer)."""
    marks = np.zeros(population, np.uint8)
    if population <= size:
        marks[:] = 1
    else:
        marks[np.random.default_rng(seed).choice(population, size, replace=False)] = 1
    return marks


def _second_pass(source: Source, data: DataConfig, keep: memoryview, held: list[_Held],
                 marks: memoryview, shards: int, out_dir: Path,
                 report: Report) -> tuple[list[int], tuple[set[str], set[str]]]:
    """Writes the train shards and the samples; returns the shards' pair counts and the
    held-out sources and targets that occur in train."""
    held_index = {h.index for h in held}
    held_src, held_tgt = {h.pair[0] for h in held}, {h.pair[1] for h in held}
    shared: tuple[set[str], set[str]] = (set(), set())
    stems = [shard_stem(i, shards) for i in range(shards)]
    names = [f"{stem}.{side}" for stem in stems for side in ("src", "tgt")]
    names += [f"{sample}.{side}" for sample in ("vocab_sample", "stats_sample")
              for side in ("src", "tgt")]
    files = {name: open(out_dir / name, "w", encoding="utf-8", newline="\n",
                        buffering=WRITE_BUFFER) for name in names}
    try:
        outputs = [(files[f"{stem}.src"], files[f"{stem}.tgt"]) for stem in stems]
        vocab = (files["vocab_sample.src"], files["vocab_sample.tgt"])
        stats = (files["stats_sample.src"], files["stats_sample.tgt"])
        position = 0
        for index, (src, tgt, _) in enumerate(_filtered(source, data, None, "writing", report)):
            if index >= len(keep):
                raise CorpusError(f"{source.where}: the corpus changed while it was read")
            if not keep[index] or index in held_index:
                continue
            src_file, tgt_file = outputs[position % shards]
            src_file.write(src + "\n")
            tgt_file.write(tgt + "\n")
            if src in held_src:
                shared[0].add(src)
            if tgt in held_tgt:
                shared[1].add(tgt)
            mark = marks[position]
            if mark & VOCAB:
                vocab[0].write(src + "\n")
                vocab[1].write(tgt + "\n")
            if mark & STATS:
                stats[0].write(src + "\n")
                stats[1].write(tgt + "\n")
            position += 1
    finally:
        for file in files.values():
            file.close()
    if position != len(marks):
        raise CorpusError(f"{source.where}: the corpus changed while it was read")
    return [len(range(i, position, shards)) for i in range(shards)], shared


def _write_pairs(out_dir: Path, split: str, pairs: Iterable[Pair]) -> int:
    """Writes `split`.src / .tgt; returns the number of pairs."""
    count = 0
    with open(out_dir / f"{split}.src", "w", encoding="utf-8", newline="\n") as src_file, \
            open(out_dir / f"{split}.tgt", "w", encoding="utf-8", newline="\n") as tgt_file:
        for count, (src, tgt) in enumerate(pairs, 1):
            src_file.write(src + "\n")
            tgt_file.write(tgt + "\n")
    return count
