"""Where an export's beam search spends its time on a run's test sentences, microseconds per
output token by op type (summed over the intra-op threads): the SavedModel's `translate_ids`
signature under TensorFlow's profiler, or with `--onnx MODEL` (model.onnx, model_int8.onnx) the
ONNX export's model under ONNX Runtime's, which also names the nodes that take longest.

    .venv/bin/python bench/decode_profile.py [CONFIG] [--sentences 20] [--batch-size 1]
                                             [--top 25] [--onnx model_int8.onnx [--threads N]]

The export: the newest SavedModel version (or the ONNX directory) of runs/NAME/export. Each
batch runs once untimed (tracing, warm-up) and once under the profiler. Op names are the
kernels TensorFlow ran (oneDNN's start with _Mkl). LogSoftmax runs once per decoding step, so
at batch 1 its calls per token are the steps beam search takes per output token. ONNX
Runtime's profiler records every node it runs, a Loop's body's too: a Loop's own time includes
its body's, so the table leaves Loop out; the profiler's own cost per node inflates the small
ones.
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from decode_models import test_split  # bench/decode_models.py


def op_times(trace_dir: str) -> tuple[collections.Counter, collections.Counter]:
    """(microseconds, calls) per op type of the kernels in the profiler's trace."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    path = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)[0]
    with open(path, "rb") as file:
        space.ParseFromString(file.read())
    micros, calls = collections.Counter(), collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                op = name.rsplit(":", 1)[-1].strip()
                if ":" in name and "::" not in name and not op.startswith("__"):  # node:Op
                    micros[op] += event.duration_ps / 1e6
                    calls[op] += 1
    return micros, calls


def onnx_times(directory: Path, model_file: str, batches: list[np.ndarray], threads: int | None
               ) -> tuple[int, collections.Counter, collections.Counter, collections.Counter,
                          collections.Counter]:
    """The output tokens (EOS included), and (microseconds, calls) per op type and per node
    name, of `batches` decoded by the ONNX model under ONNX Runtime's profiler (one untimed
    pass first)."""
    import onnxruntime as ort

    from export.onnx_runtime import session_options

    session = ort.InferenceSession(str(directory / model_file), session_options(threads))
    tokens = sum(int(np.count_nonzero(session.run(["target_ids"], {"source_ids": ids})[0]))
                 for ids in batches)
    with tempfile.TemporaryDirectory() as trace_dir:
        options = session_options(threads)
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(trace_dir, "profile")
        session = ort.InferenceSession(str(directory / model_file), options)
        for ids in batches:
            session.run(None, {"source_ids": ids})
        with open(session.end_profiling()) as file:
            events = json.load(file)
    by_op, op_calls, by_node, node_calls = (collections.Counter() for _ in range(4))
    for event in events:
        op = event.get("args", {}).get("op_name")
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time") and op != "Loop":
            by_op[op] += event["dur"]
            op_calls[op] += 1
            node = f"{event['name'].removesuffix('_kernel_time')} ({op})"
            by_node[node] += event["dur"]
            node_calls[node] += 1
    return tokens, by_op, op_calls, by_node, node_calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", default="demo")
    parser.add_argument("--sentences", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--onnx", metavar="MODEL", help="model.onnx or model_int8.onnx of the "
                        "ONNX export instead of the SavedModel")
    parser.add_argument("--threads", type=int, help="ONNX Runtime's intra-op threads")
    args = parser.parse_args()
    from export.loading import resolve_export
    from pipelines.config import load_config
    from pipelines.paths import RunPaths

    config = load_config(args.config)
    sources = test_split(config, args.sentences)[0]
    batches = []
    for start in range(0, len(sources), args.batch_size):
        rows = sources[start:start + args.batch_size]
        ids = np.zeros([len(rows), max(map(len, rows))], np.int32)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = row
        batches.append(ids)
    if args.onnx:
        directory = resolve_export(RunPaths(config.run_path).export, "onnx")[1]
        tokens, micros, calls, node_micros, node_calls = onnx_times(
            directory, args.onnx, [ids.astype(np.int32) for ids in batches], args.threads)
        print(f"{directory / args.onnx}: {len(sources)} test sentences in batches of "
              f"{args.batch_size}, {tokens} output tokens (EOS included)")
        print_table(micros, calls, tokens, "op", "us/token", "calls/token", args.top)
        print_table(node_micros, node_calls, tokens, "node", "us/token", "calls/token",
                    args.top)
        return 0
    from pipelines.startup import default_log_level, import_tensorflow_quietly

    default_log_level("translate")  # TensorFlow from here only, as the CLI starts it
    import_tensorflow_quietly()
    import tensorflow as tf

    from export.saved_model import SavedModelTranslator

    version = resolve_export(RunPaths(config.run_path).export, "tf")[1]
    signature = SavedModelTranslator(version).loaded.signatures["translate_ids"]
    batches = [tf.constant(ids) for ids in batches]
    tokens = sum(int(np.count_nonzero(signature(source_ids=ids)["target_ids"]))
                 for ids in batches)  # untimed: tracing and warm-up
    with tempfile.TemporaryDirectory() as trace_dir:
        tf.profiler.experimental.start(trace_dir)
        for ids in batches:
            signature(source_ids=ids)
        tf.profiler.experimental.stop()
        micros, calls = op_times(trace_dir)
    print(f"{version}: {len(sources)} test sentences in batches of {args.batch_size}, "
          f"{tokens} output tokens (EOS included)")
    print_table(micros, calls, tokens, "op", "us/token", "calls/token", args.top)
    return 0


def print_table(micros: collections.Counter, calls: collections.Counter, per: int, name: str,
                time_column: str, calls_column: str, top: int) -> None:
    """The `top` largest of `micros` (and their `calls`) per `per`, then all of them."""
    width = max([28] + [len(key) + 2 for key, _ in micros.most_common(top)])
    print(f"{name:<{width}}{time_column:>10}{calls_column:>13}{'us/call':>9}")
    for key, total in micros.most_common(top):
        print(f"{key:<{width}}{total / per:>10.1f}{calls[key] / per:>13.1f}"
              f"{total / calls[key]:>9.1f}")
    print(f"{'all kernels':<{width}}{sum(micros.values()) / per:>10.1f}"
          f"{sum(calls.values()) / per:>13.1f}")


if __name__ == "__main__":
    sys.exit(main())
