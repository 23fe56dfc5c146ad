"""Tagged back-translation on the embedded corpus (issue 46): English -> French test BLEU and
chrF with no back-translation, with untagged back-translated pairs and with tagged ones
(`<bt>`, Caswell et al., 2019), all on the demo's dev and test splits.

    .venv/bin/python bench/tagged_back_translation.py [--steps 1200] [--mono-lines N]
        [--train-seed N] [--work runs/tagged-bt]

The demo's train pairs (`bible:en-fr` prepared as pipelines/configs/demo.yaml does: its held-out
chapters are the dev and test splits, which every run here shares as they are) are split in two
halves by a seeded shuffle: half A is the parallel corpus; half B's French is the monolingual
text (its English is kept only to score the back-translations, never trained on; `--mono-lines`
keeps the first N lines of it, default all). A French -> English model trained on half A
translates half B's French by sampling (`translate --sampling-topk 0 --seed 1` through the
SavedModel, whose draws repeat for a seed: docs/scoring-and-sampling.md, "Back-translation"),
and three English -> French models are trained:

- none: half A only (`data.source: files`);
- untagged: half A and the back-translated pairs (`data.corpora`, weights 1 : 1, the halves'
  natural proportions);
- tagged: the same, the back-translated sources tagged `<bt>`.

All four models are 2 + 2 layers of d_model 128 (`pipelines.config.model.SIZE_LADDER`, the
demo's other settings: pre-norm, dropout 0.1, dtype `auto`) trained on the demo's recipe
compressed to `--steps` updates as a budget would compress it
(`pipelines.training.budget.Recipe.compress`), fixed in steps, not minutes, so that the
comparison is the same on every machine and on a busy one. Each is averaged and scored with the
demo's beam search (beam 4) on the test split; the differences come with sacrebleu's paired
bootstrap (1,000 resamples of the test sentences: the test set's noise only, not the training
seed's). Every step goes through the CLI (`keras-transformer prepare | train | average | export
| translate | evaluate`); a step whose output exists is skipped, so the script resumes where it
stopped, keeping the wall times of the steps done (work/times.json). It prints Markdown tables
of the scores and of each step's wall time. `--train-seed N` trains the three English -> French
runs again with train.seed N (runs NAME-seedN, the reverse model and its back-translations
reused): the training seed's noise. Results: docs/scoring-and-sampling.md,
"Tagged back-translation, measured".
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
import time
from pathlib import Path
from typing import Callable

import yaml
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from fine_tune import cli, train_run  # bench/fine_tune.py
from keras_transformer.precision import cpu_flags
from pipelines.config import BUILTIN_CONFIGS, load_config
from pipelines.config.model import SIZE_LADDER
from pipelines.corpus.shards import train_corpora
from pipelines.doctor import ISA_FLAGS
from pipelines.evaluate import corpus_scores
from pipelines.files import read_lines, write_lines_atomic
from pipelines.paths import RunPaths
from pipelines.training.budget import Recipe
from prepare_scale import machine  # bench/prepare_scale.py

SIZE = "2x128"
SPLIT_SEED = 1  # the shuffle that splits the demo's train pairs into halves A and B
SAMPLING_SEED = 1  # translate --seed: line i of half B is drawn with seed 1 + i
TAG = "<bt>"
RUNS = ("none", "untagged", "tagged")
RECIPE_FIELDS = ("warmup_steps", "learning_rate_scale", "checkpoint_every_steps",
                 "validate_every_steps")


class Steps:
    """The script's steps, each run unless its output exists, their wall times kept in a JSON
    file so that a resumed script reports the times of the steps an earlier one did."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = (json.loads(path.read_text()) if path.is_file()
                                          else {})

    @classmethod
    def in_work(cls, work: Path) -> Steps:
        """The steps of a script working in `work` (made if missing): work/times.json."""
        work.mkdir(parents=True, exist_ok=True)
        return cls(work / "times.json")

    def evaluated_run(self, name: str, config: Path, run_dir: Path) -> None:
        """The run of `config`: prepare, train, average (`train_run`), then its test split
        evaluated; each skipped when its output exists."""
        paths = RunPaths(run_dir)
        self.run(f"{name}: prepare, train, average", paths.averaged_index.is_file(),
                 lambda: train_run(config))
        self.run(f"{name}: evaluate", paths.scores("test").is_file(),
                 lambda: cli("evaluate", str(config), "--split", "test"))

    def run(self, name: str, done: bool, action: Callable[[], object]) -> None:
        """Runs `action` unless `done`, recording its wall time under `name`."""
        if done:
            print(f"{name}: done", flush=True)
            return
        started = time.monotonic()
        action()
        self.seconds[name] = time.monotonic() - started
        self.path.write_text(json.dumps(self.seconds, indent=1))

    def table(self) -> str:
        """A Markdown table of each step's wall time and their total."""
        rows = [f"| {name} | {seconds / 60:.1f} min |" for name, seconds in self.seconds.items()]
        return "\n".join(["\n| step | wall time |\n|---|---|", *rows,
                          f"| total | {sum(self.seconds.values()) / 60:.1f} min |"])


def split_halves(demo_data: Path, corpus: Path, mono_lines: int | None) -> None:
    """corpus/parallel.{en,fr} (half A), corpus/mono.fr (half B's French, its first
    `mono_lines`) and corpus/mono-reference.en (their English, to score the back-translations)
    from the demo's prepared train shards, shuffled with SPLIT_SEED."""
    pairs = [pair for source, target in RunPaths(demo_data).train_shards()
             for pair in zip(read_lines(source), read_lines(target))]
    random.Random(SPLIT_SEED).shuffle(pairs)
    half_a, half_b = pairs[:len(pairs) // 2], pairs[len(pairs) // 2:][:mono_lines]
    corpus.mkdir(parents=True, exist_ok=True)
    write_lines_atomic(corpus / "parallel.en", [en for en, _ in half_a])
    write_lines_atomic(corpus / "parallel.fr", [fr for _, fr in half_a])
    write_lines_atomic(corpus / "mono-reference.en", [en for en, _ in half_b])
    write_lines_atomic(corpus / "mono.fr", [fr for _, fr in half_b])  # last: the step's mark


def files(source: Path, target: Path) -> dict[str, str]:
    return {"src": str(source.resolve()), "tgt": str(target.resolve())}


def write_config(work: Path, name: str, data: dict, steps: int | None,
                 seed: int | None = None, base: str = "demo", model: dict | None = None,
                 learning_rate_scale: float | None = None) -> Path:
    """work/NAME.yaml: the builtin config `base` on `data` (its vocabulary and cleaning keys
    kept); with `steps`, the SIZE model (or `model`'s keys) on its recipe (with
    `learning_rate_scale` instead of its own) compressed to them (with `seed`, trained with
    that train.seed instead of its own)."""
    demo = yaml.safe_load((BUILTIN_CONFIGS / f"{base}.yaml").read_text())
    shared = {key: value for key, value in demo["data"].items()
              if key not in ("source", "corpora")}
    config = {**demo, "name": name, "run_dir": str(work / name), "data": {**shared, **data}}
    if steps:
        train = load_config(base).train
        if learning_rate_scale is not None:
            train = dataclasses.replace(train, learning_rate_scale=learning_rate_scale)
        recipe = Recipe.compress(train, steps)
        config["model"] = {**demo["model"], **(model or {"preset": "small", **SIZE_LADDER[SIZE]})}
        config["train"] = {**demo["train"], "steps": steps, "max_minutes": 0,
                           **{field: getattr(recipe, field) for field in RECIPE_FIELDS},
                           **({"seed": seed} if seed is not None else {})}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def forward_data(corpus: Path, demo_data: Path, run: str) -> dict:
    """The `data` keys of an English -> French run: half A alone (none), or with the
    back-translated pairs, tagged or not."""
    paths = RunPaths(demo_data)
    parallel = {"source": "files", "train": files(corpus / "parallel.en", corpus / "parallel.fr"),
                "dev": files(*paths.split("dev")), "test": files(*paths.split("test"))}
    if run == "none":
        return parallel
    back_translated = {"name": "bt", "source": "files", "weight": 1,
                       "train": files(corpus / "bt.en", corpus / "mono.fr"),
                       **({"tag": TAG} if run == "tagged" else {})}
    return {"corpora": [{"name": "parallel", "weight": 1, **parallel}, back_translated]}


def bootstrap(systems: list[tuple[str, list[str]]], references: list[str]
              ) -> dict[str, tuple[float, float, float | None]]:
    """{system: (BLEU, its 95% confidence half-width, p-value against the first system)} by
    sacrebleu's paired bootstrap."""
    _, results = PairedTest(systems, {"BLEU": BLEU()}, [references], test_type="bs")()
    return {name: (result.score, result.ci, result.p_value)
            for name, result in zip(results["System"], results["BLEU"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1200,
                        help="updates of every model (the demo's recipe compressed to them)")
    parser.add_argument("--mono-lines", type=int, help="monolingual lines (default: half B)")
    parser.add_argument("--train-seed", type=int,
                        help="train the en-fr runs with this train.seed (runs RUN-seedN) "
                        "instead of the demo's, to see the training seed's noise")
    parser.add_argument("--work", type=Path, default=Path("runs/tagged-bt"))
    args = parser.parse_args()
    names = {run: run if args.train_seed is None else f"{run}-seed{args.train_seed}"
             for run in RUNS}
    work, corpus = args.work.resolve(), args.work.resolve() / "corpus"
    steps = Steps.in_work(work)
    demo_data = work / "demo-data"
    demo_config = write_config(work, "demo-data", {"source": "bible:en-fr"}, None)
    steps.run("prepare the demo's corpus", RunPaths(demo_data).train_manifest.is_file(),
              lambda: cli("prepare", str(demo_config)))
    steps.run("split it into halves", (corpus / "mono.fr").is_file(),
              lambda: split_halves(demo_data, corpus, args.mono_lines))

    dev, test = RunPaths(demo_data).split("dev"), RunPaths(demo_data).split("test")
    reverse = write_config(work, "fr-en", {
        "source": "files", "train": files(corpus / "parallel.fr", corpus / "parallel.en"),
        "dev": files(dev[1], dev[0]), "test": files(test[1], test[0])}, args.steps)
    reverse_paths = RunPaths(work / "fr-en")
    steps.evaluated_run("fr-en", reverse, work / "fr-en")
    steps.run("fr-en: export (SavedModel)", reverse_paths.saved_model.is_dir(),
              lambda: cli("export", str(reverse), "--format", "saved_model"))
    mono = read_lines(corpus / "mono.fr")
    back_translations = corpus / "bt.en"
    steps.run(f"back-translate {len(mono):,} lines (sampling)",
              back_translations.is_file() and len(read_lines(back_translations)) == len(mono),
              lambda: cli("translate", str(reverse_paths.export), str(corpus / "mono.fr"),
                          "--sampling-topk", "0", "--seed", str(SAMPLING_SEED),
                          "--output", str(back_translations), "--progress"))

    for run, name in names.items():
        config = write_config(work, name, forward_data(corpus, demo_data, run), args.steps,
                              args.train_seed)
        steps.evaluated_run(name, config, work / name)

    references = read_lines(RunPaths(work / names["none"]).split("test")[1])
    hypotheses = {run: read_lines(RunPaths(work / name).hypotheses("test"))
                  for run, name in names.items()}
    against_none = bootstrap([(run, hypotheses[run]) for run in RUNS], references)
    tagged_against_untagged = bootstrap([(run, hypotheses[run]) for run in RUNS[1:]],
                                        references)["tagged"][2]
    synthetic = corpus_scores(read_lines(back_translations),
                              read_lines(corpus / "mono-reference.en"))
    reverse_scores = json.loads(reverse_paths.scores("test").read_text())
    flags = " ".join(flag for flag in ISA_FLAGS if flag in cpu_flags())
    print(f"\nmachine: {machine()}; {flags}; dtype "
          f"{load_config(reverse).model.resolved_dtype()[0]}")
    print(f"every model {SIZE}, {args.steps:,} updates; fr-en test BLEU "
          f"{reverse_scores['bleu']:.2f} (chrF {reverse_scores['chrf']:.2f}); its sampled "
          f"back-translations of {len(mono):,} lines against their real English: BLEU "
          f"{synthetic['bleu']:.2f}, chrF {synthetic['chrf']:.2f}")
    print("\n| en-fr run | train pairs | test BLEU (95% CI) | p vs none | chrF |\n"
          "|---|---|---|---|---|")
    for run, name in names.items():
        counts = " + ".join(f"{sum(c.pairs):,}{' BT' if c.name == 'bt' else ''}"
                            f"{f' tagged {c.tag}' if c.tag else ''}"
                            for c in train_corpora(RunPaths(work / name).data))
        bleu, ci, p_value = against_none[run]
        chrf = json.loads(RunPaths(work / name).scores("test").read_text())["chrf"]
        p_text = "-" if p_value is None else f"{p_value:.3f}"
        print(f"| {name} | {counts} | {bleu:.2f} (± {ci:.2f}) | {p_text} | {chrf:.2f} |")
    print(f"\ntagged vs untagged: p = {tagged_against_untagged:.3f} (paired bootstrap)")
    print(steps.table())


if __name__ == "__main__":
    main()
