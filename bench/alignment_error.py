"""The alignment error rate (AER, Och & Ney 2003) of exported models' word alignments on a
hand-checked gold set, and of eflomal's as a reference point.

    .venv/bin/python bench/alignment_error.py EXPORT_OR_RUN_DIR [...]
        [--gold bench/data/alignment_gold.en-fr.tsv] [--eflomal PREPARED_RUN_DIR]

Each model aligns the gold pairs as given (its source, the gold's reference translation), a
teacher-forced pass through the SavedModel's `align` signature (the layer, heads and word rule
of `translate_aligned`, which `translate --alignments` calls, over a given translation). With --eflomal, the gold pairs are appended to that run's train pairs
(data/train-*.src / .tgt) and aligned by eflomal, symmetrized, as `prepare` aligns
(`pipelines.corpus.alignments`); the gold pairs come from the test split, so they are not
in train.

The gold file (bench/data/alignment_gold.en-fr.tsv, docs/alignments.md, "Alignment error rate"): a line per
pair, `LINE<TAB>SURE<TAB>POSSIBLE<TAB>SOURCE<TAB>TARGET`, links `I-J` (source word I, target
word J, whitespace words from 0); the possible links P are SURE and POSSIBLE together.
AER = 1 - (|A & S| + |A & P|) / (|A| + |S|), summed over the set.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

GOLD = Path(__file__).with_name("data") / "alignment_gold.en-fr.tsv"
Links = set[tuple[int, int]]


class GoldError(ValueError):
    """A gold file line that cannot be read: FILE:LINE: field: problem, got VALUE."""


@dataclasses.dataclass(frozen=True)
class GoldPair:
    """A hand-aligned pair: sure links S, possible links P (S included), whitespace words."""

    line: int  # the pair's line in the split
    sure: Links
    possible: Links
    source: str
    target: str


def parse_links(text: str, where: str, field: str, sizes: tuple[int, int]) -> Links:
    """The `I-J ...` links of a gold field, each inside the pair's word counts `sizes`.

    Raises:
        GoldError: an item that is not I-J, or a word index past its side.
    """
    links = set()
    for item in text.split():
        source, dash, target = item.partition("-")
        if not (dash and source.isdigit() and target.isdigit()):
            raise GoldError(f"{where}: {field}: not SOURCE-TARGET word indices, got {item!r}")
        link = (int(source), int(target))
        if link[0] >= sizes[0] or link[1] >= sizes[1]:
            raise GoldError(f"{where}: {field}: a word past the pair's {sizes[0]} source / "
                            f"{sizes[1]} target words, got {item!r}")
        links.add(link)
    return links


def read_gold(path: Path) -> list[GoldPair]:
    """The gold pairs of `path` (comment lines start with #).

    Raises:
        GoldError: FILE:LINE: field: problem for the first bad line.
    """
    pairs = []
    for number, row in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not row.strip() or row.startswith("#"):
            continue
        where = f"{path}:{number}"
        fields = row.split("\t")
        if len(fields) != 5:
            raise GoldError(f"{where}: expected 5 tab-separated fields (line, sure, possible, "
                            f"source, target), got {len(fields)}")
        line, sure, possible, source, target = fields
        if not line.isdigit():
            raise GoldError(f"{where}: line: not a line number, got {line!r}")
        sizes = (len(source.split()), len(target.split()))
        sure_links = parse_links(sure, where, "sure", sizes)
        pairs.append(GoldPair(int(line), sure_links,
                              sure_links | parse_links(possible, where, "possible", sizes),
                              source, target))
    return pairs


def alignment_error_rate(predicted: list[Links], gold: list[GoldPair]) -> float:
    """1 - (|A & S| + |A & P|) / (|A| + |S|), each term summed over the pairs."""
    hits = sum(len(a & g.sure) + len(a & g.possible) for a, g in zip(predicted, gold, strict=True))
    total = sum(len(a) + len(g.sure) for a, g in zip(predicted, gold, strict=True))
    return 1.0 - hits / total if total else 0.0


def model_links(export: Path, gold: list[GoldPair]) -> list[Links]:
    """The export's word alignments of the gold pairs, through the `align` signature."""
    from export.loading import open_translator
    from export.translator.align import aligned_in_batches
    from export.word_alignment import parse_alignment

    translator = open_translator(export, "tf")
    aligned = aligned_in_batches(translator.loaded.signatures["align"],
                                 [pair.target for pair in gold],
                                 [pair.source for pair in gold], batch_size=32)
    return [set(parse_alignment(text)) for _, text in aligned]


def eflomal_links(run_dir: Path, gold: list[GoldPair]) -> list[Links]:
    """eflomal's symmetrized alignments of the gold pairs, aligned with the run's train pairs
    (words: SentencePiece's, checked to be the gold's whitespace words)."""
    import sentencepiece as spm

    from pipelines.corpus.alignments import eflomal_alignments, line_words, read_split_lines
    from pipelines.paths import RunPaths

    paths = RunPaths(run_dir)
    processor = spm.SentencePieceProcessor(model_file=str(paths.spm_model))
    sources, targets = [], []
    for source_file, target_file in paths.train_shards():
        sources += line_words(processor, read_split_lines(source_file))
        targets += line_words(processor, read_split_lines(target_file))
    for side, words in ((0, sources), (1, targets)):
        texts = [(pair.source, pair.target)[side] for pair in gold]
        for pair, text, split in zip(gold, texts, line_words(processor, texts)):
            if len(split) != len(text.split()):
                raise SystemExit(f"gold line {pair.line}: SentencePiece's words differ from the "
                                 f"whitespace words of {text!r}")
            words.append(split)
    return [set(links) for links in eflomal_alignments(sources, targets)[-len(gold):]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exports", nargs="*", type=Path, help="export or run directories")
    parser.add_argument("--gold", type=Path, default=GOLD)
    parser.add_argument("--eflomal", type=Path, metavar="RUN_DIR",
                        help="a prepared run whose train pairs eflomal aligns with the gold's")
    args = parser.parse_args()
    try:
        gold = read_gold(args.gold)
    except (GoldError, OSError) as error:
        sys.exit(f"alignment_error: {error}")
    links = sum(len(pair.sure) for pair in gold), sum(len(pair.possible) for pair in gold)
    print(f"gold: {args.gold}: {len(gold)} pairs, {links[0]} sure links, {links[1]} possible "
          f"(sure included)")
    rows = [(str(path), lambda path=path: model_links(path, gold)) for path in args.exports]
    if args.eflomal:
        rows.append((f"eflomal (with {args.eflomal}'s train pairs)",
                     lambda: eflomal_links(args.eflomal, gold)))
    for name, align in rows:
        start = time.monotonic()
        predicted = align()
        print(f"{name}: AER {100 * alignment_error_rate(predicted, gold):.1f}% "
              f"({sum(map(len, predicted))} links, {time.monotonic() - start:.1f} s)")


if __name__ == "__main__":
    main()
