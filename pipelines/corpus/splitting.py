"""Corpora -> filtered, de-duplicated, held-out split files, in two streaming passes.

Memory stays bounded whatever the corpus size: nothing holds the pairs, only a 64-bit digest
of each (8 bytes a pair, about 290 MB at 36M pairs, sorted once between the passes).

Pass 1 reads each corpus's pool in turn (`DataConfig.corpus_configs` order), drops pairs with
an empty side or a character length ratio over `max_length_ratio`, records each remaining
pair's digest (a hash of seed and pair), notes by index those with a side not in the corpus's
language (`data.language_id`: pipelines/corpus/language_id.py) and, from each corpus that
gives dev and test (`DataConfig.dev_test_corpora`: one, or the first of each target language
in a multilingual run), keeps the other pairs its source assigns to dev / test, or else the
`holdout` other pairs of smallest digest per missing split; it refuses a corpus text that
holds a corpus tag or a target-language token. Sorting the digests then finds each pair's
first occurrence across all corpora (the others are duplicates: a pair of several corpora is
kept in the first, or dropped if a side is not in that corpus's language), and a corpus's
`max_pairs` keeps its train pairs of smallest digest (a uniform sample). Pass 2 reads the
pools again (what pass 1 dropped is skipped by index: nothing is classified again) and writes
each corpus's train pairs round-robin into its shard files (the source after its
target-language token and its tag: `source_line`), and uniform samples of all train pairs for the
vocabulary and for the statistics; held-out pairs with a side that occurs in train are
dropped, and dev / test are written last, corpus after corpus (each source after its
target-language token). Splits the source gives (its dev / test) are written as they are.

Example:
    >>> splits = write_splits(open_sources(config.data), config.data, Path("runs/demo/data"))
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import heapq
from array import array
from pathlib import Path
from typing import IO, TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

import numpy as np

from keras_transformer.languages import language_token, with_language
from pipelines import CorpusError
from pipelines.corpus.language_id import Languages, LanguageCheck, checked_languages
from pipelines.corpus.shards import CorpusShards, shard_count, shard_stems
from pipelines.corpus.sources import Pair, Source
from pipelines.corpus.tags import tagged

if TYPE_CHECKING:
    from pipelines.config import CorpusConfig, DataConfig

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
        corpora: each corpus's train shards (named by `shard_stems`), weight and tag.
        duplicates: each corpus's pairs dropped as duplicates (of a pair of it or of an
            earlier corpus).
        vocab_sample: files of train sentences to learn the vocabulary from (source, target).
        stats_sample: files of train pairs to estimate the statistics from.
        stats_pairs: pairs in `stats_sample` (all train pairs when there are few).
        languages: each corpus's languages checked (`checked_languages`; None: that side is
            not), () with `data.language_id` off.
    """

    pairs: dict[str, int]
    dropped: dict[str, int]
    corpora: list[CorpusShards]
    duplicates: list[int]
    vocab_sample: tuple[Path, Path]
    stats_sample: tuple[Path, Path]
    stats_pairs: int
    languages: tuple[Languages, ...] = ()


@dataclasses.dataclass
class _Held:
    """A pool pair kept for dev or test: its index among the filtered pairs, the pair and its
    corpus."""

    index: int
    split: str
    pair: Pair
    corpus: int  # its corpus's number in `DataConfig.corpus_configs`


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


def write_splits(sources: Sequence[Source], data: DataConfig, out_dir: Path,
                 report: Report = lambda *_: None) -> Splits:
    """Streams `sources` (one a corpus of `data.corpus_configs()`) into `out_dir`: the train
    shards, dev.{src,tgt}, test.{src,tgt}, and the samples (see `Splits`). `report` is called
    now and then with the progress.

    Raises:
        CorpusError: a malformed corpus, a corpus tag in a corpus's text, or a corpus with no
            train pair left (found in pass 1, before anything is written).
    """
    corpora = data.corpus_configs()
    names = [corpus.name for corpus in corpora]
    givers = [names.index(name) for name in data.dev_test_corpora()]
    dropped: collections.Counter[str] = collections.Counter()
    for source in sources:
        dropped.update(source.dropped)
    missing = {number: [name for name in ("dev", "test") if name not in sources[number].given]
               for number in givers}
    languages = [checked_languages(source, data.language_id) for source in sources]
    with LanguageCheck() as check:
        digests, held, starts, unwanted = _first_pass(sources, corpora, missing, data, dropped,
                                                      report, check, languages)
    given = {(number, name): sum(1 for _ in read()) for number in givers
             for name, read in sources[number].given.items()}
    keep = _first_occurrences(digests)  # then only the train pairs
    wrong = np.frombuffer(unwanted, dtype=np.int64) if len(unwanted) else np.zeros(0, np.int64)
    keep[wrong] = False  # the language-ID drops (a copy in the same corpus is one of them)
    ranges = list(zip(starts, starts[1:]))
    wrong_counts = np.diff(np.searchsorted(wrong, starts))
    duplicates = [int(end - start - lost - keep[start:end].sum())
                  for (start, end), lost in zip(ranges, wrong_counts)]
    dropped["duplicate pair"] += sum(duplicates)
    held = [h for h in held if keep[h.index]]
    keep[np.array([h.index for h in held], dtype=np.int64)] = False
    values = np.frombuffer(digests, dtype=np.uint64) if len(digests) else np.zeros(0, np.uint64)
    for corpus, (start, end) in zip(corpora, ranges):
        if corpus.max_pairs:
            dropped[f"over max_pairs of {corpus.name}"] += _cap(keep[start:end],
                                                                values[start:end],
                                                                corpus.max_pairs)
    del digests, values
    counts = [int(keep[start:end].sum()) for start, end in ranges]
    for corpus, source, count in zip(corpora, sources, counts):
        if count <= 0:
            reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(dropped.items()) if n)
            where = source.where if len(corpora) == 1 else f"corpus {corpus.name} ({source.where})"
            raise CorpusError(f"{where}: no training pairs left after filtering "
                              f"(dropped: {reasons or 'none'})")
    train_pairs = sum(counts)
    shards = [shard_count(count, data.shards) for count in counts]
    marks = _sample_marks(train_pairs, data.vocab_max_sentences, data.seed)
    stats_marks = _sample_marks(train_pairs, STATS_SAMPLE, data.seed + 1)
    np.bitwise_or(marks, stats_marks << 1, out=marks)
    del stats_marks
    out_dir.mkdir(parents=True, exist_ok=True)
    second = _SecondPass(data, keep.data, marks.data, held, out_dir, report)
    stems = shard_stems([(corpus.name, count) for corpus, count in zip(corpora, shards)])
    with second.samples():
        written = [CorpusShards(corpus.name, corpus.weight, corpus.tag,
                                second.write(source, source_line(data, corpus), range(*pool),
                                             count, names), corpus.languages)
                   for corpus, source, pool, count, names
                   in zip(corpora, sources, ranges, counts, stems)]
    pairs = {"train": train_pairs}
    for name in ("dev", "test"):
        lines: list[Pair] = []
        for number in givers:
            line = source_line(data, corpora[number], tagged_as_train=False)
            if name in sources[number].given:
                kept = list(sources[number].given[name]())
                if len(kept) != given[number, name]:
                    raise CorpusError(f"{sources[number].where}: the {name} split changed "
                                      f"while it was read")
            else:
                candidates = [h for h in sorted(held, key=lambda h: h.index)
                              if h.split == name and h.corpus == number]
                kept = [h.pair for h in candidates if h.pair[0] not in second.shared[0]
                        and h.pair[1] not in second.shared[1]]
                if len(candidates) > len(kept):
                    dropped[f"{name} pair sharing a side with train"] += (len(candidates)
                                                                          - len(kept))
            lines += [(line(src), tgt) for src, tgt in kept]
        pairs[name] = _write_pairs(out_dir, name, lines)
    return Splits(pairs=pairs, dropped={k: n for k, n in sorted(dropped.items()) if n},
                  corpora=written, duplicates=duplicates,
                  vocab_sample=(out_dir / "vocab_sample.src", out_dir / "vocab_sample.tgt"),
                  stats_sample=(out_dir / "stats_sample.src", out_dir / "stats_sample.tgt"),
                  stats_pairs=int(np.count_nonzero(marks & STATS)),
                  languages=tuple(languages) if data.language_id is not False else ())


def source_line(data: DataConfig, corpus: CorpusConfig, tagged_as_train: bool = True
                ) -> Callable[[str], str]:
    """How a source sentence of `corpus` is written into the split files: after its
    target-language token in a multilingual run (`keras_transformer.languages.with_language`),
    and in train after its corpus tag (`pipelines.corpus.tags.tagged`): `<2fr> <bt> Hello.`"""
    language = data.target_language(corpus)
    tag = corpus.tag if tagged_as_train else None
    return lambda source: with_language(tagged(source, tag), language)


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


def _first_pass(sources: Sequence[Source], corpora: Sequence[CorpusConfig],
                missing: dict[int, list[str]], data: DataConfig,
                dropped: collections.Counter[str], report: Report, check: LanguageCheck,
                languages: Sequence[Languages]) -> tuple[array, list[_Held], list[int], array]:
    """Digests of the filtered pool pairs of every corpus, the pairs held out for dev and test
    from each corpus of `missing` (corpus number -> the splits its source does not give):
    those its source assigns, or the `holdout` smallest distinct digests for each missing
    split; where each corpus's pairs start (and the last ends); and the indices, ascending, of
    the pairs with a side not in `languages` (counted in `dropped`), never held out.

    Raises:
        CorpusError: a corpus tag or a target-language token in the text of a pair.
    """
    digests = array("Q")
    unwanted = array("q")
    held: list[_Held] = []
    reserved = _reserved_pieces(data)
    starts = []
    for number, (source, corpus, sides) in enumerate(zip(sources, corpora, languages)):
        starts.append(len(digests))
        giving = number in missing
        capacity = data.holdout * len(missing.get(number, ()))
        smallest: list[tuple[int, int, Pair]] = []  # a max-heap of (-digest, index, pair)
        in_heap: set[int] = set()
        for (src, tgt, split), reason in check.pairs(
                _filtered(source, data, dropped, "reading", report), sides):
            index = len(digests)
            digest = pair_digest(src, tgt, data.seed)
            digests.append(digest)
            for piece, key in reserved.items():
                if piece in src or piece in tgt:
                    raise CorpusError(
                        f"{key}: {piece} occurs in the text of corpus {corpus.name} "
                        f"({source.where}: {(src if piece in src else tgt)[:80]!r}), which the "
                        f"vocabulary would read as that token; choose another")
            if reason is not None:
                dropped[reason] += 1
                unwanted.append(index)
                continue
            if not giving:
                continue
            if split in ("dev", "test"):
                held.append(_Held(index, split, (src, tgt), number))
            elif split is None and capacity and digest not in in_heap and (
                    len(smallest) < capacity or digest < -smallest[0][0]):
                if len(smallest) == capacity:
                    in_heap.discard(-heapq.heappop(smallest)[0])
                heapq.heappush(smallest, (-digest, index, (src, tgt)))
                in_heap.add(digest)
        ranked = sorted(smallest, reverse=True)  # ascending digests
        held += [_Held(index, missing[number][rank // data.holdout], pair, number)
                 for rank, (_, index, pair) in enumerate(ranked)]
    return digests, held, starts + [len(digests)], unwanted


def _reserved_pieces(data: DataConfig) -> dict[str, str]:
    """The pieces no corpus text may hold, each with the config key that reserves it: the
    corpus tags and, in a multilingual run, the target-language tokens."""
    reserved = {}
    for number, corpus in enumerate(data.corpus_configs()):
        if corpus.tag:
            reserved.setdefault(corpus.tag, f"data.corpora[{number}].tag")
        language = data.target_language(corpus)
        if language:
            reserved.setdefault(language_token(language), f"data.corpora[{number}].tgt_lang")
    return reserved


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


def _cap(train: np.ndarray, digests: np.ndarray, limit: int) -> int:
    """Keeps (in `train`, a corpus's bool [pairs] in place) its `limit` train pairs of smallest
    digest, a uniform sample; returns the number dropped."""
    kept = np.flatnonzero(train)
    if len(kept) <= limit:
        return 0
    over = kept[np.argpartition(digests[kept], limit)[limit:]]
    train[over] = False
    return len(over)


class _SecondPass:
    """Pass 2: writes each corpus's train pairs into its shards (`write`) and every corpus's
    into the samples (open within `samples`), noting the held-out sides that occur in train
    (`shared`: sources, targets)."""

    def __init__(self, data: DataConfig, train: memoryview, marks: memoryview,
                 held: list[_Held], out_dir: Path, report: Report) -> None:
        self.data, self.train, self.marks, self.out_dir = data, train, marks, out_dir
        self.report = report
        self.held = {h.pair[0] for h in held}, {h.pair[1] for h in held}
        self.shared: tuple[set[str], set[str]] = (set(), set())
        self.position = 0  # among all corpora's train pairs: the index into `marks`
        self.vocab: tuple[IO[str], IO[str]] | None = None
        self.stats: tuple[IO[str], IO[str]] | None = None

    @contextlib.contextmanager
    def samples(self) -> Iterator[None]:
        """The vocabulary and statistics sample files, open."""
        with contextlib.ExitStack() as stack:
            self.vocab, self.stats = (tuple(stack.enter_context(self._open(f"{sample}.{side}"))
                                            for side in ("src", "tgt"))
                                      for sample in ("vocab_sample", "stats_sample"))
            yield
            if self.position != len(self.marks):
                raise CorpusError("a corpus changed while it was read")

    def write(self, source: Source, line: Callable[[str], str], pool: range, count: int,
              stems: list[str]) -> tuple[int, ...]:
        """Writes the `count` train pairs of a corpus, whose pool pairs are those of indices
        `pool`, into shards `stems`, each source as `line` makes it (`source_line`); returns
        each shard's pairs."""
        shards = len(stems)
        with contextlib.ExitStack() as stack:
            outputs = [tuple(stack.enter_context(self._open(f"{stem}.{side}"))
                             for side in ("src", "tgt")) for stem in stems]
            written = 0
            for index, (src, tgt, _) in enumerate(_filtered(source, self.data, None, "writing",
                                                            self.report), pool.start):
                if index >= pool.stop:
                    raise CorpusError(f"{source.where}: the corpus changed while it was read")
                if not self.train[index]:
                    continue
                for text, held, shared in zip((src, tgt), self.held, self.shared):
                    if text in held:
                        shared.add(text)
                written_src = line(src)
                src_file, tgt_file = outputs[written % shards]
                src_file.write(written_src + "\n")
                tgt_file.write(tgt + "\n")
                mark = self.marks[self.position]
                for bit, (sample_src, sample_tgt) in ((VOCAB, self.vocab), (STATS, self.stats)):
                    if mark & bit:
                        sample_src.write(written_src + "\n")
                        sample_tgt.write(tgt + "\n")
                written += 1
                self.position += 1
        if written != count:
            raise CorpusError(f"{source.where}: the corpus changed while it was read")
        return tuple(len(range(i, written, shards)) for i in range(shards))

    def _open(self, name: str) -> IO[str]:
        return open(self.out_dir / name, "w", encoding="utf-8", newline="\n",
                    buffering=WRITE_BUFFER)


def _write_pairs(out_dir: Path, split: str, pairs: Iterable[Pair]) -> int:
    """Writes `split`.src / .tgt; returns the number of pairs."""
    count = 0
    with open(out_dir / f"{split}.src", "w", encoding="utf-8", newline="\n") as src_file, \
            open(out_dir / f"{split}.tgt", "w", encoding="utf-8", newline="\n") as tgt_file:
        for count, (src, tgt) in enumerate(pairs, 1):
            src_file.write(src + "\n")
            tgt_file.write(tgt + "\n")
    return count
