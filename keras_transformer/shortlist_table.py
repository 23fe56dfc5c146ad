"""The lexical shortlist's table, without TensorFlow: which target pieces each source piece
may bring (its use in a search: `keras_transformer.shortlist`).

A table (`ShortlistTable`, vocab/shortlist.npz, written by prepare:
`pipelines.corpus.shortlist`) ranks, for each source piece, the target pieces most likely to
translate it (best first, STORED_PER_PIECE at most), every target piece by its frequency in
the train targets, and the pieces always allowed (PAD, UNK, BOS, EOS and the user symbols:
language tokens, corpus tags). `ShortlistTable.select(k, n)` keeps the k best of each source
piece and the n most frequent target pieces: the `Shortlist` a search reads.

Example:
    shortlist = ShortlistTable.load(Path("runs/demo/vocab/shortlist.npz")).select(k=50, n=100)
    shortlist.table  # int32 [vocab, 50]; shortlist.always: int32, sorted
"""
from __future__ import annotations

import dataclasses
import io
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

STORED_PER_PIECE = 100  # the best target pieces kept per source piece (Bergamot's extract_lex)


@dataclasses.dataclass(frozen=True)
class ShortlistTable:
    """The table prepare writes: candidates int32 [vocab, STORED_PER_PIECE] (each source
    piece's target pieces best first, then PAD), frequent int32 [vocab] (every piece, most
    frequent in the train targets first), always int32 [a] (PAD, UNK, BOS, EOS, user symbols),
    statistic ("alignments" or "co-occurrence") and pairs (the train pairs counted)."""

    candidates: np.ndarray
    frequent: np.ndarray
    always: np.ndarray
    statistic: str
    pairs: int

    @property
    def vocab_size(self) -> int:
        return self.candidates.shape[0]

    def select(self, k: int, n: int) -> Shortlist:
        """The k best candidates of each source piece ([vocab, k], numpy int32) and the
        pieces always allowed with the n most frequent (numpy int32, sorted, unique)."""
        always = np.union1d(self.always, self.frequent[:n]).astype(np.int32)
        return Shortlist(np.ascontiguousarray(self.candidates[:, :k], np.int32), always, n)

    def save(self, path: Path) -> None:
        """Writes the table to `path` (a .npz whose bytes depend only on the table; callers
        write to a staging path, then move it into place)."""
        arrays = {"candidates": self.candidates, "frequent": self.frequent,
                  "always": self.always, "statistic": np.array(self.statistic),
                  "pairs": np.array(self.pairs, np.int64)}
        with zipfile.ZipFile(path, "w") as archive:
            for name, array in arrays.items():
                buffer = io.BytesIO()
                np.save(buffer, array, allow_pickle=False)
                archive.writestr(zipfile.ZipInfo(f"{name}.npy", (1980, 1, 1, 0, 0, 0)),
                                 buffer.getvalue())

    @classmethod
    def load(cls, path: Path) -> ShortlistTable:
        """The table saved at `path`.

        Raises:
            ValueError: not a shortlist table (a missing array, a shape that disagrees).
        """
        try:
            with np.load(path, allow_pickle=False) as arrays:
                table = cls(arrays["candidates"].astype(np.int32),
                            arrays["frequent"].astype(np.int32),
                            arrays["always"].astype(np.int32), str(arrays["statistic"]),
                            int(arrays["pairs"]))
        except (KeyError, OSError, ValueError) as error:
            raise ValueError(f"{path}: not a shortlist table ({error})") from None
        if table.candidates.ndim != 2 or table.frequent.shape != (table.vocab_size,):
            raise ValueError(f"{path}: not a shortlist table (candidates "
                             f"{table.candidates.shape}, frequent {table.frequent.shape})")
        return table


class Shortlist(NamedTuple):
    """What a search reads (numpy arrays, tensors or variables): table int32 [vocab, k],
    each source piece's candidates (PAD where fewer); always int32 [a], every sentence's
    (`frequent` of them the most frequent pieces); enabled bool [] (false: every piece is a
    candidate of every sentence, as without a shortlist: an export's switch)."""
    table: Any
    always: Any
    frequent: int = 0
    enabled: Any = True
