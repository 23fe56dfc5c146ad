"""Text files read by line, files written whole or not at all (a temporary name, then a
rename), checks that a directory can be one and be written before long work, the data
files that installed packages ship, and a file's SHA-256.

Example:
    >>> with atomic_open(Path("runs/demo/eval/test.json"), "w") as file:
    ...     file.write(text)  # the old file stays until the new one is whole
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import itertools
import os
import tempfile
from pathlib import Path
from typing import IO, Iterable, Iterator

from pipelines import InputError


def package_file(package: str, relative: str | Path) -> Path | None:
    """A data file of an installed package (`relative` to its directory), found without
    importing the package; None when the package or the file is missing."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    return path if path.is_file() else None


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
    except OSError as error:
        if error.filename != str(temp):
            raise
        raise OSError(error.errno, error.strerror, str(path)) from None  # the name one knows
    finally:
        temp.unlink(missing_ok=True)


def read_lines(path: str | Path, limit: int | None = None) -> list[str]:
    """The first `limit` (default: all) UTF-8 lines of `path`, without their newlines."""
    with open(path, encoding="utf-8") as file:
        return [line.rstrip("\n") for line in itertools.islice(file, limit)]


def file_in_the_way(directory: Path) -> Path | None:
    """The existing file (not a directory) that `directory` or one of its parents is, which
    stops it from being a directory; None if there is none."""
    for path in (directory, *directory.parents):
        if path.exists():
            return None if path.is_dir() else path
    return None


def check_writable(directory: Path) -> None:
    """Checks that a file can be made in `directory` (or, while it does not exist, in its
    nearest parent that does), creating nothing: a read-only or unwritable run directory fails
    before the work whose results it would lose.

    Raises:
        InputError: a file is in the way (`file_in_the_way`).
        OSError: naming the directory (e.g. EACCES, EROFS).
    """
    blocking = file_in_the_way(directory)
    if blocking is not None:
        raise InputError(f"{blocking}: a file, not a directory")
    existing = next(path for path in (directory, *directory.parents) if path.exists())
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        raise OSError(error.errno, error.strerror, str(existing)) from None


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, in hexadecimal (read a megabyte at a time)."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
