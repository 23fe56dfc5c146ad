"""Decoding speed of the exports, beam search inside: sentences/s and target tokens/s of the
SavedModel (TensorFlow) and of model.onnx (ONNX Runtime) at batch sizes 1 and 32 on a run's
test split, and decode time against output length (batch 1: the cache makes it linear).

    .venv/bin/python bench/decode_speed.py [CONFIG] [--sentences N] [--threads N]

The model: runs/NAME/export if it exists, else an export of the run's checkpoint, else (said
in the output) a randomly initialised model of the config's preset, which decodes every
sentence to the length limit (source length + evaluate.extra_length). Each runtime runs in a
process of its own (its own thread pools; ONNX Runtime never beside TensorFlow). The ids
signatures are timed (translate_ids, model.onnx): sources are tokenized beforehand, batches
of similar lengths as `translate_lines` makes them, and target tokens are counted exactly
(EOS included). One warm-up batch per batch size is not timed; at batch 1 each sentence runs
twice and the length table takes the faster run (other processes share the CPU).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pipelines.paths import RunPaths

BATCH_SIZES = (1, 32)
LENGTH_BUCKET = 10  # output tokens per row of the length table
REPEATS = 2  # batch-1 runs per sentence: the length table takes the fastest (a busy machine)


def worker(runtime: str, model_dir: Path, sources: list[list[int]], batch_size: int,
           threads: int, repeats: int) -> list[dict]:
    """Times `sources` decoded in batches, each `repeats` times: [{"seconds": [per run],
    "sentences", "tokens", "lengths"}] per batch."""
    if runtime == "onnx":
        from export.onnx_runtime import OnnxTranslator

        translate_ids = OnnxTranslator(model_dir, threads=threads).translate_ids
    else:
        import tensorflow as tf

        from export.saved_model import SavedModelTranslator

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        signature = SavedModelTranslator(model_dir).loaded.signatures["translate_ids"]

        def translate_ids(ids: np.ndarray) -> dict[str, np.ndarray]:
            return {k: v.numpy() for k, v in signature(source_ids=tf.constant(ids)).items()}

    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    batches = [[sources[i] for i in order[start:start + batch_size]]
               for start in range(0, len(order), batch_size)]
    translate_ids(_pad(batches[len(batches) // 2]))  # warm-up
    results = []
    for batch in batches:
        ids = _pad(batch)
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            target = translate_ids(ids)["target_ids"]
            seconds.append(time.perf_counter() - start)
        lengths = [int(n) for n in np.sum(target != 0, axis=1)]  # EOS included, PAD after
        results.append({"seconds": seconds, "sentences": len(batch), "tokens": sum(lengths),
                        "lengths": lengths})
    return results


def _pad(rows: list[list[int]]) -> np.ndarray:
    ids = np.zeros([len(rows), max(len(r) for r in rows)], np.int32)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = row
    return ids


def find_model(config_name: str, scratch: Path) -> tuple[Path, Path, str]:
    """(SavedModel version, ONNX directory, what the model is), exporting if needed."""
    from export.versions import latest_version
    from pipelines.config import load_config

    config = load_config(config_name)
    paths = RunPaths(config.run_path)
    version = latest_version(paths.saved_model)
    if version and (paths.onnx / "model.onnx").is_file():
        return version, paths.onnx, f"the export of {config.run_path}"
    from pipelines.checkpoints import default_checkpoint

    try:
        default_checkpoint(paths)
    except ValueError:
        return _export_random(config, scratch) + (
            f"UNTRAINED: a random {config.model.preset} model (no checkpoint in "
            f"{config.run_path}); it decodes every sentence to the length limit",)
    from pipelines.export import export_run

    summary = export_run(config)
    return summary.saved_model, summary.onnx, f"{summary.checkpoint}, just exported"


def _export_random(config, directory: Path) -> tuple[Path, Path]:
    import keras

    from export.onnx import export_onnx
    from export.saved_model import export_saved_model
    from export.translator import Translator
    from keras_transformer.tokenizer import Tokenizer
    from pipelines.models import build_model

    keras.utils.set_random_seed(0)
    model_proto = RunPaths(config.run_path).spm_model.read_bytes()
    model = build_model(config, Tokenizer(model_proto).vocab_size, "float32")
    settings = config.evaluate
    translator = Translator(model, model_proto, beam_size=settings.beam_size,
                            alpha=settings.alpha, max_source_length=config.data.max_length,
                            extra_length=settings.extra_length)
    export_onnx(translator, directory / "onnx")
    return export_saved_model(translator, directory / "saved_model"), directory / "onnx"


def source_ids(config_name: str, count: int) -> list[list[int]]:
    """The first `count` test sources as the exports read them (pieces, EOS)."""
    import sentencepiece as spm

    from keras_transformer.tokenizer import EOS_ID
    from pipelines.config import load_config

    config = load_config(config_name)
    paths, limit = RunPaths(config.run_path), config.data.max_length - 1
    processor = spm.SentencePieceProcessor(model_file=str(paths.spm_model))
    with open(paths.split("test")[0], encoding="utf-8") as file:
        lines = [line.rstrip("\n") for line, _ in zip(file, range(count))]
    return [processor.encode(line)[:limit] + [EOS_ID] for line in lines]


def report(results: dict[str, dict[int, list[dict]]], about: str, threads: int) -> str:
    """Throughput per runtime and batch size (first runs), then batch-1 decode time against
    output length (fastest runs) with a linear fit per runtime."""
    lines = [f"model: {about}",
             f"{threads} intra-op thread(s) per runtime, beam search in the graph",
             "", f"{'runtime':<18}{'batch':>6}{'sentences':>11}{'sent/s':>9}{'tokens/s':>10}"]
    for runtime, by_batch in results.items():
        for batch_size, batches in by_batch.items():
            seconds = sum(b["seconds"][0] for b in batches)
            sentences = sum(b["sentences"] for b in batches)
            tokens = sum(b["tokens"] for b in batches)
            lines.append(f"{runtime:<18}{batch_size:>6}{sentences:>11}"
                         f"{sentences / seconds:>9.2f}{tokens / seconds:>10.1f}")
    singles = {runtime: (np.array([b["lengths"][0] for b in by_batch[1]], float),
                         np.array([min(b["seconds"]) for b in by_batch[1]]))
               for runtime, by_batch in results.items()}
    lines += ["", f"batch 1, fastest of {REPEATS} runs: mean ms per sentence (ms per output "
              "token) by output length", f"{'tokens':<10}{'sentences':>10}"
              + "".join(f"{runtime:>24}" for runtime in singles)]
    length = next(iter(singles.values()))[0]
    for low in range(0, int(length.max()) + 1, LENGTH_BUCKET):
        chosen = (length >= low) & (length < low + LENGTH_BUCKET)
        if chosen.any():
            cells = "".join(f"{1000 * t[chosen].mean():>15.1f} "
                            f"({1000 * (t / n)[chosen].mean():>5.1f})" for n, t in singles.values())
            lines.append(f"{low:>3}-{low + LENGTH_BUCKET - 1:<6}{int(chosen.sum()):>10}{cells}")
    for runtime, (n, t) in singles.items():
        slope, intercept = np.polyfit(n, t, 1)
        r2 = 1 - np.sum((t - slope * n - intercept) ** 2) / np.sum((t - t.mean()) ** 2)
        lines.append(f"{runtime}: time = {1000 * intercept:.0f} ms + {1000 * slope:.2f} ms "
                     f"x output tokens (R^2 {r2:.2f})")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", default="demo")
    parser.add_argument("--sentences", type=int, default=200, help="test sentences decoded")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--worker", choices=("tf", "onnx"), help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.worker:
        sources = json.loads(sys.stdin.read())
        repeats = REPEATS if args.batch_size == 1 else 1
        print(json.dumps(worker(args.worker, Path(args.model_dir), sources, args.batch_size,
                                args.threads, repeats)))
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        version, onnx_dir, about = find_model(args.config, Path(scratch))
        sources = json.dumps(source_ids(args.config, args.sentences))
        results: dict[str, dict[int, list[dict]]] = {}
        for runtime, name, directory in (("tf", "SavedModel (TF)", version),
                                         ("onnx", "model.onnx (ORT)", onnx_dir)):
            results[name] = {}
            for batch_size in BATCH_SIZES:
                done = subprocess.run(
                    [sys.executable, __file__, "--worker", runtime, "--model-dir",
                     str(directory), "--batch-size", str(batch_size), "--threads",
                     str(args.threads)], input=sources, capture_output=True, text=True)
                if done.returncode:
                    sys.stderr.write(done.stderr)
                    return done.returncode
                results[name][batch_size] = json.loads(done.stdout.splitlines()[-1])
        print(report(results, about, args.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
