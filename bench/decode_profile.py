"""Where the SavedModel's beam search spends its time: TensorFlow's profiler over the
`translate_ids` signature on a run's test sentences, microseconds per output token by op type
(summed over the intra-op threads).

    .venv/bin/python bench/decode_profile.py [CONFIG] [--sentences 20] [--batch-size 1]
                                             [--top 25]

The export: the newest SavedModel version of runs/NAME/export. Each batch runs once untimed
(tracing, warm-up) and once under the profiler. Op names are the kernels TensorFlow ran
(oneDNN's start with _Mkl). LogSoftmax runs once per decoding step, so at batch 1 its calls
per token are the steps beam search takes per output token.
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import sys
import tempfile

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", default="demo")
    parser.add_argument("--sentences", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from export.loading import resolve_export
    from export.saved_model import SavedModelTranslator
    from pipelines.config import load_config
    from pipelines.paths import RunPaths

    config = load_config(args.config)
    version = resolve_export(RunPaths(config.run_path).export, "tf")[1]
    signature = SavedModelTranslator(version).loaded.signatures["translate_ids"]
    sources = test_split(config, args.sentences)[0]
    batches = []
    for start in range(0, len(sources), args.batch_size):
        rows = sources[start:start + args.batch_size]
        ids = np.zeros([len(rows), max(map(len, rows))], np.int32)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = row
        batches.append(tf.constant(ids))
    tokens = sum(int(np.count_nonzero(signature(source_ids=ids)["target_ids"]))
                 for ids in batches)  # untimed: tracing and warm-up
    with tempfile.TemporaryDirectory() as trace_dir:
        tf.profiler.experimental.start(trace_dir)
        for ids in batches:
            signature(source_ids=ids)
        tf.profiler.experimental.stop()
        micros, calls = op_times(trace_dir)
    print(f"{version}: {len(sources)} test sentences in batches of {args.batch_size}, "
          f"{tokens} output tokens (EOS included)\n"
          f"{'op':<28}{'us/token':>10}{'calls/token':>13}{'us/call':>9}")
    for op, total in micros.most_common(args.top):
        print(f"{op:<28}{total / tokens:>10.1f}{calls[op] / tokens:>13.1f}"
              f"{total / calls[op]:>9.1f}")
    print(f"{'all kernels':<28}{sum(micros.values()) / tokens:>10.1f}"
          f"{sum(calls.values()) / tokens:>13.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
