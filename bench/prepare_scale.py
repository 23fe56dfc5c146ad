"""The prepare stage at scale: wall time, pairs/s and peak memory of `keras-transformer prepare`
on an N-pair corpus, then the training input pipeline's speed on the prepared run.

    .venv/bin/python bench/prepare_scale.py [--pairs N] [--workdir DIR] [--batches N]
                                            [--skip-pipeline] [--language-id on|off|auto]

The corpus (default 1M pairs; `--pairs 36000000` is WMT14 en-fr's size, about 12 GB) is built
deterministically from the embedded en-fr Bible (`pipelines.corpus.bible.bible_pairs`), keeping the
verse pairs whose English and French are each unique and that prepare's length-ratio filter
keeps: pair i is verse a, a space and verse b on both sides, with a = perm_a[i mod V] over all
V verses and b = perm_b[(i div V + i mod V) mod S] over the S shortest, so (a, b) differs for
every i < V * S (no duplicate pair, no side shared with another pair) and a side has about
TARGET_BYTES (185) bytes, as in WMT14 en-fr (the Bible's short words make that about 42 source
/ 44 target pieces of 37k BPE, where WMT14 en-fr has about 34 / 36). It is
written to DIR/corpus.{en,fr} (default DIR /tmp/prepare_scale) in chunks, and reused while
DIR/corpus.json records the same N and the files' sizes, so reruns only time prepare.

Prepare runs as a child process (`keras-transformer prepare DIR/scale.yaml`: source `files`
declared English to French, 37,000 shared BPE pieces, max_length 256, batch_tokens 25,000, 3,000
held-out pairs per split; `--language-id` sets `data.language_id`, whose default checks both
sides) into a fresh DIR/runs/scale, its progress and summary on stdout. Then, in this process, the
training input pipeline (`pipelines.training.data.make_dataset` on the train shards, as the trainer
reads them: shuffle buffer 100,000, repeated) with `parallel_calls` 1 and 2: seconds to the
first batch (its shuffle buffer filled), then target tokens/s (non-PAD) and batches/s over
`--batches` further batches.

Printed last, one table: the CPU (/proc/cpuinfo's model name, cores), pairs, corpus GB, the
prepare child's wall time (s, min; its few seconds of start-up included), pairs/s and peak RSS
(getrusage), and a line per `parallel_calls` of the input pipeline.
"""
from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from pipelines.corpus.bible import bible_pairs
from pipelines.config import DataConfig, load_config
from pipelines.corpus.splitting import rejection

TARGET_BYTES = 185  # mean UTF-8 bytes of a side
SEED = 1
CHUNK = 1 << 17  # pairs built and written at once
BATCH_TOKENS, MAX_LENGTH, SHUFFLE_BUFFER = 25_000, 256, 100_000
PARALLEL_CALLS = (1, 2)
Verse = tuple[bytes, bytes]  # (English, French), UTF-8


def verse_pairs() -> list[Verse]:
    """The aligned en-fr verses whose sides are each unique and whose pair prepare keeps."""
    verses: list[Verse] = []
    seen: tuple[set[str], set[str]] = (set(), set())
    for src, tgt, *_ in bible_pairs("bible:en-fr", 1, collections.Counter()):
        if src in seen[0] or tgt in seen[1] or rejection(src, tgt, DataConfig.max_length_ratio):
            continue
        seen[0].add(src)
        seen[1].add(tgt)
        verses.append((src.encode(), tgt.encode()))
    return verses


def shortest(verses: list[Verse], target_bytes: float) -> list[Verse]:
    """The most of the shortest verses whose mean length, added to the mean verse's and a
    space, stays within `target_bytes` (lengths: the mean of both sides in bytes)."""
    lengths = np.array([(len(en) + len(fr)) / 2 for en, fr in verses])  # [V]
    order = np.argsort(lengths, kind="stable")
    means = np.cumsum(lengths[order]) / np.arange(1, len(order) + 1)  # [V] ascending
    count = max(1, int(np.searchsorted(means, target_bytes - lengths.mean() - 1, "right")))
    return [verses[i] for i in order[:count]]


def write_corpus(pairs: int, src_path: Path, tgt_path: Path) -> None:
    """Writes pair i of the module docstring's construction as line i of both files."""
    firsts = verse_pairs()
    seconds = shortest(firsts, TARGET_BYTES)
    v, s = len(firsts), len(seconds)
    if pairs > v * s:
        raise SystemExit(f"--pairs: at most {v * s:,} distinct pairs, got {pairs:,}")
    rng = np.random.default_rng(SEED)
    order_a, order_b = rng.permutation(v), rng.permutation(s)
    heads = [[verse[side] for verse in firsts] for side in (0, 1)]
    tails = [[b" " + verse[side] + b"\n" for verse in seconds] for side in (0, 1)]
    with open(src_path, "wb") as src_file, open(tgt_path, "wb") as tgt_file:
        for start in range(0, pairs, CHUNK):
            quotient, rest = np.divmod(np.arange(start, min(start + CHUNK, pairs)), v)
            a, b = order_a[rest].tolist(), order_b[(quotient + rest) % s].tolist()
            for side, file in enumerate((src_file, tgt_file)):
                parts = zip(map(heads[side].__getitem__, a), map(tails[side].__getitem__, b))
                file.write(b"".join(itertools.chain.from_iterable(parts)))


def corpus(workdir: Path, pairs: int) -> tuple[Path, Path, bool]:
    """(corpus.en, corpus.fr, whether they were reused): written unless the stamp file
    records `pairs`, this construction's settings and the files' present sizes."""
    src, tgt, stamp = workdir / "corpus.en", workdir / "corpus.fr", workdir / "corpus.json"
    recipe = {"pairs": pairs, "target_bytes": TARGET_BYTES, "seed": SEED}
    try:
        sizes = [src.stat().st_size, tgt.stat().st_size]
        if json.loads(stamp.read_text()) == {**recipe, "bytes": sizes}:
            return src, tgt, True
    except (OSError, ValueError):
        pass
    stamp.unlink(missing_ok=True)
    write_corpus(pairs, src, tgt)
    sizes = [src.stat().st_size, tgt.stat().st_size]
    stamp.write_text(json.dumps({**recipe, "bytes": sizes}))
    return src, tgt, False


def write_config(workdir: Path, language_id: str | None) -> Path:
    """DIR/scale.yaml: the prepare settings of the module docstring on DIR/corpus.{en,fr}, with
    `language_id` (on, off, auto) as data.language_id unless None."""
    path = workdir / "scale.yaml"
    config = {"name": "scale", "run_dir": str(workdir / "runs" / "scale"),
              "data": {"source": "files", "train": {"src": "corpus.en", "tgt": "corpus.fr"},
                       "src_lang": "en", "tgt_lang": "fr",
                       "vocab_size": 37000, "vocab_type": "bpe", "max_length": MAX_LENGTH,
                       "holdout": 3000},
              "train": {"batch_tokens": BATCH_TOKENS}}
    if language_id is not None:
        config["data"]["language_id"] = {"on": True, "off": False}.get(language_id, language_id)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run_prepare(config_path: Path, run_dir: Path) -> tuple[float, float]:
    """Prepares the config in a child process after removing `run_dir`: (wall seconds, the
    child's peak RSS in GiB)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    started = time.monotonic()
    status = subprocess.run([sys.executable, "-m", "pipelines.cli", "prepare",
                             str(config_path)]).returncode
    seconds = time.monotonic() - started
    if status:
        raise SystemExit(f"prepare exited with status {status}")
    return seconds, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB


def time_pipeline(run_dir: Path, parallel: int, batches: int) -> tuple[float, float, float]:
    """The trainer's input pipeline with `parallel_calls=parallel`: (seconds to the first
    batch, target tokens/s and batches/s over the next `batches` batches)."""
    from keras_transformer.tokenizer import PAD_ID
    from pipelines.training.data import make_dataset
    from pipelines.paths import RunPaths

    started = time.monotonic()
    paths = RunPaths(run_dir)
    dataset = make_dataset(paths.train_shards(), paths.spm_model,
                           batch_tokens=BATCH_TOKENS, max_length=MAX_LENGTH,
                           shuffle_buffer=SHUFFLE_BUFFER, seed=SEED, repeat=True,
                           parallel_calls=parallel)
    iterator = iter(dataset)
    next(iterator)
    first = time.monotonic() - started
    started, tokens = time.monotonic(), 0
    for _ in range(batches):
        tokens += int(np.count_nonzero(next(iterator)["target_ids"].numpy() != PAD_ID))
    seconds = time.monotonic() - started
    return first, tokens / seconds, batches / seconds


def machine() -> str:
    """The CPU's model name and the cores this process may use."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as file:
            name = next((line.partition(":")[2].strip() for line in file
                         if line.startswith("model name")), "unknown CPU")
    except OSError:
        name = "unknown CPU"
    return f"{name}, {len(os.sched_getaffinity(0))} of {os.cpu_count()} cores usable"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=1_000_000, help="corpus pairs")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/prepare_scale"))
    parser.add_argument("--batches", type=int, default=200,
                        help="timed input pipeline batches per parallel_calls value")
    parser.add_argument("--skip-pipeline", action="store_true", help="time prepare only")
    parser.add_argument("--language-id", choices=("on", "off", "auto"),
                        help="data.language_id (default: unset, i.e. auto)")
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    src, tgt, reused = corpus(workdir, args.pairs)
    gigabytes = (src.stat().st_size + tgt.stat().st_size) / 1e9
    print(f"corpus {src} + {tgt}: {args.pairs:,} pairs, {gigabytes:.2f} GB "
          f"({'reused' if reused else f'written in {time.monotonic() - started:.0f} s'})",
          flush=True)
    config_path = write_config(workdir, args.language_id)
    run_dir = load_config(config_path).run_path
    seconds, peak_gib = run_prepare(config_path, run_dir)
    lines = [f"machine         {machine()}",
             f"pairs           {args.pairs:,} ({gigabytes:.2f} GB)",
             f"prepare         {seconds:.1f} s = {seconds / 60:.1f} min, "
             f"{args.pairs / seconds:,.0f} pairs/s, peak RSS {peak_gib:.2f} GiB"]
    if not args.skip_pipeline:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # as the CLI
        from pipelines.startup import import_tensorflow_quietly

        import_tensorflow_quietly()
        for parallel in PARALLEL_CALLS:
            first, tokens, batches = time_pipeline(run_dir, parallel, args.batches)
            lines.append(f"input pipeline  parallel_calls {parallel}: first batch {first:.1f} s, "
                         f"{tokens:,.0f} target tok/s, "
                         f"{batches:.1f} batches/s ({args.batches} batches)")
    print("\n" + "\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
