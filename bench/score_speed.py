"""Scoring speed of each runtime that scores: pairs/s and target tokens/s of `score_pairs` on
a run's test split (source, reference), through the SavedModel's `score` signature, the ONNX
export's score.onnx and CTranslate2 float32 and int8, each in a process of its own, one warm-up
batch untimed.

    .venv/bin/python bench/score_speed.py [CONFIG] [--pairs N] [--batch-size 32]
                                          [--threads N] [--runtimes tf,onnx,ct2-float32,ct2-int8]

The export: runs/NAME/export (its newest SavedModel version, ONNX and CTranslate2 models).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

RUNTIMES = ("tf", "onnx", "ct2-float32", "ct2-int8")


def worker(runtime: str, export_dir: Path, pairs: list[tuple[str, str]], batch_size: int,
           threads: int) -> dict:
    """Seconds, pairs and target tokens (EOS included) of scoring `pairs` with `runtime`."""
    if runtime == "tf":
        import tensorflow as tf

        from export.loading import resolve_export
        from export.saved_model import SavedModelTranslator

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        scorer = SavedModelTranslator(resolve_export(export_dir, "tf")[1])
    elif runtime == "onnx":
        from export.onnx_runtime import OnnxTranslator

        scorer = OnnxTranslator(export_dir / "onnx", threads)
    else:
        from export.ct2_runtime import CTranslate2Translator

        scorer = CTranslate2Translator(export_dir / "ctranslate2", runtime.removeprefix("ct2-"),
                                       threads)
    scorer.score_pairs(pairs[:batch_size], batch_size)  # warm-up
    start = time.perf_counter()
    scores = scorer.score_pairs(pairs, batch_size)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "pairs": len(pairs),
            "tokens": sum(len(score.token_ids) for score in scores),
            "log_prob": sum(score.log_prob for score in scores)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", default="demo")
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--runtimes", default=",".join(RUNTIMES))
    parser.add_argument("--worker", choices=RUNTIMES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from pipelines.config import load_config
    from pipelines.paths import RunPaths

    paths = RunPaths(load_config(args.config).run_path)
    if args.worker:
        pairs = [tuple(pair) for pair in json.loads(sys.stdin.read())]
        print(json.dumps(worker(args.worker, paths.export, pairs, args.batch_size,
                                args.threads)))
        return 0
    source, target = paths.split("test")
    with open(source, encoding="utf-8") as sources, open(target, encoding="utf-8") as targets:
        pairs = [(s.rstrip("\n"), t.rstrip("\n")) for s, t in zip(sources, targets)]
    pairs = pairs[:args.pairs]
    print(f"{len(pairs)} test pairs of {paths.export}, batch {args.batch_size}, "
          f"{args.threads} thread(s)\n{'runtime':<14}{'pairs/s':>9}{'tokens/s':>10}"
          f"{'sum log-prob':>14}")
    for runtime in args.runtimes.split(","):
        done = subprocess.run([sys.executable, __file__, args.config, "--worker", runtime,
                               "--batch-size", str(args.batch_size), "--threads",
                               str(args.threads)], input=json.dumps(pairs),
                              capture_output=True, text=True)
        if done.returncode:
            sys.stderr.write(done.stderr)
            return done.returncode
        result = json.loads(done.stdout.splitlines()[-1])
        print(f"{runtime:<14}{result['pairs'] / result['seconds']:>9.1f}"
              f"{result['tokens'] / result['seconds']:>10.1f}{result['log_prob']:>14.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
