"""Word alignments as every runtime returns them (no TensorFlow import): `SOURCE-TARGET` pairs of
word indices from 0, words as whitespace tokens (`keras_transformer.alignment` says how they are
found: pieces merged, a fixed decoder layer's cross-attention averaged over its heads).

The SavedModel's `align` signature computes them in the graph; the CTranslate2 runtime from the
attention `translate_batch(return_attention=True)` gives (`export.ct2_runtime`), with
`piece_words` and `align_words` below, which follow the graph's rules.

Example:
    format_alignment([(0, 0), (2, 1)])  # "0-0 2-1"
    parse_alignment("0-0 2-1")          # [(0, 0), (2, 1)]
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

WORD_BOUNDARY = "\u2581"  # SentencePiece's mark of a piece that starts a word
SPACE_BYTE_PIECES = ("<0x20>", "<0x0A>", "<0x0D>")  # decoded as a space (a line break: too)
Alignment = list[tuple[int, int]]  # (source word, target word) pairs, by target word
PAIR = re.compile(r"(\d+)-(\d+)")


class AlignmentError(ValueError):
    """A text that is not `I-J I-J ...` pairs of word indices."""


def starts_word(piece: str) -> bool:
    """Whether a SentencePiece piece begins a word: it begins with the word-boundary mark or
    is a byte that decodes as whitespace."""
    return piece.startswith(WORD_BOUNDARY) or piece in SPACE_BYTE_PIECES


def piece_words(pieces: Sequence[str]) -> list[int]:
    """The word (from 0) of each piece (no BOS, EOS or PAD among them): the first piece starts
    one whatever it is, as `keras_transformer.alignment.piece_words` counts in the graph."""
    starts = [index == 0 or starts_word(piece) for index, piece in enumerate(pieces)]
    return list(np.cumsum(starts, dtype=int) - 1)


def align_words(attention: np.ndarray, source_pieces: Sequence[str],
                target_pieces: Sequence[str], skip_source_words: int = 0) -> Alignment:
    """Each target word with the source word of the highest attention summed over both words'
    pieces. attention: [target pieces, source pieces (more columns, e.g. EOS, are left out)];
    the source's first `skip_source_words` words (a multilingual model's target-language
    token) are left out, the others counted from 0, as `keras_transformer.alignment` does."""
    source_words = np.asarray(piece_words(source_pieces), int) - skip_source_words
    kept = source_words >= 0  # [source pieces]
    if not kept.any() or not target_pieces:
        return []
    target_words = piece_words(target_pieces)
    rows = np.asarray(attention, np.float64)[:len(target_pieces), :len(source_pieces)][:, kept]
    summed = np.zeros([target_words[-1] + 1, source_words[-1] + 1])
    np.add.at(summed, (np.asarray(target_words)[:, None], source_words[kept][None, :]), rows)
    return [(int(source), target) for target, source in enumerate(summed.argmax(axis=1))]


def format_alignment(pairs: Alignment) -> str:
    """`I-J I-J ...`: source word I aligned to target word J."""
    return " ".join(f"{source}-{target}" for source, target in pairs)


def parse_alignment(text: str) -> Alignment:
    """The pairs of `format_alignment`'s text (the `align` signature's output).

    Raises:
        AlignmentError: an item that is not two word indices joined by "-".
    """
    pairs = []
    for item in text.split():
        match = PAIR.fullmatch(item)
        if not match:
            raise AlignmentError(f"alignment item {item!r} is not SOURCE-TARGET word indices")
        pairs.append((int(match.group(1)), int(match.group(2))))
    return pairs
