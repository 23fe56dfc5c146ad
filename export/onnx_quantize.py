"""model_int8.onnx: ONNX Runtime's dynamic int8 quantization of model.onnx, quietly.

`quantize_int8(source, target)` quantizes the MatMul weights of `source` (the Loop bodies' too,
once `export.onnx_graph` has made them visible initializers) to int8, activations per batch at
run time, and writes `target`. A lexical shortlist's output projection reads no weight but the
columns a batch gathers from one (the rows of the embedding matrix, transposed), which ONNX
Runtime's quantizer would leave in float32 or, the matrix being the embedding's too, read
back from its 8-bit lookup table. So `quantize_shortlist_kernel` first quantizes the matrix
per row (per vocabulary piece) and the projection gathers int8 rows and their scales
(DynamicQuantizeMatMul). The quantizer's warnings about the tensors it leaves in float32
show only under a root logger below WARNING (`keras-transformer --verbose`).

Example:
    quantize_int8(Path("export/onnx/model.onnx"), Path("export/onnx/model_int8.onnx"))
"""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Iterator

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

from export.onnx_graph import CONTRIB_DOMAIN, all_graphs, use_contrib_domain
from keras_transformer.layers.positional_encoding import POSITIONS_OP
from keras_transformer.shortlist import KERNEL_OP


def quantize_int8(source: Path, target: Path) -> None:
    """ONNX Runtime's dynamic quantization of `source`'s MatMul weights (and embedding) to int8
    (activations quantized per batch at run time), inside the Loop body too, the sinusoid
    table's rows left exact, the shortlist's projection quantized first, per piece
    (`quantize_shortlist_kernel`); written to `target`."""
    model = onnx.load(source)
    quantize_shortlist_kernel(model)
    nodes = [node.name for graph in all_graphs(model.graph) for node in graph.node]
    with _quiet_root_logger():
        quantize_dynamic(model, target, weight_type=QuantType.QInt8,
                         nodes_to_exclude=[name for name in nodes
                                           if KERNEL_OP in name or POSITIONS_OP in name],
                         extra_options={"EnableSubgraph": True})


def quantize_shortlist_kernel(model: onnx.ModelProto) -> int:
    """Rewrites, in place, each shortlist projection of `model`: Gather(table [vocab, d], ids)
    named for KERNEL_OP, its rows transposed to the columns [d, U] that MatMul(x, columns)
    reads (in a Loop body or not), becomes Gather(int8 table, ids), Gather(scales [vocab],
    ids), the int8 rows transposed and DynamicQuantizeMatMul(x, int8 columns, their scales)
    (ONNX Runtime's contrib op, x quantized per call as its quantizer does). The table is
    quantized symmetrically per row (one scale per vocabulary piece: max |row| / 127).
    Returns how many.

    Raises:
        ValueError: a gathered table whose rows go elsewhere than through one Transpose into
            MatMul's second input (a graph this rewrite does not know).
    """
    initializers = {tensor.name: tensor for tensor in model.graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}  # tensor name -> the nodes reading it
    for graph in all_graphs(model.graph):
        for node in graph.node:
            for name in node.input:
                readers.setdefault(name, []).append(node)
    gathers = [node for node in model.graph.node
               if KERNEL_OP in node.name and node.op_type == "Gather"
               and node.input[0] in initializers  # float32 [vocab, d]: not yet quantized
               and initializers[node.input[0]].data_type == onnx.TensorProto.FLOAT
               and len(initializers[node.input[0]].dims) == 2]
    projections = [(gather, *_rows_transposed(gather, readers)) for gather in gathers]
    for gather, transpose, matmuls in projections:
        name, rows, columns = gather.input[0], gather.output[0], transpose.output[0]
        if name + "_int8" not in initializers:  # once a table, however many gathers read it
            table = numpy_helper.to_array(initializers[name]).astype(np.float32)  # [vocab, d]
            scales = np.abs(table).max(axis=1) / 127.0  # [vocab]
            scales[scales == 0] = 1.0
            quantized = np.clip(np.rint(table / scales[:, None]), -127, 127).astype(np.int8)
            for tensor in (numpy_helper.from_array(quantized, name + "_int8"),
                           numpy_helper.from_array(scales.astype(np.float32),
                                                   name + "_piece_scales")):
                model.graph.initializer.append(tensor)
                initializers[tensor.name] = tensor
        column_scales = columns + "_scales"  # float32 [U]
        gather.input[0], gather.output[0] = name + "_int8", rows + "_int8"  # int8 [U, d]
        transpose.input[0] = gather.output[0]
        transpose.output[0] = columns + "_int8"  # int8 [d, U]: new names, new value_info
        index = list(model.graph.node).index(gather)
        model.graph.node.insert(index + 1, helper.make_node(
            "Gather", [name + "_piece_scales", gather.input[1]], [column_scales],
            name=gather.name + "_scales", axis=0))
        for node in matmuls:
            node.op_type, node.domain = "DynamicQuantizeMatMul", CONTRIB_DOMAIN
            node.input[1] = transpose.output[0]
            node.input.append(column_scales)
        if not any(name in node.input for graph in all_graphs(model.graph)
                   for node in graph.node):
            model.graph.initializer.remove(initializers[name])  # the float32 table
    if gathers:
        use_contrib_domain(model)
    return len(gathers)


def _rows_transposed(gather: onnx.NodeProto, readers: dict[str, list[onnx.NodeProto]]
                     ) -> tuple[onnx.NodeProto, list[onnx.NodeProto]]:
    """The Transpose that reads the shortlist's gathered rows and the MatMuls reading its
    columns as their second input (`readers`: tensor name -> the nodes reading it)."""
    transposes = readers.get(gather.output[0], [])
    if len(transposes) == 1 and transposes[0].op_type == "Transpose":
        matmuls = readers.get(transposes[0].output[0], [])
        if all(node.op_type == "MatMul" and list(node.input).index(transposes[0].output[0]) == 1
               for node in matmuls):
            return transposes[0], matmuls
    raise ValueError(f"{gather.name}: the shortlist's rows of {gather.input[0]} do not go "
                     "through one Transpose into MatMul's second input")


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """ONNX Runtime's quantizer warns on the root logger, with protobuf dumps, about every
    tensor it leaves in float32 (those that are not MatMul weights): about 70 lines an export.
    They are kept out of normal output; a root logger set below WARNING (`keras-transformer
    --verbose`) still shows them."""
    root = logging.getLogger()
    level = root.level
    if level >= logging.WARNING or level == logging.NOTSET:
        root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)
