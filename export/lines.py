"""Lines in, translations out, in batches of similar lengths (no TensorFlow import)."""
from __future__ import annotations

import codecs
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")

# SentencePiece reads each byte outside valid UTF-8 as one U+FFFD; so does this error handler
# (Python's "replace" gives one U+FFFD per maximal invalid subsequence).
codecs.register_error("sentencepiece",
                      lambda error: ("\ufffd" * (error.end - error.start), error.end))


def decode_line(line: str | bytes) -> str:
    """Text of a line given as bytes, invalid UTF-8 read as SentencePiece reads it."""
    return line if isinstance(line, str) else line.decode("utf-8", "sentencepiece")


def translate_in_batches(translate_batch: Callable[[list[str]], Sequence[T]],
                         lines: Sequence[str], batch_size: int) -> list[T]:
    """Calls `translate_batch` on batches of at most `batch_size` lines sorted by length (less
    padding); returns the translations (or n-best lists) in the order of `lines`."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    order = sorted(range(len(lines)), key=lambda i: len(lines[i]))
    translations: list[T] = [None] * len(lines)  # type: ignore[list-item]  # all set below
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        for index, text in zip(batch, translate_batch([lines[i] for i in batch])):
            translations[index] = text
    return translations
