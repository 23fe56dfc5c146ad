"""A teacher distilled into a student on the embedded corpus (issue 47): test BLEU / chrF of
each, and their decoding speed in every runtime (bench/decode_speed.py on each run).

    .venv/bin/python bench/distill.py [--teacher 3x256] [--teacher-steps 2400]
                                      [--teacher-rate 2.0] [--student student]
                                      [--student-steps 2400] [--student-rate 1.0]
                                      [--work runs/distill] [--speed-sentences 200]

Runs, each on pipelines/configs/demo.yaml's corpus (bible:en-fr) and its recipe compressed to a
fixed number of updates, the same on every machine:
- teacher: a shape (`--teacher`: `3x256`, `6+2x192`, in the proportions of
  pipelines/config/model.py's SIZE_LADDER) or a preset, trained,
  averaged, evaluated and exported (SavedModel, ONNX, CTranslate2);
- student: `data.distill_from` the teacher (prepare translates the train sources with the
  teacher's CTranslate2 model), `model.preset` `--student` (a preset or a shape), then
  the same stages;
- student-reference (with --reference): the student's shape on the references, no teacher,
  to see what distillation adds.
Every step goes through the CLI and is skipped when its output exists (resumable; wall times
in work/times.json). Results: docs/recipes.md, "A fast student".
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from fine_tune import cli  # bench/fine_tune.py
from keras_transformer.precision import cpu_flags
from pipelines.config import load_config
from pipelines.config.model import size_fields
from pipelines.doctor import ISA_FLAGS
from pipelines.paths import RunPaths
from prepare_scale import machine  # bench/prepare_scale.py
from tagged_back_translation import Steps, write_config

SPEED_RUNTIMES = "tf,tf-parallel,onnx,onnx-int8,ct2-float32,ct2-int8"  # decode_speed.py's


SHAPE = re.compile(r"(\d+)(?:\+(\d+))?x(\d+)")  # LAYERSxWIDTH or ENCODER+DECODERxWIDTH


def model_keys(name: str) -> dict:
    """The `model` keys of a preset (`student`) or a shape in the ladder's proportions: `6x256`
    (six layers a side, as the ladder's `3x256`), `6+2x192` (six encoder layers, two decoder
    layers)."""
    shape = SHAPE.fullmatch(name)
    if not shape:
        return {"preset": name}
    encoder, decoder, width = shape.groups()
    return {"preset": "small", **size_fields(int(encoder), int(decoder or encoder), int(width))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", default="3x256", help="a preset or a shape (3x256, 6+2x192)")
    parser.add_argument("--teacher-steps", type=int, default=2400)
    parser.add_argument("--student", default="student", help="a preset or a shape (3x256, 6+2x192)")
    parser.add_argument("--student-steps", type=int, default=2400)
    parser.add_argument("--teacher-rate", type=float, default=None,
                        help="the teacher's train.learning_rate_scale (default: the demo's 2.0, "
                             "for 2-3 layers; 1.0 for six: docs/recipes.md)")
    parser.add_argument("--student-rate", type=float, default=1.0,
                        help="the student's and its reference's train.learning_rate_scale")
    parser.add_argument("--reference", action="store_true",
                        help="also train the student's shape on the references")
    parser.add_argument("--speed-sentences", type=int, default=200,
                        help="test sentences bench/decode_speed.py decodes (0: no speed)")
    parser.add_argument("--work", type=Path, default=Path("runs/distill"))
    args = parser.parse_args()
    work = args.work.resolve()
    steps = Steps.in_work(work)
    corpus = {"source": "bible:en-fr"}
    rates = {"teacher": (load_config("demo").train.learning_rate_scale
                         if args.teacher_rate is None else args.teacher_rate),
             "student": args.student_rate, "student-reference": args.student_rate}
    configs = {"teacher": write_config(work, "teacher", corpus, args.teacher_steps,
                                       model=model_keys(args.teacher),
                                       learning_rate_scale=rates["teacher"]),
               "student": write_config(work, "student",
                                       {**corpus, "distill_from": str(work / "teacher")},
                                       args.student_steps, model=model_keys(args.student),
                                       learning_rate_scale=rates["student"])}
    if args.reference:
        configs["student-reference"] = write_config(work, "student-reference", corpus,
                                                    args.student_steps,
                                                    model=model_keys(args.student),
                                                    learning_rate_scale=rates["student-reference"])
    for name, config in configs.items():
        steps.evaluated_run(name, config, work / name)
        steps.run(f"{name}: export",
                  (RunPaths(work / name).ctranslate2 / "int8" / "model.bin").is_file(),
                  lambda: cli("export", str(config), "--format",
                              "saved_model,onnx,ctranslate2"))
    flags = " ".join(flag for flag in ISA_FLAGS if flag in cpu_flags())
    print(f"\nmachine: {machine()}; {flags}")
    # rate scale: as asked (each config holds it compressed with the recipe)
    print("\n| model | shape | updates | rate scale | test BLEU | chrF |\n"
          "|---|---|---|---|---|---|")
    shapes = {"teacher": args.teacher, "student": args.student,
              "student-reference": args.student}
    updates = {"teacher": args.teacher_steps, "student": args.student_steps,
               "student-reference": args.student_steps}
    for name in configs:
        scores = json.loads(RunPaths(work / name).scores("test").read_text())
        print(f"| {name} | {shapes[name]} | {updates[name]:,} | {rates[name]} | "
              f"{scores['bleu']:.2f} | {scores['chrf']:.2f} |")
    print(steps.table())
    if args.speed_sentences:
        for name in ("teacher", "student"):
            print(f"\n### {name}: bench/decode_speed.py", flush=True)
            subprocess.run([sys.executable, str(Path(__file__).with_name("decode_speed.py")),
                            str(configs[name]), "--sentences", str(args.speed_sentences),
                            "--runtimes", SPEED_RUNTIMES], check=True)


if __name__ == "__main__":
    main()
