"""One model for three languages on the embedded corpus (issue 46): English -> French, German
and Spanish test BLEU and chrF of pipelines/configs/demo_multilingual.yaml's model against a
bilingual model per language, each language on the same test verses.

    .venv/bin/python bench/multilingual.py [--steps 1200] [--work runs/multilingual]

Runs (every one 2 + 2 layers of d_model 128, bench/tagged_back_translation.py's SIZE, on its
config's recipe compressed to a fixed number of updates, the same on every machine):
- bilingual en-fr, en-de, en-es: pipelines/configs/demo.yaml on `bible:en-XX` with the
  multilingual config's `holdout` (500), `--steps` updates each;
- multilingual xN: demo_multilingual.yaml (the three corpora, weights 1 : 1 : 1, a 16,000-piece
  vocabulary) with `--steps` x N updates: x3 has the three bilingual models' updates together,
  x1 one bilingual model's.
The Bible holds out the same chapters for every language pair, so each bilingual test split is
the multilingual test split's lines of that language (checked). Every step goes through the
CLI and is skipped when its output exists (resumable; wall times kept in work/times.json). It
prints a Markdown table of BLEU / chrF per pair. Results: docs/recipes.md, "One model for three
languages".
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from keras_transformer.precision import cpu_flags
from pipelines.config import load_config
from pipelines.doctor import ISA_FLAGS
from pipelines.files import read_lines
from pipelines.paths import RunPaths
from prepare_scale import machine  # bench/prepare_scale.py
from tagged_back_translation import SIZE, Steps, write_config

LANGUAGES = ("fr", "de", "es")
MULTIPLES = (3, 1)  # the multilingual runs' updates, in multiples of --steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1200,
                        help="updates of each bilingual model (the recipe compressed to them)")
    parser.add_argument("--work", type=Path, default=Path("runs/multilingual"))
    args = parser.parse_args()
    work = args.work.resolve()
    steps = Steps.in_work(work)
    holdout = load_config("demo_multilingual").data.holdout
    configs = {f"en-{language}": write_config(work, f"en-{language}",
                                              {"source": f"bible:en-{language}",
                                               "holdout": holdout}, args.steps)
               for language in LANGUAGES}
    configs |= {f"multilingual-x{multiple}": write_config(
        work, f"multilingual-x{multiple}",
        {"corpora": [{"name": language, "source": f"bible:en-{language}"}
                     for language in LANGUAGES]},
        args.steps * multiple, base="demo_multilingual") for multiple in MULTIPLES}
    for name, config in configs.items():
        steps.evaluated_run(name, config, work / name)

    multilingual_test = read_lines(RunPaths(work / f"multilingual-x{MULTIPLES[0]}")
                                   .split("test")[0])
    for language in LANGUAGES:
        lines = [line.split(" ", 1)[1] for line in multilingual_test
                 if line.startswith(f"<2{language}> ")]
        if lines != read_lines(RunPaths(work / f"en-{language}").split("test")[0]):
            raise SystemExit(f"en-{language}: the bilingual test split is not the "
                             f"multilingual one's {language} lines")
    scores = {name: json.loads(RunPaths(work / name).scores("test").read_text())
              for name in configs}
    flags = " ".join(flag for flag in ISA_FLAGS if flag in cpu_flags())
    print(f"\nmachine: {machine()}; {flags}; dtype "
          f"{load_config(configs['en-fr']).model.resolved_dtype()[0]}; every model {SIZE}")
    pairs = [f"en-{language}" for language in LANGUAGES]
    print("\n| model | updates | " + " | ".join(f"{pair} BLEU / chrF" for pair in pairs)
          + " |\n|---|---|" + "---|" * len(pairs))
    print(f"| bilingual (one per pair) | {args.steps:,} each | " + " | ".join(
        f"{scores[pair]['bleu']:.2f} / {scores[pair]['chrf']:.2f}" for pair in pairs) + " |")
    for multiple in MULTIPLES:
        into = scores[f"multilingual-x{multiple}"]["languages"]
        print(f"| multilingual | {args.steps * multiple:,} | " + " | ".join(
            f"{into[language]['bleu']:.2f} / {into[language]['chrf']:.2f}"
            for language in LANGUAGES)
            + " |")
    print(steps.table())


if __name__ == "__main__":
    main()
