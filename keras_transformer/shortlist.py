"""The lexical shortlist: its table (which target pieces each source piece may bring) and its
use by a search (a batch's candidates, each row's own, the projection onto them).

A table (`ShortlistTable`, vocab/shortlist.npz, written by prepare:
`pipelines.corpus.shortlist`) ranks, for each source piece, the target pieces most likely to
translate it (best first, STORED_PER_PIECE at most), every target piece by its frequency in
the train targets, and the pieces always allowed (PAD, UNK, BOS, EOS and the user symbols:
language tokens, corpus tags). `ShortlistTable.select(k, n)` keeps the k best of each source
piece and the n most frequent target pieces: the `Shortlist` a search reads.

A sentence's candidates are the k best of each of its source pieces, the source pieces
themselves (names and numbers copied), the n frequent pieces, the pieces always allowed, and
any piece it is forced to produce (a prefix's, a term's). A batch's search projects the
decoder's output onto the union of its rows' candidates only (U columns of the tied output
kernel instead of the vocabulary), and masks each row to its own candidates before the
softmax, so that a row's log-probabilities, hence its translation and score, are those it
has alone (batch invariance). The union is sorted by id, so the special ids (0 to 3) keep
their positions: the search runs in candidate indices, with PAD, BOS and EOS as themselves,
and `BatchCandidates.ids` maps its output back to vocabulary ids.

    table = ShortlistTable.load(Path("runs/demo/vocab/shortlist.npz"))
    shortlist = table.select(k=50, n=100)  # int32 arrays; Shortlist(*map(tf.constant, ...))
    batch = batch_candidates(shortlist, source_ids, vocab_size)  # ids [U], rows [batch, U]
    kernel = tf.gather(model.embedding.output_kernel(), batch.ids, axis=1)  # [d_model, U]

Example:
    batch = batch_candidates(Shortlist(tf.constant(table), tf.constant(always)),
                             tf.constant([[57, 3, 0]]), vocab_size=8000)
    batch.ids  # int32 [U]: 0, 1, 2, 3, ..., ascending
    batch.rows  # bool [1, U]: the row's own candidates
"""
from __future__ import annotations

import dataclasses
import io
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from keras_transformer.tokenizer import PAD_ID

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
        return Shortlist(np.ascontiguousarray(self.candidates[:, :k], np.int32), always)

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
    """What a search reads (numpy arrays or tensors): table int32 [vocab, k], each source
    piece's candidates (PAD where fewer); always int32 [a], every sentence's."""
    table: tf.Tensor
    always: tf.Tensor


class BatchCandidates(NamedTuple):
    """A batch's candidates: ids int32 [U], ascending (the union of its rows'; the special
    ids first, at their own positions), rows bool [batch, U] (each row's own)."""
    ids: tf.Tensor
    rows: tf.Tensor


def batch_candidates(shortlist: Shortlist, source_ids: tf.Tensor, vocab_size: int,
                     forced_ids: tf.Tensor | None = None, size: tf.Tensor | None = None
                     ) -> BatchCandidates:
    """Graph code: the candidates of a batch of sources int32 [batch, source] (pieces, EOS,
    PAD), with each row's `forced_ids` int32 [batch, m] (pieces it must be able to produce,
    then PAD). `size` (XLA's fixed shapes): ids padded to exactly `size` with PAD, padding
    in no row (`size` at least the union's; `fixed_size` gives a bound)."""
    source_ids = tf.cast(source_ids, tf.int32)
    batch = tf.shape(source_ids)[0]
    table = tf.convert_to_tensor(shortlist.table, tf.int32)
    always = tf.convert_to_tensor(shortlist.always, tf.int32)
    pieces = [tf.reshape(tf.gather(table, source_ids), [batch, -1]),  # [batch, source * k]
              source_ids]
    if forced_ids is not None:
        pieces.append(tf.reshape(tf.cast(forced_ids, tf.int32), [batch, -1]))
    ids = tf.concat(pieces, axis=1)  # [batch, m]
    row = tf.broadcast_to(tf.range(batch)[:, None], tf.shape(ids))  # [batch, m]
    hits = tf.scatter_nd(tf.reshape(tf.stack([row, ids], axis=2), [-1, 2]),
                         tf.ones([tf.size(ids)], tf.int32), [batch, vocab_size])
    allowed = tf.scatter_nd(always[:, None], tf.ones_like(always), [vocab_size]) > 0  # [vocab]
    member = (hits > 0) | allowed[None]  # [batch, vocab]
    union = tf.reduce_any(member, axis=0) | allowed  # [vocab]
    if size is None:
        candidate_ids = tf.cast(tf.where(union)[:, 0], tf.int32)  # [U], ascending
        return BatchCandidates(candidate_ids, tf.gather(member, candidate_ids, axis=1))
    keys = tf.where(union, vocab_size - tf.range(vocab_size), -1)  # [vocab]: low ids high
    top = tf.math.top_k(keys, k=size).values  # [size]: the union ascending, then -1
    real = top >= 0  # [size]
    candidate_ids = tf.where(real, vocab_size - top, PAD_ID)  # [size]
    return BatchCandidates(candidate_ids,
                           tf.gather(member, candidate_ids, axis=1) & real[None])


def fixed_size(table_width: int, always: int, batch: tf.Tensor | int,
               source: tf.Tensor | int, forced: int, vocab_size: int) -> tf.Tensor:
    """A bound on the union of `batch_candidates` (int32 []) from shapes only, so that XLA
    knows it when it compiles: every row's table rows, source pieces and forced pieces, with
    the pieces always allowed (at most the vocabulary)."""
    return tf.minimum(vocab_size, batch * (source * (table_width + 1) + forced) + always)


def to_candidate_index(ids: tf.Tensor, candidate_ids: tf.Tensor, vocab_size: int) -> tf.Tensor:
    """Graph code: vocabulary ids (any shape, each among `candidate_ids` int32 [U]) -> their
    indices in it; PAD stays 0 (PAD is candidate 0)."""
    positions = tf.range(tf.shape(candidate_ids)[0])  # [U]
    first = (positions == 0) | (candidate_ids != PAD_ID)  # [U]: XLA's PAD padding is not
    inverse = tf.scatter_nd(candidate_ids[:, None], tf.where(first, positions, 0),
                            [vocab_size])  # [vocab]
    return tf.gather(inverse, tf.cast(ids, tf.int32))
