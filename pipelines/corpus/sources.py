"""Corpora as streams of cleaned sentence pairs, read again for each pass of `prepare`.

Sources (the `data.source` of a pipeline config, or the `source` of each of `data.corpora`):
- `bible:SRC-TGT` (pipelines/corpus/bible.py): every aligned verse pair, whole chapters assigned to
  dev and test.
- `files`: the user's parallel text files (`src` + `tgt`) or TSV files, one pair per line, read
  as bytes and split on '\\n' only (as tf.data reads them).
- `tfds:NAME/CONFIG`: a tensorflow-datasets translation builder through `tfds.load`.

Every sentence has its whitespace collapsed (`clean_text`). A source reads nothing until it is
iterated and never holds the corpus in memory (the Bible's 31k verses excepted); its `Meter`
tells how much of the input the current pass has read.

Example:
    >>> source, *others = open_sources(config.data)  # one a corpus, in order
    >>> for src, tgt, split in source.pool(): ...
"""
from __future__ import annotations

import codecs
import collections
import dataclasses
import itertools
import urllib.error
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from pipelines import CorpusError
from pipelines.corpus.bible import bible_pairs
from pipelines.files import clean_text

if TYPE_CHECKING:
    import tensorflow_datasets as tfds

    from pipelines.config import CorpusConfig, DataConfig, SplitFiles

Pair = tuple[str, str]
PoolPair = tuple[str, str, str | None]  # (source, target, split given by the source or None)
SPLITS = ("train", "dev", "test")
READ_BUFFER = 1 << 20
TFDS_BATCH = 4096
TFDS_RETRIES = 2  # per download URL; tfds's 10, with backoff, take 3.5 minutes offline


@dataclasses.dataclass
class Meter:
    """How much of the pool the current pass has read: `done` of `total` bytes or examples."""

    done: int = 0
    total: int = 0

    def fraction(self) -> float | None:
        return min(1.0, self.done / self.total) if self.total else None


@dataclasses.dataclass(frozen=True)
class Source:
    """A corpus opened for streaming.

    Attributes:
        where: names the corpus in messages.
        pool: a new pass over the pairs that `prepare` filters, de-duplicates and splits:
            (source, target, split), split "train", "dev" or "test" where the source assigns
            it (the Bible's chapters), else None (train, from which missing splits are held out).
        given: the dev / test splits the source provides, kept as they are.
        dropped: pairs left out while reading, by reason.
        meter: what the current pass over `pool` has read.
        languages: the (source, target) language codes: the Bible's, a TFDS builder's keys, a
            `files` corpus's `src_lang` / `tgt_lang` (None where not given).
    """

    where: str
    pool: Callable[[], Iterator[PoolPair]]
    given: dict[str, Callable[[], Iterator[Pair]]]
    dropped: dict[str, int]
    meter: Meter
    languages: tuple[str | None, str | None] = (None, None)


def open_sources(data: DataConfig) -> list[Source]:
    """The corpora of `data` (`DataConfig.corpus_configs`), in order, ready to stream.

    Raises:
        CorpusError: as `open_source`.
    """
    return [open_source(corpus, data) for corpus in data.corpus_configs()]


def open_source(corpus: CorpusConfig, data: DataConfig) -> Source:
    """The corpus that `corpus.source` names, ready to stream (`data` gives the Bible's
    `holdout` and the `tfds_data_dir`).

    Raises:
        CorpusError: a missing data package or TFDS builder, or a language the builder lacks.
            Unreadable or malformed files raise while they are read.
    """
    kind = corpus.source.partition(":")[0]
    meter = Meter()
    if kind == "bible":
        dropped: collections.Counter[str] = collections.Counter()
        verses = bible_pairs(corpus.source, data.holdout, dropped)
        meter.total = len(verses)

        def pool() -> Iterator[PoolPair]:
            for meter.done, (source, target, split, _) in enumerate(verses, 1):
                yield source, target, split

        return Source(corpus.source, pool, {}, dict(dropped), meter, corpus.languages)
    if kind == "files":
        meter.total = sum(_size(path) for path in _paths(corpus.train))
        given = {name: _file_pairs(getattr(corpus, name), None) for name in ("dev", "test")
                 if getattr(corpus, name) is not None}
        train = _file_pairs(corpus.train, meter)
        return Source(_describe(corpus.train), lambda: ((s, t, None) for s, t in train()), given,
                      {}, meter, corpus.languages)
    return _tfds_source(corpus, data.tfds_data_dir, meter)


# User files -------------------------------------------------------------------------------


def _paths(files: SplitFiles) -> list[Path]:
    return [files.tsv] if files.tsv else [files.src, files.tgt]


def _describe(files: SplitFiles) -> str:
    return str(files.tsv) if files.tsv else f"{files.src} + {files.tgt}"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # reading it names the problem


def _file_pairs(files: SplitFiles, meter: Meter | None) -> Callable[[], Iterator[Pair]]:
    if files.tsv:
        return lambda: _tsv_pairs(files.tsv, meter)
    return lambda: _parallel_pairs(files.src, files.tgt, meter)


def _lines(path: Path, meter: Meter | None) -> Iterator[str]:
    """A UTF-8 file's lines (each with its '\\n', if any), a leading BOM dropped."""
    try:
        file = open(path, "rb", buffering=READ_BUFFER)
    except FileNotFoundError:
        raise CorpusError(f"{path}: no such file") from None
    except OSError as error:
        raise CorpusError(f"{path}: cannot read it ({error.strerror})") from None
    with file:
        for number, raw in enumerate(file, 1):
            if meter is not None:
                meter.done += len(raw)
            if number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                byte = raw[error.start]
                raise CorpusError(f"{path}:{number}: not valid UTF-8 (byte 0x{byte:02x} at "
                                  f"column {error.start + 1})") from None
            yield text


def _parallel_pairs(src: Path, tgt: Path, meter: Meter | None) -> Iterator[Pair]:
    """Line i of `src` and of `tgt` as pair i."""
    src_lines, tgt_lines = _lines(src, meter), _lines(tgt, meter)
    for number, (s, t) in enumerate(itertools.zip_longest(src_lines, tgt_lines), 1):
        if s is None or t is None:
            short, long_, rest = ((src, tgt, tgt_lines) if s is None
                                  else (tgt, src, src_lines))
            longer = number + sum(1 for _ in rest)
            raise CorpusError(f"{short}:{number}: file ends after {number - 1} lines, but "
                              f"{long_} has {longer} lines: the two sides must align line by "
                              f"line")
        yield clean_text(s), clean_text(t)


def _tsv_pairs(path: Path, meter: Meter | None) -> Iterator[Pair]:
    """Pairs from `source<TAB>target` lines."""
    for number, line in enumerate(_lines(path, meter), 1):
        fields = line.rstrip("\r\n").split("\t")
        if len(fields) != 2:
            raise CorpusError(f"{path}:{number}: expected 2 tab-separated fields (source, "
                              f"target), found {len(fields)}")
        yield clean_text(fields[0]), clean_text(fields[1])


# TFDS -------------------------------------------------------------------------------------


def _tfds_source(corpus: CorpusConfig, tfds_data_dir: Path | None, meter: Meter) -> Source:
    """train (pool), validation (dev) and test of a TFDS translation builder; languages are
    the builder's feature keys (`de`, `en`)."""
    import tensorflow_datasets as tfds

    name = corpus.source.partition(":")[2]
    data_dir = str(tfds_data_dir) if tfds_data_dir else None
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError as error:
        raise CorpusError(f"{corpus.source}: no such tensorflow-datasets builder "
                          f"({str(error).splitlines()[0]})") from None
    if not builder.is_prepared():
        _download_and_prepare(builder, corpus)
    languages = list(builder.info.features.keys())
    default = builder.info.supervised_keys or (None, None)
    src_lang, tgt_lang = corpus.src_lang or default[0], corpus.tgt_lang or default[1]
    for key, lang in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
        if lang not in languages:
            raise CorpusError(f"{corpus.source}: data.{key} must be one of {languages}, "
                              f"got {lang!r}")
    datasets = {}
    for split, tfds_split in (("train", "train"), ("dev", "validation"), ("test", "test")):
        try:
            datasets[split] = tfds.load(name, split=tfds_split, data_dir=data_dir)
        except ValueError as error:
            if "Unknown split" not in str(error):
                raise
    if "train" not in datasets:
        raise CorpusError(f"{corpus.source}: the builder has no train split")
    meter.total = max(0, int(datasets["train"].cardinality()))

    def pairs(split: str, counted: Meter | None) -> Iterator[Pair]:
        index = 0
        for batch in tfds.as_numpy(datasets[split].batch(TFDS_BATCH)):
            for src, tgt in zip(batch[src_lang], batch[tgt_lang]):
                yield (clean_text(_decode(src, corpus.source, split, index)),
                       clean_text(_decode(tgt, corpus.source, split, index)))
                index += 1
            if counted is not None:
                counted.done = index

    given = {split: (lambda split=split: pairs(split, None)) for split in ("dev", "test")
             if split in datasets}
    return Source(corpus.source, lambda: ((s, t, None) for s, t in pairs("train", meter)), given,
                  {}, meter, (src_lang, tgt_lang))


def _download_and_prepare(builder: tfds.core.DatasetBuilder, corpus: CorpusConfig) -> None:
    """Downloads and prepares a builder's data in its data_dir, failing within seconds, with
    how to provide the data offline, when a download cannot connect."""
    import requests
    from tensorflow_datasets.core.download import downloader

    retries, downloader.MAX_RETRIES = downloader.MAX_RETRIES, TFDS_RETRIES
    try:
        builder.download_and_prepare()
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout,
            urllib.error.URLError) as error:
        url = getattr(getattr(error, "request", None), "url", None) or "a download URL"
        name = corpus.source.partition(":")[2]
        raise CorpusError(
            f"{corpus.source}: not prepared in {builder.data_dir_root} and {url} cannot be "
            f"reached ({type(error).__name__}). Without network access: run `tfds build {name} "
            f"--data_dir DIR` on a machine that has it, copy DIR here and set "
            f"data.tfds_data_dir: DIR") from None
    finally:
        downloader.MAX_RETRIES = retries


def _decode(value: bytes, source: str, split: str, index: int) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise CorpusError(f"{source}: {split} example {index}: not valid UTF-8") from None
