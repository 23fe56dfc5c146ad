"""The op audit of a SavedModel: which ops its graphs use, which of them plain TensorFlow
(without tensorflow-text) does not register, which ops or attributes TF Serving's TensorFlow
(export/serving/tf_2_20_op_registry.json) lacks, which functions XLA must compile, and
which nodes no output needs.

`python tests/op_audit.py --dump-registry > FILE` writes the registry of the TensorFlow and
tensorflow-text installed (how the 2.20 one is checked, and remade for another release).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tensorflow.core.protobuf import saved_model_pb2

import export

TEXT_OPS = Path(export.__file__).with_name("serving") / "tf_serving_text_ops.txt"
SERVING_REGISTRY = Path(export.__file__).with_name("serving") / "tf_2_20_op_registry.json"
# Names of the ops plain TensorFlow (without tensorflow-text) registers.
PLAIN_OPS = """
import json
import tensorflow
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session

ops = op_def_pb2.OpList.FromString(pywrap_tf_session.TF_GetBuffer(
    pywrap_tf_session.TF_GetAllOpList())).op
print(json.dumps([op.name for op in ops]))
"""


def _graph(version_dir: Path):
    saved = saved_model_pb2.SavedModel.FromString((version_dir / "saved_model.pb").read_bytes())
    return saved.meta_graphs[0].graph_def


def op_audit(version_dir: Path, plain: frozenset[str]) -> tuple[set[str], list[str], set[str]]:
    """(every op of the graph and its functions, those not in `plain` (the ops plain
    TensorFlow registers: `plain_tensorflow_ops`), the TF Text ops TF Serving ships)."""
    graph = _graph(version_dir)
    ops = {node.op for node in graph.node}
    ops |= {node.op for function in graph.library.function for node in function.node_def}
    not_core = [name for name in sorted(ops) if name not in plain]
    allowed = {line.strip() for line in TEXT_OPS.read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    return ops, not_core, allowed


def plain_tensorflow_ops() -> frozenset[str]:
    """The ops plain TensorFlow registers, from a child process that imports it without
    tensorflow-text (this one imported both): a TensorFlow start-up, about 3.5 CPU-s
    (conftest.py's `plain_ops` lists them once per test run)."""
    return frozenset(json.loads(subprocess.run([sys.executable, "-c", PLAIN_OPS],
                                               capture_output=True, text=True,
                                               check=True).stdout))


def compiled_functions(version_dir: Path) -> list[str]:
    """The graph's functions marked for XLA (`_XlaMustCompile`: tf.function jit_compile)."""
    return [function.signature.name for function in _graph(version_dir).library.function
            if function.attr["_XlaMustCompile"].b]


def serving_registry_problems(version_dir: Path, registry: Path = SERVING_REGISTRY) -> list[str]:
    """The ops, and the attributes of known ops, that a SavedModel's nodes (graph and function
    library) use and `registry` (the TensorFlow of TF Serving's release) does not register,
    each once as `op Name (node)` or `Name.attr (node)`: TF Serving's loader refuses a graph
    with any. Attributes starting with `_` are the runtime's own, never registered."""
    ops = json.loads(registry.read_text())["ops"]
    graph = _graph(version_dir)
    functions = {function.signature.name for function in graph.library.function}
    nodes = [*graph.node, *(node for function in graph.library.function
                            for node in function.node_def)]
    problems: dict[str, None] = {}
    for node in nodes:
        if node.op in functions:  # a call of a function of the library
            continue
        if node.op not in ops:
            problems[f"op {node.op} ({node.name})"] = None
            continue
        for attr in node.attr:
            if not attr.startswith("_") and attr not in ops[node.op]:
                problems[f"{node.op}.{attr} ({node.name})"] = None
    return list(problems)


def discarded_nodes(version_dir: Path) -> list[str]:
    """`function/node` of every node of the function library (constants aside) that no
    output of its function needs: TF Serving's first run of a signature pays Grappler's
    constant folding a pass over the whole inlined graph per link of a chain of them
    (keras_transformer.model's `cross_attention_weights`)."""
    discarded = []
    for function in _graph(version_dir).library.function:
        nodes = {node.name: node for node in function.node_def}
        needed: set[str] = set()
        stack = [name.split(":")[0] for name in (*function.ret.values(),
                                                 *function.control_ret.values())]
        while stack:
            name = stack.pop()
            if name in nodes and name not in needed:
                needed.add(name)
                stack.extend(name.lstrip("^").split(":")[0] for name in nodes[name].input)
        discarded += [f"{function.signature.name}/{name}" for name, node in nodes.items()
                      if name not in needed and node.op != "Const" and not _map_fn_own(node)]
    return discarded


def _map_fn_own(node) -> bool:
    """A TensorArray (a TensorListReserve) that tf.map_fn (sampling's draw per row) makes and
    leaves unread: one node, no chain."""
    return node.op == "TensorListReserve" and "/map/TensorArrayV2" in f"/{node.name}"


def dump_registry() -> dict:
    """The installed TensorFlow's and tensorflow-text's ops, each with its attribute names."""
    import tensorflow as tf
    import tensorflow_text
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session

    buffer = pywrap_tf_session.TF_GetAllOpList()
    op_list = op_def_pb2.OpList.FromString(pywrap_tf_session.TF_GetBuffer(buffer))
    return {"tensorflow": tf.__version__, "tensorflow_text": tensorflow_text.__version__,
            "ops": {op.name: sorted(attr.name for attr in op.attr)
                    for op in sorted(op_list.op, key=lambda op: op.name)}}


if __name__ == "__main__" and sys.argv[1:] == ["--dump-registry"]:
    json.dump(dump_registry(), sys.stdout, indent=1)
