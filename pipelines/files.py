"""Text files read by line, and files written whole or not at all (a temporary name, then a
rename)."""
from __future__ import annotations

import contextlib
import itertools
import os
from pathlib import Path
from typing import IO, Iterable, Iterator


def clean_text(text: str) -> str:
    """Collapses every run of whitespace (tabs, newlines, NBSP ...) into one space, so that a
    sentence fits one line and the tokenizer round-trips it."""
    return " ".join(text.split())


def write_lines_atomic(path: Path, lines: Iterable[str]) -> None:
    """Writes UTF-8 lines, each ended by '\\n', to `path`, whole or not at all."""
    with atomic_open(path, "w") as file:
        for line in lines:
            file.write(line + "\n")


@contextlib.contextmanager
def atomic_open(path: Path, mode: str) -> Iterator[IO]:
    """A file opened under a temporary name beside `path` (`mode` "w" for UTF-8 text or "wb"),
    renamed into place when the block ends without an error, else deleted."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    text = {"encoding": "utf-8", "newline": "\n"} if "b" not in mode else {}
    try:
        with open(temp, mode, **text) as file:
            yield file
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def read_lines(path: str | Path, limit: int | None = None) -> list[str]:
    """The first `limit` (default: all) UTF-8 lines of `path`, without their newlines."""
    with open(path, encoding="utf-8") as file:
        return [line.rstrip("\n") for line in itertools.islice(file, limit)]
