"""The whitespace-separated words of SentencePiece pieces (no TensorFlow import): each piece's
mark and the word of each piece, the rule that alignments, guided alignment, the shortlist and
the aligner's input all count words by (`keras_transformer.alignment.piece_words` is the same
rule in the graph).

A word begins at a piece with text that begins with the word-boundary mark or follows a piece
of whitespace alone or its line's start; pieces of whitespace alone (the mark alone, a space
byte) belong to no word. So the words are those of the decoded text split at whitespace:
["▁a", "b", "▁", "▁c"] decodes as "ab  c", two words.

Example:
    piece_words(["▁a", "b", "▁", "▁c"])  # [0, 0, -1, 1]
    word_marks(["▁a", "b", "▁"])         # [WORD_START, WORD_CONTINUES, WORD_SPACE]
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
from sentencepiece import sentencepiece_model_pb2 as model_pb2

WORD_BOUNDARY = "\u2581"  # SentencePiece's mark of a piece that starts a word
SPACE_BYTE_PIECES = ("<0x0A>", "<0x0D>", "<0x20>")  # line break, carriage return, space
WORD_CONTINUES, WORD_START, WORD_SPACE = 0, 1, 2  # `word_mark`'s values


def starts_word(piece: str) -> bool:
    """Whether a SentencePiece piece begins with whitespace: the word-boundary mark or a byte
    that decodes as whitespace."""
    return piece.startswith(WORD_BOUNDARY) or piece in SPACE_BYTE_PIECES


def word_mark(piece: str) -> int:
    """A piece's part in its text's whitespace-separated words: WORD_SPACE for whitespace alone
    (the boundary mark alone or repeated, a space byte), WORD_START for text after the mark,
    WORD_CONTINUES for text alone."""
    if piece in SPACE_BYTE_PIECES or (piece and not piece.strip(WORD_BOUNDARY)):
        return WORD_SPACE
    return WORD_START if piece.startswith(WORD_BOUNDARY) else WORD_CONTINUES


def word_marks(pieces: Iterable[str]) -> np.ndarray:
    """int32 [pieces]: `word_mark` of each piece."""
    return np.array([word_mark(piece) for piece in pieces], np.int32)


def vocabulary_word_marks(model_proto: bytes) -> np.ndarray:
    """int32 [vocab]: `word_mark` of each piece of a SentencePiece model, by id (the table the
    graph's `keras_transformer.alignment.piece_words` reads)."""
    return word_marks(piece.piece for piece in model_pb2.ModelProto.FromString(model_proto).pieces)


def word_groups(marks: np.ndarray, line_starts: np.ndarray) -> np.ndarray:
    """int64 [pieces]: the word of each piece of lines laid one after another, counted from 0
    over all of them, -1 for a piece that is whitespace alone. marks: int [pieces]
    (`word_mark`'s), line_starts: bool [pieces], True at each line's first piece.

    The module's rule, which `keras_transformer.alignment.piece_words` follows in the graph."""
    marks = np.asarray(marks)
    text = marks != WORD_SPACE  # [pieces]
    after_space = np.zeros_like(text)  # [pieces]
    after_space[1:] = marks[:-1] == WORD_SPACE
    starts = text & ((marks == WORD_START) | after_space | np.asarray(line_starts, bool))
    return np.where(text, np.cumsum(starts) - 1, -1)


def piece_words(pieces: Sequence[str]) -> list[int]:
    """The word (from 0) of each piece of one line (no BOS, EOS or PAD among them), -1 for a
    piece that is whitespace alone (`word_groups`)."""
    line_starts = np.arange(len(pieces)) == 0
    return word_groups(word_marks(pieces), line_starts).tolist()
