"""Corpus-scale `translate`: input read a window at a time (memory bounded whatever its size),
each window sorted by length inside the translator and written in input order as soon as it
is done, flushed; an `--output FILE` that an interrupted job left is continued after the lines
it holds whole.

Example:
    with resumed_output(Path("out.txt"), rows_per_line=1) as (done, out):
        rest = itertools.islice(InputLines(open("in.txt", "rb")), done, None)
        translate_windows(rest, translate, out, window=2048, first_index=done)
"""
from __future__ import annotations

import contextlib
import itertools
import os
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator

WINDOW = 2048  # input lines read, translated and written at a time

# (lines of a window, the input index of its first line) -> each line's output, "\n"-ended
TranslateWindow = Callable[[list[str], int], list[str]]


def translate_windows(lines: Iterable[str], translate: TranslateWindow, out: BinaryIO,
                      window: int = WINDOW, first_index: int = 0,
                      done: Callable[[int], None] = lambda count: None) -> int:
    """Translates `lines` `window` at a time and writes each window's output in input order,
    flushed; `done(count)` after each window. Returns the lines translated."""
    count, iterator = 0, iter(lines)
    while batch := list(itertools.islice(iterator, window)):
        out.write("".join(translate(batch, first_index + count)).encode("utf-8"))
        out.flush()
        count += len(batch)
        done(count)
    return count


@contextlib.contextmanager
def resumed_output(path: Path | None, rows_per_line: int
                   ) -> Iterator[tuple[int, BinaryIO]]:
    """(input lines already translated, the stream to append to): stdout without `path`;
    else `path`, created, or continued after its last whole group of `rows_per_line` lines
    (a line cut short, or an n-best group, by an interrupted job is removed first)."""
    if path is None:
        import sys

        yield 0, sys.stdout.buffer
        return
    done, keep = _whole_lines(path, rows_per_line) if path.exists() else (0, 0)
    with open(path, "ab") as out:
        out.truncate(keep)
        out.seek(keep)
        yield done, out
        out.flush()
        os.fsync(out.fileno())


def _whole_lines(path: Path, rows_per_line: int) -> tuple[int, int]:
    """(input lines whose output `path` holds whole, the bytes that hold them)."""
    rows = position = kept = 0
    with open(path, "rb") as file:
        for line in file:
            if not line.endswith(b"\n"):
                break
            rows, position = rows + 1, position + len(line)
            if rows % rows_per_line == 0:
                kept = position
    return rows // rows_per_line, kept


class LineNotes:
    """The input lines that share one problem, for a summary line at the end: how many, and
    the numbers of the first few."""

    SHOWN = 5

    def __init__(self, problem: str) -> None:
        self.problem, self.count, self.first = problem, 0, []

    def add(self, number: int) -> None:
        self.count += 1
        if len(self.first) < self.SHOWN:
            self.first.append(number)

    def summary(self, name: str) -> str | None:
        """`N line(s) PROBLEM: NAME:L1, :L2 ...`, or None when no line had it."""
        if not self.count:
            return None
        where = f"{name}:{self.first[0]}" + "".join(f", :{n}" for n in self.first[1:])
        more = ", ..." if self.count > len(self.first) else ""
        return f"{self.count:,} line{'s' * (self.count > 1)} {self.problem}: {where}{more}"


class InputLines:
    """The lines of a byte stream as text (invalid UTF-8 read as SentencePiece reads it, the
    line noted in `invalid`), counting the bytes read, so that `fraction` tells how much of a
    file of `size` bytes is read (None for a stream of unknown size)."""

    def __init__(self, stream: BinaryIO, size: int | None = None) -> None:
        self.stream, self.size, self.read = stream, size, 0
        self.invalid = LineNotes("of invalid UTF-8, each bad byte read as U+FFFD")

    def __iter__(self) -> Iterator[str]:
        from export.lines import decode_line

        for number, line in enumerate(self.stream, 1):
            self.read += len(line)
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                self.invalid.add(number)
                text = decode_line(line)
            yield text.rstrip("\r\n")

    @property
    def fraction(self) -> float | None:
        return min(1.0, self.read / self.size) if self.size else None
