"""The op audit of a SavedModel: which ops its graphs use, which of them plain TensorFlow
(without tensorflow-text) does not register, and which functions XLA must compile."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tensorflow.core.protobuf import saved_model_pb2

import export

TEXT_OPS = Path(export.__file__).with_name("serving") / "tf_serving_text_ops.txt"
# Names of the ops plain TensorFlow (without tensorflow-text) does not register.
NOT_CORE = """
import json, sys
import tensorflow
from tensorflow.python.framework import op_def_registry
print(json.dumps([name for name in json.load(sys.stdin) if op_def_registry.get(name) is None]))
"""


def _graph(version_dir: Path):
    saved = saved_model_pb2.SavedModel.FromString((version_dir / "saved_model.pb").read_bytes())
    return saved.meta_graphs[0].graph_def


def op_audit(version_dir: Path) -> tuple[set[str], list[str], set[str]]:
    """(every op of the graph and its functions, those plain TensorFlow does not register,
    the TF Text ops TF Serving ships)."""
    graph = _graph(version_dir)
    ops = {node.op for node in graph.node}
    ops |= {node.op for function in graph.library.function for node in function.node_def}
    not_core = json.loads(subprocess.run([sys.executable, "-c", NOT_CORE], input=json.dumps(
        sorted(ops)), capture_output=True, text=True, check=True).stdout)
    allowed = {line.strip() for line in TEXT_OPS.read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    return ops, not_core, allowed


def compiled_functions(version_dir: Path) -> list[str]:
    """The graph's functions marked for XLA (`_XlaMustCompile`: tf.function jit_compile)."""
    return [function.signature.name for function in _graph(version_dir).library.function
            if function.attr["_XlaMustCompile"].b]
