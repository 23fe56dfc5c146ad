"""Domain adaptation on the embedded corpus: a parent trained on the en-fr Bible without one
book (the demo's recipe, fixed at 2,000 steps), fine-tuned on that book (`train.init_from`),
both scored with beam search on the book's held-out chapters and on the parent's own held-out
pairs (what fine-tuning forgets).

    .venv/bin/python bench/fine_tune.py [--book 19] [--work runs/fine-tune]

The book (default 19, the Psalms: poetry, where the rest of the Bible is mostly narrative)
is split by chapter: chapters ending in 5 are its dev split, those ending in 0 or 2 its test
split, the rest its train split. The parent's corpus is every other verse (a `files` source:
prepare holds out data.holdout random pairs of it for dev and test). Every step goes through
the CLI (`keras-transformer prepare | train | average | evaluate`); a step whose output exists
is skipped, so the script resumes where it stopped. It prints a Markdown table of BLEU (and
chrF) before and after fine-tuning.
"""
from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
from pathlib import Path

import yaml

from pipelines.corpus.bible import bible_pairs
from pipelines.config import BUILTIN_CONFIGS
from pipelines.paths import RunPaths

BOOK_DEV = (5,)  # last digits of the book's chapters held out for dev
BOOK_TEST = (0, 2)  # and for test
# The demo's recipe as its 18-minute budget compresses it on a Zen 4
# (pipelines/training/budget.py: half the steps, warm-up and intervals halved, the learning
# rate times sqrt(1/2)), fixed in steps so that the parent is the same on every machine and
# on a busy one.
PARENT = {"steps": 2000, "max_minutes": 0, "warmup_steps": 500, "learning_rate_scale": 0.7071,
          "checkpoint_every_steps": 50, "validate_every_steps": 400}
# Fine-tuning: a short fresh schedule whose peak (1.2e-3 for d_model 256) is below the
# parent's (2e-3 at its warm-up's end): the parent's weights are a good start, not noise.
FINE_TUNE = {"steps": 400, "max_minutes": 0, "warmup_steps": 100, "learning_rate_scale": 0.2,
             "checkpoint_every_steps": 50, "validate_every_steps": 100}


def write_corpus(work: Path, book: int) -> dict[str, tuple[Path, Path]]:
    """work/corpus/{parent,book-train,book-dev,book-test}.{en,fr}: {name: (source, target)}."""
    corpus = work / "corpus"
    files = {name: (corpus / f"{name}.en", corpus / f"{name}.fr")
             for name in ("parent", "book-train", "book-dev", "book-test")}
    if all(path.is_file() for pair in files.values() for path in pair):
        return files
    lines: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
    for source, target, _, (verse_book, chapter, _) in bible_pairs("bible:en-fr", 1,
                                                                   collections.Counter()):
        if verse_book != book:
            name = "parent"
        else:
            name = ("book-dev" if chapter % 10 in BOOK_DEV else
                    "book-test" if chapter % 10 in BOOK_TEST else "book-train")
        lines[name].append((source, target))
    corpus.mkdir(parents=True, exist_ok=True)
    for name, (source_path, target_path) in files.items():
        source_path.write_text("".join(f"{s}\n" for s, _ in lines[name]), encoding="utf-8")
        target_path.write_text("".join(f"{t}\n" for _, t in lines[name]), encoding="utf-8")
    return files


def write_configs(work: Path, files: dict[str, tuple[Path, Path]]) -> tuple[Path, Path]:
    """work/parent.yaml (the demo's recipe on the parent corpus) and work/child.yaml (the
    parent's model fine-tuned on the book's train split, scored on its dev and test)."""
    demo = yaml.safe_load((BUILTIN_CONFIGS / "demo.yaml").read_text())
    split = lambda name: {"src": str(files[name][0].resolve()),  # noqa: E731
                          "tgt": str(files[name][1].resolve())}
    parent = {**demo, "name": "parent", "run_dir": str(work / "parent"),
              "data": {**demo["data"], "source": "files", "train": split("parent")},
              "train": {**demo["train"], **PARENT}}
    child = {**demo, "name": "child", "run_dir": str(work / "child"),
             "data": {**demo["data"], "source": "files", "train": split("book-train"),
                      "dev": split("book-dev"), "test": split("book-test")},
             "train": {**demo["train"], **FINE_TUNE, "init_from": str(work / "parent")}}
    paths = work / "parent.yaml", work / "child.yaml"
    for path, config in zip(paths, (parent, child)):
        path.write_text(yaml.safe_dump(config, sort_keys=False))
    return paths


def cli(*args: str) -> None:
    """Runs `keras-transformer ARGS`, its output shown; exits if it fails."""
    print(f"$ keras-transformer {' '.join(args)}", flush=True)
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", *args])
    if done.returncode:
        sys.exit(f"keras-transformer {args[0]} failed ({done.returncode})")


def scores(config: Path, split: str, checkpoint: Path | None = None) -> dict:
    """BLEU and chrF of `checkpoint` (default: the run's averaged one) on the split of the
    run of `config`, by `keras-transformer evaluate`."""
    run_dir = Path(yaml.safe_load(config.read_text())["run_dir"])
    args = ["evaluate", str(config), "--split", split]
    cli(*args, *(["--checkpoint", str(checkpoint)] if checkpoint else []))
    return json.loads(RunPaths(run_dir).scores(split).read_text())


def train_run(config: Path) -> None:
    """prepare, train, average: skipped when the run has its averaged checkpoint."""
    run_dir = Path(yaml.safe_load(config.read_text())["run_dir"])
    if not RunPaths(run_dir).averaged_index.is_file():
        for stage in ("prepare", "train", "average"):
            cli(stage, str(config))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--book", type=int, default=19, help="the book held out (1-66)")
    parser.add_argument("--work", type=Path, default=Path("runs/fine-tune"))
    args = parser.parse_args()
    files = write_corpus(args.work, args.book)
    print({name: sum(1 for _ in open(source, encoding="utf-8"))
           for name, (source, _) in files.items()})
    parent_config, child_config = write_configs(args.work, files)
    train_run(parent_config)
    parent = RunPaths(args.work / "parent").averaged
    child = RunPaths(args.work / "child").averaged
    general_before = scores(parent_config, "test")
    cli("prepare", str(child_config))
    before = {split: scores(child_config, split, parent) for split in ("dev", "test")}
    train_run(child_config)
    after = {split: scores(child_config, split) for split in ("dev", "test")}
    general_after = scores(parent_config, "test", child)
    print(f"\n| model | book {args.book} dev BLEU | book test BLEU (chrF) | "
          f"parent's test BLEU |\n|---|---|---|---|")
    for name, book, general in (("parent", before, general_before),
                                ("fine-tuned", after, general_after)):
        print(f"| {name} | {book['dev']['bleu']:.2f} | {book['test']['bleu']:.2f} "
              f"({book['test']['chrf']:.1f}) | {general['bleu']:.2f} |")


if __name__ == "__main__":
    main()
