"""Word alignments of the train pairs for guided-alignment training (`data.alignments`): each
shard's `.align` file, `I-J ...` a line (source word I, target word J, from 0), by line with
the shard's pairs.

Words are counted from SentencePiece's pieces as `keras_transformer.words` says (the graph's
`keras_transformer.alignment.piece_words` counts them alike), so a link always names the
pieces training supervises; on text that SentencePiece's normalization leaves alone, these are
its whitespace-separated words. The aligner sees each word as its pieces joined without the
boundary mark.

eflomal (Östling & Tiedemann 2017, the `eflomal` package) aligns both directions; the two are
symmetrized with grow-diag-final-and (Koehn et al. 2005), as the alignments Garg et al. 2019
train on; its model 3 (fertility) with iterations by corpus size (its defaults), two samplers.

Example:
    alignments = eflomal_alignments([["Au", "commencement"]], [["In", "the", "beginning"]])
    format_alignment(alignments[0])  # e.g. "0-0 0-1 1-2"
"""
from __future__ import annotations

import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Sequence

import sentencepiece as spm

from export.word_alignment import Alignment, format_alignment, parse_alignment
from keras_transformer.words import WORD_BOUNDARY, piece_words
from pipelines import InputError

Words = list[str]
NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))
ALIGN_SUFFIX = ".align"
ENCODE_BATCH = 4096  # lines a SentencePiece call encodes
# eflomal's independent samplers (threads), one per core of the 2-core machines this project
# runs on (the error rate and time per count of samplers: docs/alignments.md, "Alignment error
# rate").
EFLOMAL_SAMPLERS = 2


def line_words(processor: spm.SentencePieceProcessor, lines: Sequence[str]) -> list[Words]:
    """The words of each line as `keras_transformer.words` counts them, each as its pieces
    joined without the word-boundary mark. Lines are encoded ENCODE_BATCH at a time by
    SentencePiece's threads."""
    result = []
    for start in range(0, len(lines), ENCODE_BATCH):
        for pieces in processor.encode(list(lines[start:start + ENCODE_BATCH]), out_type=str):
            words: list[str] = []
            for piece, word in zip(pieces, piece_words(pieces)):
                if word == len(words):
                    words.append(piece.replace(WORD_BOUNDARY, ""))
                elif word >= 0:
                    words[-1] += piece
            result.append(words)
    return result


def grow_diag_final_and(forward: set[tuple[int, int]], reverse: set[tuple[int, int]]
                        ) -> Alignment:
    """The symmetrized links of two directional alignments (source word, target word): their
    intersection grown by neighbouring links of the union that align a so far unaligned word,
    then links of either direction between two unaligned words. Sorted by target word."""
    links = forward & reverse
    union = forward | reverse
    sources, targets = {i for i, _ in links}, {j for _, j in links}
    grown = True
    while grown:
        grown = False
        for i, j in sorted(links):
            for di, dj in NEIGHBOURS:
                link = (i + di, j + dj)
                if link in union and link not in links and (
                        link[0] not in sources or link[1] not in targets):
                    links.add(link)
                    sources.add(link[0])
                    targets.add(link[1])
                    grown = True
    for direction in (forward, reverse):
        for i, j in sorted(direction):
            if i not in sources and j not in targets:
                links.add((i, j))
                sources.add(i)
                targets.add(j)
    return sorted(links, key=lambda link: (link[1], link[0]))


def eflomal_alignments(sources: Sequence[Words], targets: Sequence[Words]) -> list[Alignment]:
    """Symmetrized eflomal alignments of word-split pairs (no side empty), in order.

    Raises:
        InputError: the eflomal package is missing (`data.alignments: eflomal`), or its
            binary was built for another CPU.
    """
    try:
        import eflomal
    except ImportError as error:
        raise InputError(f"data.alignments: eflomal: the package does not import ({error}); "
                         f"`make setup` installs it (setup.py pins it)") from None
    with tempfile.TemporaryDirectory(prefix="eflomal-") as work:
        forward, reverse = Path(work) / "forward", Path(work) / "reverse"
        try:
            eflomal.Aligner(n_samplers=EFLOMAL_SAMPLERS).align(
                [" ".join(words) + "\n" for words in sources],
                [" ".join(words) + "\n" for words in targets],
                links_filename_fwd=str(forward), links_filename_rev=str(reverse))
        except subprocess.CalledProcessError as error:
            if error.returncode != -signal.SIGILL:
                raise
            raise InputError(
                f"data.alignments: eflomal: its binary {error.cmd[0]} uses instructions this "
                f"CPU lacks (SIGILL: built with -march=native on another machine); rebuild "
                f"it here with `rm -rf .venv && make setup` (the Makefile builds it for any "
                f"x86-64-v2 CPU)") from None
        pairs = zip(_read_links(forward), _read_links(reverse), strict=True)
        return [grow_diag_final_and(set(fwd), set(rev)) for fwd, rev in pairs]


def write_alignments(directory: Path, shard_names: Sequence[str], model_proto: bytes,
                     report: Callable[[str], None] = lambda _: None) -> None:
    """Aligns the train pairs of the shards `directory`/NAME.src / .tgt (all of them at once)
    and writes each shard's NAME.align."""
    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    sources: list[Words] = []
    targets: list[Words] = []
    counts = []
    for name in shard_names:
        for side, words in (("src", sources), ("tgt", targets)):
            words.extend(line_words(processor, read_split_lines(directory / f"{name}.{side}")))
        counts.append(len(sources) - sum(counts))
    report(f"aligning the words of {len(sources):,} train pairs with eflomal")
    alignments = eflomal_alignments(sources, targets)
    start = 0
    for name, count in zip(shard_names, counts):
        path = directory / f"{name}{ALIGN_SUFFIX}"
        with open(path, "w", encoding="utf-8", newline="\n") as file:
            file.writelines(format_alignment(links) + "\n"
                            for links in alignments[start:start + count])
        start += count


def read_split_lines(path: Path) -> list[str]:
    """The lines of a split file as the data pipeline reads them: split at "\n" alone."""
    with open(path, encoding="utf-8", newline="\n") as file:
        lines = file.read().split("\n")
    return lines[:-1] if lines and not lines[-1] else lines


def _read_links(path: Path) -> list[Alignment]:
    """The `I-J ...` lines of an eflomal links file."""
    with open(path, encoding="utf-8") as file:
        return [parse_alignment(line) for line in file]
