"""Model size x training length on the embedded corpus: test BLEU of the demo's recipe with
each model size of `pipelines.training.model_size.SIZE_LADDER`, trained for a number of updates as a
budget would compress it (`pipelines.training.budget.Recipe.compress`: warm-up and intervals
scaled by steps / 4,000, the learning rate by their square root), then averaged and scored
with beam 4 on the test split.

    .venv/bin/python bench/budget_grid.py --sizes 2x128,3x192,3x256 --steps 500,1000,2000
        [--work runs/budget-grid] [--float32] [--ema 0.999]

Fixed in steps, not minutes, so that a point means the same on every machine and on a busy
one: what a machine reaches in a budget is the point at the steps it fits (its updates per
second for each size: the `train` lines of this table, or `bench/train_throughput.py`). The
corpus is prepared once (work/prepared) and linked into each run; every step goes through the
CLI (`keras-transformer run CONFIG --only STAGE`) and a finished run is skipped, so the script
resumes where it stopped. Prints a Markdown table, one row per run, and appends each row to
work/grid.jsonl. With `--ema DECAY` each run also keeps a moving average of the weights
(`train.ema_decay`), scored beside the averaged checkpoint.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

from pipelines.config import BUILTIN_CONFIGS, load_config
from pipelines.paths import RunPaths
from pipelines.training.budget import Recipe
from pipelines.training.model_size import SIZE_LADDER

STAGES = ("train", "average", "evaluate")


def run_config(work: Path, size: str, steps: int, dtype: str, ema_decay: float) -> Path:
    """work/SIZE-STEPS.yaml: the demo with the model size and the recipe compressed to steps
    (and a moving average of the weights if ema_decay)."""
    demo = yaml.safe_load((BUILTIN_CONFIGS / "demo.yaml").read_text())
    recipe = Recipe.compress(load_config("demo").train, steps)
    name = (f"{size}-{steps}{'-f32' if dtype == 'float32' else ''}"
            f"{f'-ema{ema_decay:g}' if ema_decay else ''}")
    demo["name"] = name
    demo["run_dir"] = str(work / name)
    demo["model"] = {**demo["model"], "preset": "small", **SIZE_LADDER[size], "dtype": dtype}
    demo["train"] = {**demo["train"], "steps": steps, "max_minutes": 0, "ema_decay": ema_decay,
                     **{field: getattr(recipe, field) for field in (
                         "warmup_steps", "learning_rate_scale", "checkpoint_every_steps",
                         "validate_every_steps")}}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(demo, sort_keys=False))
    return path


def cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pipelines.cli", *args], check=True)


def grid_point(work: Path, size: str, steps: int, dtype: str, ema_decay: float) -> dict:
    """Trains, averages and evaluates one point (skipped when its scores exist); with
    ema_decay, evaluates the moving average too (eval/test-ema.json)."""
    config = run_config(work, size, steps, dtype, ema_decay)
    run_dir = Path(yaml.safe_load(config.read_text())["run_dir"])
    scores = run_dir / "eval" / "test.json"
    ema_scores = run_dir / "eval" / "test-ema.json"
    if not scores.exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        for shared in ("data", "vocab"):
            link = run_dir / shared
            if not link.exists():
                link.symlink_to((work / "prepared" / shared).resolve())
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
    return {"size": size, "steps": steps, "dtype": train["dtype"],
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
    args = parser.parse_args()
    work = args.work.resolve()
    prepared = work / "prepared.yaml"
    if not (work / "prepared" / "vocab").is_dir():
        work.mkdir(parents=True, exist_ok=True)
        demo = yaml.safe_load((BUILTIN_CONFIGS / "demo.yaml").read_text())
        prepared.write_text(yaml.safe_dump({**demo, "name": "prepared",
                                            "run_dir": str(work / "prepared")}, sort_keys=False))
        cli("run", str(prepared), "--only", "prepare")
    dtype = "float32" if args.float32 else "auto"
    rows = []
    for size in args.sizes.split(","):
        for steps in (int(value) for value in args.steps.split(",")):
            row = grid_point(work, size, steps, dtype, args.ema)
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
