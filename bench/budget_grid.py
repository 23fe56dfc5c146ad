"""Model size x training length on the embedded corpus: test BLEU of the demo's recipe with
each model size of `pipelines.config.model.SIZE_LADDER`, trained for a number of updates as a
budget would compress it (`pipelines.training.budget.Recipe.compress`: warm-up and intervals
scaled by steps / 4,000, the learning rate by their square root), then averaged and scored
with beam 4 on the test split.

    .venv/bin/python bench/budget_grid.py --sizes 2x128,3x192,3x256 --steps 500,1000,2000
        [--work runs/budget-grid] [--float32] [--ema 0.999] [--variants base,prenorm-lr2]

Fixed in steps, not minutes, so that a point means the same on every machine and on a busy
one: what a machine reaches in a budget is the point at the steps it fits (its updates per
second for each size: the `train` lines of this table, or `bench/train_throughput.py`). The
corpus is prepared once (work/prepared) and linked into each run; every step goes through the
CLI (`keras-transformer run CONFIG --only STAGE`) and a finished run is skipped, so the script
resumes where it stopped. Prints a Markdown table, one row per run, and appends each row to
work/grid.jsonl. With `--ema DECAY` each run also keeps a moving average of the weights
(`train.ema_decay`), scored beside the averaged checkpoint. `--variants` trains each point
in each recipe variant of VARIANTS (the demo's recipe changed in one respect, on top of the
compression); a variant with its own vocabulary prepares its own corpus once.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import subprocess
import sys
from pathlib import Path

import yaml

from pipelines.config import BUILTIN_CONFIGS, load_config
from pipelines.paths import RunPaths
from pipelines.training.budget import Recipe
from pipelines.config.model import SIZE_LADDER

STAGES = ("train", "average", "evaluate")


@dataclasses.dataclass(frozen=True)
class Variant:
    """A change to the demo's recipe: config fields set, and factors on the compressed
    learning-rate scale and warm-up."""

    model: dict = dataclasses.field(default_factory=dict)
    data: dict = dataclasses.field(default_factory=dict)
    learning_rate_factor: float = 1.0
    warmup_factor: float = 1.0


# Relative to the demo's recipe: pre-norm at twice the rate of eq. 3, dropout 0.1, 8,000 pieces.
VARIANTS: dict[str, Variant] = {
    "base": Variant(),
    "postnorm-lr1": Variant(model={"norm_first": False}, learning_rate_factor=0.5),  # paper's
    "postnorm": Variant(model={"norm_first": False}),
    "prenorm-lr1": Variant(learning_rate_factor=0.5),
    "warmup-half": Variant(warmup_factor=0.5),  # the peak rate x sqrt(2) (eq. 3)
    "warmup-double": Variant(warmup_factor=2.0),
    "dropout0": Variant(model={"dropout": 0.0}),
    "dropout0.05": Variant(model={"dropout": 0.05}),
    "vocab4000": Variant(data={"vocab_size": 4000}),
}


def prepared_dir(work: Path, variant: Variant) -> Path:
    """Where the variant's corpus and vocabulary are prepared: work/prepared, or
    work/prepared-vocabN for a variant with its own vocabulary size."""
    size = variant.data.get("vocab_size")
    return work / (f"prepared-vocab{size}" if size else "prepared")


def prepare(work: Path, variant: Variant) -> None:
    """Runs the demo's prepare stage once per vocabulary (skipped when it exists)."""
    prepared = prepared_dir(work, variant)
    if (prepared / "vocab").is_dir():
        return
    work.mkdir(parents=True, exist_ok=True)
    demo = yaml.safe_load((BUILTIN_CONFIGS / "demo.yaml").read_text())
    config = work / f"{prepared.name}.yaml"
    config.write_text(yaml.safe_dump({**demo, "name": prepared.name, "run_dir": str(prepared),
                                      "data": {**demo["data"], **variant.data}},
                                     sort_keys=False))
    cli("run", str(config), "--only", "prepare")


def run_config(work: Path, size: str, steps: int, dtype: str, ema_decay: float,
               variant_name: str) -> Path:
    """work/SIZE-STEPS[-VARIANT].yaml: the demo with the model size and the recipe compressed
    to steps, changed as the variant says (and a moving average of the weights if
    ema_decay)."""
    variant = VARIANTS[variant_name]
    demo = yaml.safe_load((BUILTIN_CONFIGS / "demo.yaml").read_text())
    recipe = Recipe.compress(load_config("demo").train, steps)
    name = (f"{size}-{steps}{'-f32' if dtype == 'float32' else ''}"
            f"{f'-ema{ema_decay:g}' if ema_decay else ''}"
            f"{'' if variant_name == 'base' else '-' + variant_name}")
    demo["name"] = name
    demo["run_dir"] = str(work / name)
    demo["data"] = {**demo["data"], **variant.data}
    demo["model"] = {**demo["model"], "preset": "small", **SIZE_LADDER[size], "dtype": dtype,
                     **variant.model}
    demo["train"] = {**demo["train"], "steps": steps, "max_minutes": 0, "ema_decay": ema_decay,
                     **{field: getattr(recipe, field) for field in (
                         "warmup_steps", "learning_rate_scale", "checkpoint_every_steps",
                         "validate_every_steps")}}
    demo["train"]["learning_rate_scale"] *= variant.learning_rate_factor
    demo["train"]["warmup_steps"] = round(demo["train"]["warmup_steps"] * variant.warmup_factor)
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(demo, sort_keys=False))
    return path


def cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pipelines.cli", *args], check=True)


def grid_point(work: Path, size: str, steps: int, dtype: str, ema_decay: float,
               variant: str) -> dict:
    """Trains, averages and evaluates one point (skipped when its scores exist); with
    ema_decay, evaluates the moving average too (eval/test-ema.json)."""
    prepare(work, VARIANTS[variant])
    config = run_config(work, size, steps, dtype, ema_decay, variant)
    run_dir = Path(yaml.safe_load(config.read_text())["run_dir"])
    scores = run_dir / "eval" / "test.json"
    ema_scores = run_dir / "eval" / "test-ema.json"
    if not scores.exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        for shared in ("data", "vocab"):
            link = run_dir / shared
            if not link.exists():
                link.symlink_to((prepared_dir(work, VARIANTS[variant]) / shared).resolve())
        for stage in STAGES:
            cli("run", str(config), "--only", stage)
    if ema_decay and not ema_scores.exists():
        averaged = scores.read_bytes()
        cli("evaluate", str(config), "--checkpoint", str(RunPaths(run_dir).ema))
        scores.rename(ema_scores)
        scores.write_bytes(averaged)
    train = json.loads(RunPaths(run_dir).train_summary.read_text())
    test = json.loads(scores.read_text())
    ema = json.loads(ema_scores.read_text()) if ema_decay else {}
    return {"size": size, "steps": steps, "variant": variant, "dtype": train["dtype"],
            "train_minutes": round(train["seconds"] / 60, 2),
            "tokens_per_second": round(train["tokens_per_second"]),
            "dev_loss": round(train["dev_loss"], 3) if train["dev_loss"] else None,
            "bleu": round(test["bleu"], 2), "chrf": round(test["chrf"], 2),
            **({"ema_bleu": round(ema["bleu"], 2), "ema_chrf": round(ema["chrf"], 2)}
               if ema else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(SIZE_LADDER))
    parser.add_argument("--steps", default="500,1000,2000")
    parser.add_argument("--work", type=Path, default=Path("runs/budget-grid"))
    parser.add_argument("--float32", action="store_true",
                        help="train in float32 (an AVX2 CPU's dtype), not the machine's auto")
    parser.add_argument("--ema", type=float, default=0.0,
                        help="train.ema_decay: also score the moving average of the weights")
    parser.add_argument("--variants", default="base",
                        help=f"recipe variants, comma-separated: {', '.join(VARIANTS)}")
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variant(s) {unknown}: choose from {', '.join(VARIANTS)}")
    work = args.work.resolve()
    dtype = "float32" if args.float32 else "auto"
    rows = []
    for size, steps, variant in itertools.product(
            args.sizes.split(","), (int(value) for value in args.steps.split(",")), variants):
        row = grid_point(work, size, steps, dtype, args.ema, variant)
        rows.append(row)
        with (work / "grid.jsonl").open("a") as file:
            file.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    print(f"\n| {' | '.join(rows[0])} |")
    print("|---" * len(rows[0]) + "|")
    for row in rows:
        print("| " + " | ".join(str(value) for value in row.values()) + " |")


if __name__ == "__main__":
    main()
