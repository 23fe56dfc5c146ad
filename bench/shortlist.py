"""The lexical shortlist measured: BLEU of a run's test split translated with the whole
vocabulary and with shortlists of K candidates a source piece and the N most frequent target
pieces, and how many candidates a batch projects onto.

    .venv/bin/python bench/shortlist.py CONFIG [--k 10 25 50 100] [--n 0 50 100 200]
        [--split test] [--lines N] [--batch-size 32] [--table FILE]

CONFIG: a trained run's config (its averaged checkpoint, else the latest, as export reads it).
The table: the run's vocab/shortlist.npz, or --table, or else counted here from the run's train
shards as prepare counts it (word alignments when the run has them). Each line of output: K,
N, BLEU (sacrebleu, as `evaluate`), its difference from the whole vocabulary, and the mean
candidates U of a batch (in pieces and as a share of the vocabulary). The searches are the
Translator's (`evaluate`'s settings: beam, alpha, source limit), in batches of --batch-size
lines of similar lengths.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--k", type=int, nargs="+", default=[10, 25, 50, 100])
    parser.add_argument("--n", type=int, nargs="+", default=[0, 50, 100, 200])
    parser.add_argument("--split", default="test")
    parser.add_argument("--lines", type=int, help="the first N lines of the split")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--table", help="a shortlist table (default: the run's)")
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    from keras_transformer.shortlist import batch_candidates
    from keras_transformer.shortlist_table import ShortlistTable
    from pipelines import InputError
    from pipelines.config import load_config
    from pipelines.corpus.shards import train_alignments, train_shards
    from pipelines.corpus.shortlist import write_shortlist
    from pipelines.evaluate import corpus_scores
    from pipelines.files import read_lines
    from pipelines.models import load_model_for_inference, run_translator
    from pipelines.paths import RunPaths

    config = load_config(Path(args.config))
    paths = RunPaths(config.run_path)
    table_path = Path(args.table) if args.table else paths.shortlist
    if not table_path.is_file():
        shards = train_shards(paths.data)
        try:
            aligned = bool(train_alignments(paths.data))
        except InputError:  # prepared without data.alignments
            aligned = False
        table_path = Path(tempfile.mkdtemp()) / "shortlist.npz"
        write_shortlist(paths.data, [src.name.removesuffix(".src") for src, _ in shards],
                        paths.spm_model.read_bytes(), aligned, table_path,
                        sum(len(read_lines(src)) for src, _ in shards), print)
    table = ShortlistTable.load(table_path)
    source_path, reference_path = paths.split(args.split)
    sources = read_lines(source_path, args.lines)
    references = read_lines(reference_path, args.lines)
    model, checkpoint = load_model_for_inference(config)
    vocab = model.model_config.vocab_size
    print(f"{checkpoint}: {len(sources)} {args.split} lines, table {table_path} "
          f"({table.statistic} of {table.pairs:,} pairs), vocabulary {vocab}, "
          f"batches of {args.batch_size}")

    def bleu(shortlist) -> float:
        translator = run_translator(config, model, shortlist=shortlist)
        hypotheses = translator.translate_lines(sources, batch_size=args.batch_size)
        return float(corpus_scores(hypotheses, references)["bleu"])

    def mean_candidates(shortlist) -> float:
        translator = run_translator(config, model)
        sizes = []
        for start in range(0, len(sources), args.batch_size):
            ids = translator.encode(tf.constant(sources[start:start + args.batch_size]))
            sizes.append(int(tf.shape(batch_candidates(shortlist, ids, vocab).ids)[0]))
        return float(np.mean(sizes))

    full = bleu(None)
    print(f"{'K':>4} {'N':>4} {'BLEU':>6} {'diff':>6} {'U':>7} {'U/vocab':>8}")
    print(f"{'-':>4} {'-':>4} {full:6.2f} {0:6.2f} {vocab:7d} {1:8.1%}")
    for k in args.k:
        for n in args.n:
            shortlist = table.select(k, n)
            score = bleu(shortlist)
            size = mean_candidates(shortlist)
            print(f"{k:4d} {n:4d} {score:6.2f} {score - full:+6.2f} {size:7.0f} "
                  f"{size / vocab:8.1%}", flush=True)


if __name__ == "__main__":
    main()
