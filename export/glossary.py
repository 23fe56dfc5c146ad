"""Glossaries for terminology constraints (standard library only: usable by TF Serving clients
that fill the `translate_terms` signature's `terms` input).

A glossary is a UTF-8 TSV file of `SOURCE TERM<TAB>TARGET TERM` lines (spaces around a term
ignored), checked whole before any use. A source term is found in a line as whole words: not
preceded or followed by a letter, digit or underscore (whitespace, punctuation or the line's
ends bound it), case-sensitive ("Lord" does not match "lord"), scanning left to right, the
longest term first where several start at one place ("New York City" before "New York"), found
terms never overlapping. Each line's target terms are those of the source terms found, in
order, each once.

Example:
    >>> glossary = Glossary({"New York": "New York", "city": "ville"})
    >>> glossary.target_terms("The city of New York, a city.")
    ['ville', 'New York']
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple, Sequence


class GlossaryError(ValueError):
    """A glossary file that cannot be used; the message names FILE:LINE."""


class TermTranslation(NamedTuple):
    """A line translated with its target terms: `terms_fit` false when their pieces outnumber
    the line's output limit (translated without them); `term_found` per term, in order;
    `alignment`: the translation's word alignment, `I-J ...`."""
    translation: str
    score: float
    terms_fit: bool
    term_found: tuple[bool, ...]
    alignment: str


class Glossary:
    """Source term -> target term, and the target terms of a line."""

    def __init__(self, entries: dict[str, str]) -> None:
        self.entries = dict(entries)
        longest_first = sorted(self.entries, key=len, reverse=True)
        self.pattern = re.compile(r"(?<!\w)(?:%s)(?!\w)" % "|".join(map(re.escape,
                                                                      longest_first)))

    @classmethod
    def read(cls, path: Path) -> Glossary:
        """The glossary of a TSV file, checked whole.

        Raises:
            GlossaryError: `FILE:LINE: ...` for the first line that is not UTF-8, has no tab or
                more than one, an empty term, or a source term given before with another target
                term; `FILE: ...` for a file that is missing or has no entry.
        """
        try:
            data = path.read_bytes()
        except OSError as error:
            raise GlossaryError(f"{path}: {error.strerror or error}") from None
        entries: dict[str, str] = {}
        first_line: dict[str, int] = {}
        for number, raw in enumerate(data.splitlines(), 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise GlossaryError(f"{path}:{number}: not UTF-8") from None
            fields = line.split("\t")
            if len(fields) != 2:
                raise GlossaryError(f"{path}:{number}: expected SOURCE TERM<TAB>TARGET TERM, "
                                    f"found {len(fields) - 1} tabs")
            source, target = (field.strip() for field in fields)
            if not source or not target:
                side = "source" if not source else "target"
                raise GlossaryError(f"{path}:{number}: empty {side} term")
            if entries.get(source, target) != target:
                raise GlossaryError(f"{path}:{number}: source term {source!r} has target term "
                                    f"{entries[source]!r} at line {first_line[source]}, here "
                                    f"{target!r}")
            entries[source] = target
            first_line.setdefault(source, number)
        if not entries:
            raise GlossaryError(f"{path}: no SOURCE TERM<TAB>TARGET TERM line")
        return cls(entries)

    def target_terms(self, line: str) -> list[str]:
        """The target terms of the source terms found in `line` (module docstring), in order,
        each once."""
        found = (self.entries[match.group(0)] for match in self.pattern.finditer(line))
        return list(dict.fromkeys(found))


def padded_terms(terms: Sequence[Sequence[str]]) -> list[list[str]]:
    """Each line's terms padded with "" to the longest list: the `terms` input [batch, terms]."""
    width = max((len(line_terms) for line_terms in terms), default=0)
    return [list(line_terms) + [""] * (width - len(line_terms)) for line_terms in terms]
