"""What a TF Serving load costs per signature: the seconds (wall and CPU) of each signature's
warm-up requests (assets.extra/tf_serving_warmup_requests: one line, then all its lines) in
TF1's session loader, as the server runs them. The first request pays the session's graph
optimization (Grappler, functions inlined) and, for an XLA export, compilation; the second
is a served request's cost. Each signature runs in a process of its own.

    .venv/bin/python bench/first_request.py VERSION_DIR [VERSION_DIR ...]
                                            [--signatures serving_default,translate_aligned]

VERSION_DIR: a SavedModel version (runs/NAME/export/saved_model/N); several are compared
signature by signature, taking turns.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path


def worker(version_dir: Path, signature: str) -> dict[str, list[float]]:
    """{"wall": [...], "cpu": [...]}: seconds of each warm-up request of `signature`, in order,
    in a new TF1 session of the SavedModel at `version_dir`."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (registers the SentencePiece ops)
    from tensorflow_serving.apis import prediction_log_pb2

    from export.metadata import SAVED_MODEL_EXTRA
    from export.saved_model import WARMUP_FILE

    tf.get_logger().setLevel("ERROR")  # the TF1 loader's deprecation notice
    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph)
    with graph.as_default():
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(version_dir))
    definition = meta_graph.signature_def[signature]
    fetches = {name: info.name for name, info in definition.outputs.items()}
    records = tf.data.TFRecordDataset(str(version_dir / SAVED_MODEL_EXTRA / WARMUP_FILE))
    requests = [log.predict_log.request for log in (
        prediction_log_pb2.PredictionLog.FromString(record.numpy()) for record in records)
        if log.predict_log.request.model_spec.signature_name == signature]
    times: dict[str, list[float]] = {"wall": [], "cpu": []}
    for request in requests:
        feeds = {definition.inputs[name].name: tf.make_ndarray(tensor)
                 for name, tensor in request.inputs.items()}
        start, cpu = time.perf_counter(), _cpu_seconds()
        session.run(fetches, feeds)
        times["wall"].append(time.perf_counter() - start)
        times["cpu"].append(_cpu_seconds() - cpu)
    return times


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _signatures(version_dir: Path) -> list[str]:
    from export.metadata import saved_model_metadata
    from export.translator.signatures import signatures

    return list(signatures(saved_model_metadata(version_dir).target_languages))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="+", type=Path)
    parser.add_argument("--signatures", help="comma-separated (default: every one)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.versions[0], args.worker)))
        return 0
    names = args.signatures.split(",") if args.signatures else _signatures(args.versions[0])
    print(f"{'signature':22} {'first s (CPU)':>14} {'second s (CPU)':>15}  version")
    for name in names:
        for version in args.versions:
            result = subprocess.run([sys.executable, __file__, str(version), "--worker", name],
                                    capture_output=True, text=True, check=True)
            times = json.loads(result.stdout.strip().splitlines()[-1])
            cells = [f"{wall:.2f} ({cpu:.2f})" for wall, cpu in zip(times["wall"], times["cpu"])]
            print(f"{name:22} {cells[0]:>14} {cells[-1]:>15}  {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
