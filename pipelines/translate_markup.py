"""`keras-transformer translate --alignments` and `--markup`: each line's translation with its
word alignment (`TRANSLATION ||| I-J ...`, source word I - target word J), and lines with
inline tags translated as plain text, the tags put back around the aligned words
(`export.markup`), through the SavedModel's `translate_aligned` (or, with --glossary,
`translate_terms`) signature or CTranslate2's attention.

Example:
    $ echo "In the <b>beginning</b>" | keras-transformer translate runs/demo/export --markup
"""
from __future__ import annotations

from typing import Callable, Iterable

from export.markup import MarkupError, parse_markup, restore_markup
from pipelines import InputError


def check_markup(name: str, lines: Iterable[str]) -> None:
    """Parses the markup of every line.

    Raises:
        InputError: `NAME:LINE: column C: ...` for the first line whose markup is malformed.
    """
    for number, line in enumerate(lines, 1):
        try:
            parse_markup(line)
        except MarkupError as error:
            raise InputError(f"{name}:{number}: {error}") from None


def aligned_rows(aligned_lines: Callable[[list[str]], list[tuple[str, str]]],
                 lines: list[str], markup: bool, alignments: bool) -> list[str]:
    """The output line of each input line: its translation (with the line's tags put back,
    with `markup`), then ` ||| I-J ...` with `alignments` (of the plain text with `markup`);
    `aligned_lines`: texts -> (translation, `I-J ...`) of each, in order."""
    parsed = [parse_markup(line) for line in lines] if markup else []
    texts = [line.text for line in parsed] if markup else lines
    rows = []
    for index, (translation, alignment) in enumerate(aligned_lines(texts)):
        if markup:
            translation = restore_markup(parsed[index], translation, alignment)
        rows.append(f"{translation} ||| {alignment}\n" if alignments else f"{translation}\n")
    return rows
