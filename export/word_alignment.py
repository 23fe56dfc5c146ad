"""Word alignments as every runtime returns them (no TensorFlow import): `SOURCE-TARGET` pairs of
word indices from 0, words as whitespace tokens (`keras_transformer.alignment` says how they are
found: pieces merged, a fixed decoder layer's cross-attention averaged over its heads).

The SavedModel's `align` signature computes them in the graph; the CTranslate2 runtime from the
attention `translate_batch(return_attention=True)` gives (`export.ct2_runtime`), with
`align_words` below, which follows the graph's rules (words: `keras_transformer.words`).

Example:
    format_alignment([(0, 0), (2, 1)])  # "0-0 2-1"
    parse_alignment("0-0 2-1")          # [(0, 0), (2, 1)]
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from keras_transformer.words import piece_words

Alignment = list[tuple[int, int]]  # (source word, target word) pairs, by target word
PAIR = re.compile(r"(\d+)-(\d+)")


class AlignmentError(ValueError):
    """A text that is not `I-J I-J ...` pairs of word indices."""


def align_words(attention: np.ndarray, source_pieces: Sequence[str],
                target_pieces: Sequence[str], skip_source_words: int = 0) -> Alignment:
    """Each target word with the source word of the highest attention summed over both words'
    pieces. attention: [target pieces, source pieces (more columns, e.g. EOS, are left out)];
    the source's first `skip_source_words` words (a multilingual model's target-language
    token) are left out, the others counted from 0, as `keras_transformer.alignment` does."""
    source_words = np.asarray(piece_words(source_pieces), int) - skip_source_words
    target_words = np.asarray(piece_words(target_pieces), int)
    kept, rows = source_words >= 0, target_words >= 0  # [source pieces], [target pieces]
    if not kept.any() or not rows.any():
        return []
    attention = np.asarray(attention, np.float64)[:len(target_pieces), :len(source_pieces)]
    summed = np.zeros([target_words.max() + 1, source_words.max() + 1])
    np.add.at(summed, (target_words[rows][:, None], source_words[kept][None, :]),
              attention[rows][:, kept])
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
