"""Terminology constraints measured: a glossary built from a run's test split, the split
translated through the SavedModel with it (`translate_terms`) and without (`serving_default`),
and for both the term use rate (goal 100%), BLEU and the time taken.

    .venv/bin/python bench/terminology.py [CONFIG] [--split test] [--lines N]
        [--min-count 3] [--min-dice 0.6] [--batch-size 32] [--glossary-out FILE]
        [--source FILE --reference FILE]

The glossary: word pairs of the split whose source word and reference word co-occur. Words are
\\w+ runs, case kept; for each source word of at least 4 characters found in at least
--min-count source lines, the reference word (of at least 4 characters) with the highest Dice
coefficient 2 * lines(both) / (lines(source word) + lines(reference word)), kept if it
reaches --min-dice. Taken from the references themselves, the glossary is an oracle: the
figures measure that the terms are used and what forcing them costs or gives in BLEU, not what
a customer's glossary would give. A term is used when the translation holds it as a whole word.
The export: runs/NAME/export (its newest SavedModel version).
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time
from pathlib import Path

WORD = re.compile(r"\w+")


def build_glossary(pairs: list[tuple[str, str]], min_count: int,
                   min_dice: float) -> dict[str, str]:
    """Source word -> reference word, by Dice coefficient over the lines (module docstring)."""
    source_lines, target_lines = collections.Counter(), collections.Counter()
    both = collections.Counter()
    for source, target in pairs:
        source_words = {w for w in WORD.findall(source) if len(w) >= 4}
        target_words = {w for w in WORD.findall(target) if len(w) >= 4}
        source_lines.update(source_words)
        target_lines.update(target_words)
        both.update((s, t) for s in source_words for t in target_words)
    best: dict[str, tuple[float, str]] = {}
    for (source, target), count in both.items():
        if source_lines[source] < min_count:
            continue
        dice = 2 * count / (source_lines[source] + target_lines[target])
        if dice >= min_dice and (dice, target) > best.get(source, (0.0, "")):
            best[source] = (dice, target)
    return {source: target for source, (_, target) in sorted(best.items())}


def term_use(translations: list[str], terms: list[list[str]]) -> tuple[int, int]:
    """(terms used as whole words in their line's translation, terms asked for)."""
    used = sum(bool(re.search(rf"(?<!\w){re.escape(term)}(?!\w)", translation))
               for translation, line_terms in zip(translations, terms) for term in line_terms)
    return used, sum(map(len, terms))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", default="demo")
    parser.add_argument("--split", default="test")
    parser.add_argument("--source", help="source lines instead of the split's")
    parser.add_argument("--reference", help="their references (with --source)")
    parser.add_argument("--lines", type=int, help="the first N lines only")
    parser.add_argument("--min-count", type=int, default=3)
    parser.add_argument("--min-dice", type=float, default=0.6)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--glossary-out", help="write the glossary built (TSV) to this file")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import sacrebleu

    from export.glossary import Glossary
    from export.loading import open_saved_model, resolve_export
    from export.translator.terms import termed_in_batches
    from pipelines.config import load_config
    from pipelines.paths import RunPaths

    paths = RunPaths(load_config(args.config).run_path)
    source, reference = ((Path(args.source), Path(args.reference)) if args.source
                         else paths.split(args.split))
    with open(source, encoding="utf-8") as sources, open(reference, encoding="utf-8") as refs:
        pairs = [(s.rstrip("\n"), r.rstrip("\n")) for s, r in zip(sources, refs)]
    pairs = pairs[:args.lines]
    glossary = Glossary(build_glossary(pairs, args.min_count, args.min_dice))
    if args.glossary_out:
        Path(args.glossary_out).write_text("".join(f"{s}\t{t}\n" for s, t in
                                                   glossary.entries.items()), encoding="utf-8")
    lines, references = [s for s, _ in pairs], [r for _, r in pairs]
    terms = [glossary.target_terms(line) for line in lines]
    translator = open_saved_model(resolve_export(paths.export, "tf")[1])
    print(f"{len(lines)} lines of {source}, {translator.version_dir}; glossary of "
          f"{len(glossary.entries)} entries, {sum(map(len, terms))} terms in "
          f"{sum(map(bool, terms))} lines\n{'search':<14}{'term use':>10}{'BLEU':>8}"
          f"{'seconds':>9}")
    start = time.perf_counter()
    plain = translator.translate_lines(lines, args.batch_size)
    runs = [("unconstrained", plain, time.perf_counter() - start)]
    start = time.perf_counter()
    termed = termed_in_batches(translator.translate_terms, lines, terms, args.batch_size)
    runs.append(("glossary", [result.translation for result in termed],
                 time.perf_counter() - start))
    for name, translations, seconds in runs:
        used, asked = term_use(translations, terms)
        bleu = sacrebleu.corpus_bleu(translations, [references]).score
        print(f"{name:<14}{100 * used / max(asked, 1):>9.1f}%{bleu:>8.2f}{seconds:>9.1f}")
    unfit = sum(not result.terms_fit for result in termed)
    missing = sum(not all(result.term_found) for result in termed)
    print(f"lines whose terms did not fit: {unfit}; lines missing a term: {missing}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
