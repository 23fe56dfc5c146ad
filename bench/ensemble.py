"""Ensembles on the embedded corpus (issue 47 item 3): English -> French test BLEU and chrF of
demo-size models trained apart (other train.seed) against their ensembles of 2 and of all.

    .venv/bin/python bench/ensemble.py [--members 3] [--steps 1200] [--work runs/ensemble]

Every member is 2 + 2 layers of d_model 128 (bench/tagged_back_translation.py's SIZE) on the
demo's recipe compressed to `--steps` updates, its train.seed 1, 2, ...; the first member
prepares the demo corpus and the others train on a copy of its data/ and vocab/ (one spm.model,
as an ensemble needs). Each member is scored by `keras-transformer evaluate` (averaged
checkpoint, beam 4); each ensemble (members 1-2, then 1-N) is exported by `keras-transformer
export member-1.yaml --format saved_model --ensemble ...` into a copy of member 1's run (its
SavedModel in evaluate's dtype: export.saved_model_dtype auto) and scored on the same test
split after `keras-transformer translate`, with evaluate's own BLEU and chrF
(`pipelines.evaluate.corpus_scores`). Every step is skipped when its output exists (resumable;
wall times kept in work/times.json). It prints a Markdown table. Results:
docs/recipes.md, "Ensembles".
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import yaml

from fine_tune import cli, train_run  # bench/fine_tune.py
from keras_transformer.precision import cpu_flags
from pipelines.config import load_config
from pipelines.doctor import ISA_FLAGS
from pipelines.evaluate import corpus_scores
from pipelines.files import read_lines
from pipelines.paths import RunPaths
from prepare_scale import machine  # bench/prepare_scale.py
from tagged_back_translation import SIZE, Steps, write_config


def ensemble_scores(work: Path, configs: list[Path], steps: Steps) -> dict:
    """BLEU and chrF on the test split of the ensemble of `configs`' runs: exported (the first
    run's config, the others as --ensemble) into work/ensemble-N/, translated by `translate`."""
    name = f"ensemble-{len(configs)}"
    scores_file, hypotheses = work / f"{name}.json", work / f"{name}.hyp"
    first = RunPaths(work / "member-1")
    if not scores_file.is_file():
        config = work / f"{name}.yaml"  # member 1's, into work/NAME, in evaluate's dtype
        values = yaml.safe_load(configs[0].read_text())
        config.write_text(yaml.safe_dump({**values, "run_dir": str(work / name), "export": {
            **values.get("export", {}), "saved_model_dtype": "auto"}}))
        run = RunPaths(work / name)
        for part in (first.checkpoints, first.data, first.root / "vocab"):
            if not (run.root / part.name).exists():
                shutil.copytree(part, run.root / part.name)
        ensemble = [option for member in configs[1:] for option in ("--ensemble", str(member))]
        steps.run(f"{name}: export", run.saved_model.is_dir(),
                  lambda: cli("export", str(config), "--format", "saved_model", *ensemble))
        steps.run(f"{name}: translate test", hypotheses.is_file(),
                  lambda: cli("translate", str(run.root), str(first.split("test")[0]),
                              "--output", str(hypotheses)))
        scores_file.write_text(json.dumps(corpus_scores(
            read_lines(hypotheses), read_lines(first.split("test")[1])), indent=2))
    return json.loads(scores_file.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=3, help="models trained (2 to 4)")
    parser.add_argument("--steps", type=int, default=1200,
                        help="updates of each member (the demo's recipe compressed to them)")
    parser.add_argument("--work", type=Path, default=Path("runs/ensemble"))
    args = parser.parse_args()
    if not 2 <= args.members <= 4:
        parser.error("--members: 2 to 4")
    work = args.work.resolve()
    steps = Steps.in_work(work)
    configs = [write_config(work, f"member-{seed}", {"source": "bible:en-fr"}, args.steps,
                            seed=seed) for seed in range(1, args.members + 1)]
    first = RunPaths(work / "member-1")
    scores = {}
    for index, config in enumerate(configs):
        paths = RunPaths(work / f"member-{index + 1}")
        if index:  # one spm.model: member 1's data and vocabulary
            for part in (first.data, first.root / "vocab"):
                if not (paths.root / part.name).exists():
                    shutil.copytree(part, paths.root / part.name)
            steps.run(f"member-{index + 1}: train, average", paths.averaged_index.is_file(),
                      lambda: [cli(stage, str(config)) for stage in ("train", "average")])
        else:
            steps.run("member-1: prepare, train, average", paths.averaged_index.is_file(),
                      lambda: train_run(config))
        steps.run(f"member-{index + 1}: evaluate", paths.scores("test").is_file(),
                  lambda: cli("evaluate", str(config), "--split", "test"))
        scores[f"member {index + 1} (train.seed {index + 1})"] = json.loads(
            paths.scores("test").read_text())
    for count in sorted({2, args.members}):
        scores[f"ensemble of members 1-{count}"] = ensemble_scores(work, configs[:count], steps)
    flags = " ".join(flag for flag in ISA_FLAGS if flag in cpu_flags())
    print(f"\nmachine: {machine()}; {flags}; dtype "
          f"{load_config(configs[0]).model.resolved_dtype()[0]}; every member {SIZE}, "
          f"{args.steps:,} updates; beam 4, alpha 0.6, the last 5 checkpoints averaged")
    print("\n| model | test BLEU | chrF |\n|---|---|---|")
    for name, score in scores.items():
        print(f"| {name} | {score['bleu']:.2f} | {score['chrf']:.2f} |")
    print(steps.table())


if __name__ == "__main__":
    main()
