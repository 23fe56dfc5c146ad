"""How many nodes each decoding loop of a run's export runs: the Loop bodies of model.onnx and
model_int8.onnx as ONNX Runtime optimizes them for its session, and the while-loop bodies of
the newest SavedModel version (all nodes, and those that are not Const). At batch 1 a beam
search step's products are small, so its node count weighs in its time
(docs/decoding-speed.md, "Beam search in the graph: its ops and costs
(`keras_transformer/decoding.py`)").

    .venv/bin/python bench/step_nodes.py [CONFIG]

The beam search's inner loop is its step; the outer one retires the sentences that are done
(`keras_transformer.decoding`). Node counts depend on the graph alone, not on the machine's
speed (ONNX Runtime's optimizations may depend on its instruction set).
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from export.metadata import INT8_MODEL_FILE, MODEL_FILE  # noqa: E402
from export.versions import latest_version  # noqa: E402
from pipelines.config import load_config  # noqa: E402
from pipelines.paths import RunPaths  # noqa: E402


def onnx_loop_nodes(model_path: Path) -> list[tuple[int, int]]:
    """(depth, nodes) of each Loop body of the model as ONNX Runtime optimizes it, outer first."""
    import onnx
    import onnxruntime as ort

    from export.onnx_runtime import session_options

    ort.set_default_logger_severity(3)  # not its warning on saving an optimized model
    with tempfile.TemporaryDirectory() as scratch:
        options = session_options()
        options.optimized_model_filepath = os.path.join(scratch, "optimized.onnx")
        ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        model = onnx.load(options.optimized_model_filepath, load_external_data=False)
    found: list[tuple[int, int]] = []

    def walk(graph: onnx.GraphProto, depth: int) -> None:
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    found.append((depth, len(attribute.g.node)))
                    walk(attribute.g, depth + 1)

    walk(model.graph, 0)
    return found


def saved_model_loop_nodes(version: Path) -> dict[str, tuple[int, int]]:
    """{while-loop body function: (nodes, nodes not Const)} of a SavedModel version."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((version / "saved_model.pb").read_bytes())
    counts = {}
    for function in saved_model.meta_graphs[0].graph_def.library.function:
        if "while_body" in function.signature.name:
            ops = collections.Counter(node.op for node in function.node_def)
            counts[function.signature.name] = (len(function.node_def),
                                               len(function.node_def) - ops["Const"])
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", default="demo")
    paths = RunPaths(load_config(parser.parse_args().config).run_path)
    for name in (MODEL_FILE, INT8_MODEL_FILE):
        if (paths.onnx / name).is_file():
            loops = ", ".join(f"depth {depth}: {nodes}"
                              for depth, nodes in onnx_loop_nodes(paths.onnx / name))
            print(f"{name}: Loop bodies after ONNX Runtime's optimizations: {loops}")
    version = latest_version(paths.saved_model, "saved_model.pb")
    if version is not None:
        for function, (nodes, computed) in sorted(saved_model_loop_nodes(version).items()):
            print(f"SavedModel {version.name} {function}: {nodes} nodes ({computed} not Const)")


if __name__ == "__main__":
    main()
