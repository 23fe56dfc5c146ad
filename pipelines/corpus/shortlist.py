"""The lexical shortlist's table from the train pairs (prepare writes vocab/shortlist.npz; its
form: `keras_transformer.shortlist_table`, its use in the search: `keras_transformer.shortlist`).

Counted over the SentencePiece pieces of at most MAX_PAIRS train pairs (every pair of the
shards up to that, else every (pairs / MAX_PAIRS, rounded up)-th, so that every corpus and
every part of one counts), CHUNK_PAIRS at a time with numpy (sparse (source, target) counts as sorted int64 keys, merged
chunk by chunk; no Python per piece pair):
* with word alignments (`data.alignments`): each link pairs every piece of its source word
  with every piece of its target word, and a source piece's candidates are ranked by
  p(t | s), the share of its links to t (Bergamot's extract_lex, by pieces);
* without: a pair counts each (source piece, target piece) of its sides once, and the
  candidates are ranked by the Dice coefficient 2 c(s, t) / (c(s) + c(t)), which, unlike
  p(t | s), does not rank the most frequent target pieces first (those are among the n
  frequent pieces anyway).
Ties go to the lower id; the target pieces are ranked by their count in the targets.

Example:
    table = shortlist_table(sources, targets, alignments=None, model_proto=proto)
    table.candidates[piece_id, :5]  # int32: the five best target pieces of a source piece
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import sentencepiece as spm

from export.word_alignment import parse_alignment
from keras_transformer.shortlist_table import STORED_PER_PIECE, ShortlistTable
from keras_transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, user_symbols
from keras_transformer.words import vocabulary_word_marks, word_groups
from pipelines.corpus.alignments import ALIGN_SUFFIX, ENCODE_BATCH

MAX_PAIRS = 2_000_000  # train pairs counted at most (a systematic sample of more)
CHUNK_PAIRS = 20_000  # pairs counted at once


class PairCounts:
    """Sparse counts of (source piece, target piece): sorted int64 keys s * vocab + t."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.keys = np.zeros([0], np.int64)
        self.counts = np.zeros([0], np.int64)

    def add(self, source: np.ndarray, target: np.ndarray) -> None:
        """Counts each (source[i], target[i]) once (int arrays of one length)."""
        keys, counts = np.unique(source.astype(np.int64) * self.vocab_size + target,
                                 return_counts=True)
        merged, inverse = np.unique(np.concatenate([self.keys, keys]), return_inverse=True)
        self.counts = np.bincount(inverse, np.concatenate([self.counts, counts]),
                                  minlength=len(merged)).astype(np.int64)
        self.keys = merged


def shortlist_table(sources: Iterable[str], targets: Iterable[str],
                    alignments: Iterable[str] | None, model_proto: bytes) -> ShortlistTable:
    """The table of the pairs (`sources`, `targets`, and their `I-J ...` word alignments or
    None), at most MAX_PAIRS of them."""
    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    vocab = processor.get_piece_size()
    marks = vocabulary_word_marks(model_proto)  # int32 [vocab]
    pair_counts = PairCounts(vocab)
    target_counts = np.zeros([vocab], np.int64)  # occurrences in the targets
    lines: Iterator = zip(sources, targets, itertools.repeat("") if alignments is None
                          else alignments)
    pairs = 0
    for chunk in _chunks(itertools.islice(lines, MAX_PAIRS)):
        src_text, tgt_text, links = zip(*chunk)
        src, tgt = _Pieces(processor, src_text), _Pieces(processor, tgt_text)
        target_counts += np.bincount(tgt.ids, minlength=vocab)
        if alignments is None:
            pair_counts.add(*_cooccurring(src.unique(), tgt.unique()))
        else:
            pair_counts.add(*_linked(src, tgt, links, marks))
        pairs += len(chunk)
    source, target = pair_counts.keys // vocab, pair_counts.keys % vocab  # [keys]
    score = pair_counts.counts.astype(np.float64)  # p(t | s) ranks as c(s, t) for one s
    if alignments is None:  # Dice: 2 c(s, t) / (c(s) + c(t)), pairs counted once
        source_pairs = np.bincount(source, pair_counts.counts, minlength=vocab)
        target_pairs = np.bincount(target, pair_counts.counts, minlength=vocab)
        score = 2 * score / (source_pairs[source] + target_pairs[target])
    order = np.lexsort((target, -score, source))  # by source, best first, lower id first
    source, target = source[order], target[order]
    first = np.searchsorted(source, source)  # [keys]: where its source's run starts
    rank = np.arange(len(source)) - first
    kept = rank < STORED_PER_PIECE
    candidates = np.full([vocab, STORED_PER_PIECE], PAD_ID, np.int32)
    candidates[source[kept], rank[kept]] = target[kept]
    return ShortlistTable(candidates,
                          np.lexsort((np.arange(vocab), -target_counts)).astype(np.int32),
                          always_allowed(model_proto),
                          "co-occurrence" if alignments is None else "alignments", pairs)


def always_allowed(model_proto: bytes) -> np.ndarray:
    """The pieces a table allows every sentence (int32, sorted): PAD, UNK, BOS, EOS and the
    SentencePiece model's user symbols (language tokens, corpus tags)."""
    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    always = [PAD_ID, UNK_ID, BOS_ID, EOS_ID] + [processor.piece_to_id(symbol)
                                                 for symbol in user_symbols(model_proto)]
    return np.unique(np.array(always, np.int32))


def write_shortlist(directory: Path, shard_names: Sequence[str], model_proto: bytes,
                    aligned: bool, path: Path, pairs: int,
                    report: Callable[[str], None] = lambda _: None) -> ShortlistTable:
    """Counts the shards `directory`/NAME.src / .tgt (and .align when `aligned`) of `pairs`
    train pairs in all, every one or a systematic sample of MAX_PAIRS, and saves their table
    at `path`."""
    stride = -(-pairs // MAX_PAIRS)  # 1 up to MAX_PAIRS pairs

    def lines(suffix: str) -> Iterator[str]:
        def every_line() -> Iterator[str]:
            for name in shard_names:
                with open(directory / f"{name}{suffix}", encoding="utf-8",
                          newline="\n") as file:
                    yield from (line.rstrip("\n") for line in file)

        return itertools.islice(every_line(), 0, None, max(1, stride))

    report(f"counting the shortlist's candidates ({'word alignments' if aligned else 'co-occurrence'}) "
           f"over {min(pairs, MAX_PAIRS):,} of the {pairs:,} train pairs")
    table = shortlist_table(lines(".src"), lines(".tgt"),
                            lines(ALIGN_SUFFIX) if aligned else None, model_proto)
    table.save(path)
    return table


class _Pieces:
    """A chunk's lines as pieces: ids int64 [pieces], line int64 [pieces] (each piece's)."""

    def __init__(self, processor: spm.SentencePieceProcessor, lines: Sequence[str]) -> None:
        encoded = [ids for start in range(0, len(lines), ENCODE_BATCH)
                   for ids in processor.encode(list(lines[start:start + ENCODE_BATCH]))]
        self.lines = len(lines)
        lengths = np.array([len(ids) for ids in encoded], np.int64)
        self.ids = np.fromiter(itertools.chain.from_iterable(encoded), np.int64,
                               int(lengths.sum()))
        self.line = np.repeat(np.arange(len(lines)), lengths)

    def unique(self) -> tuple[np.ndarray, np.ndarray]:
        """(line, id) of each distinct piece of each line, sorted by line."""
        width = int(self.ids.max(initial=0)) + 1
        keys = np.unique(self.line * width + self.ids)
        return keys // width, keys % width

    def words(self, marks: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(the pieces in a word [kept], ascending; their word [kept], ascending, counted over
        the chunk; each line's first word [lines]; words per line [lines]): words as
        `keras_transformer.words.word_groups` counts them (`marks`: int32 [vocab])."""
        line_starts = np.ones(len(self.ids), bool)  # [pieces]
        line_starts[1:] = self.line[1:] != self.line[:-1]
        group = word_groups(marks[self.ids], line_starts)  # [pieces], -1: whitespace alone
        kept = np.flatnonzero(group >= 0)  # [kept]
        word_line = np.zeros([int(group.max(initial=-1)) + 1], np.int64)  # [words]
        word_line[group[kept]] = self.line[kept]
        words = np.bincount(word_line, minlength=self.lines)  # [lines]
        return kept, group[kept], np.cumsum(words) - words, words


def _chunks(lines: Iterator) -> Iterator[list]:
    while chunk := list(itertools.islice(lines, CHUNK_PAIRS)):
        yield chunk


def _cross(a_group: np.ndarray, b_group: np.ndarray, groups: int
           ) -> tuple[np.ndarray, np.ndarray]:
    """Every (a, b) of one group: a_group int [A] (any order), b_group int [B] ascending ->
    (index into a, index into b), each int64 [pairs]."""
    b_count = np.bincount(b_group, minlength=groups)  # [groups]
    b_start = np.cumsum(b_count) - b_count
    repeats = b_count[a_group]  # [A]
    a_index = np.repeat(np.arange(len(a_group)), repeats)  # [pairs]
    within = np.arange(len(a_index)) - np.repeat(np.cumsum(repeats) - repeats, repeats)
    return a_index, np.repeat(b_start[a_group], repeats) + within


def _cooccurring(source: tuple[np.ndarray, np.ndarray], target: tuple[np.ndarray, np.ndarray]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(source piece, target piece) of each pair of distinct pieces of a line's sides."""
    (source_line, source_ids), (target_line, target_ids) = source, target
    lines = int(max(source_line.max(initial=-1), target_line.max(initial=-1))) + 1
    a, b = _cross(source_line, target_line, lines)
    return source_ids[a], target_ids[b]


def _linked(source: _Pieces, target: _Pieces, links: Sequence[str], marks: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """(source piece, target piece) of every piece of each link's source word with every
    piece of its target word (links `I-J ...`, a line's); a link outside its line's words is
    ignored."""
    source_pieces, source_group, source_first, source_words = source.words(marks)
    target_pieces, target_group, target_first, target_words = target.words(marks)
    parsed = [parse_alignment(text) for text in links]
    line = np.repeat(np.arange(len(parsed)), [len(pairs) for pairs in parsed])  # [links]
    word = np.array(list(itertools.chain.from_iterable(parsed)), np.int64).reshape(-1, 2)
    inside = (word[:, 0] < source_words[line]) & (word[:, 1] < target_words[line])
    line, word = line[inside], word[inside]
    link, source_piece = _cross(source_first[line] + word[:, 0], source_group,
                                int(source_words.sum()))  # each link's source pieces
    row, target_piece = _cross((target_first[line] + word[:, 1])[link], target_group,
                               int(target_words.sum()))  # ... with its target pieces
    return (source.ids[source_pieces[source_piece[row]]],
            target.ids[target_pieces[target_piece]])
