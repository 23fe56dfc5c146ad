"""model_int8.onnx: ONNX Runtime's dynamic int8 quantization of model.onnx, quietly.

`quantize_int8(source, target)` quantizes the MatMul weights of `source` (the Loop bodies' too,
once `export.onnx_graph` has made them visible initializers) to int8, activations per batch at
run time, and writes `target`. A lexical shortlist's output projection reads no weight but the
columns a batch gathers from one; ONNX Runtime's quantizer leaves it in float32, so
`quantize_shortlist_kernel` quantizes the kernel per column and the projection gathers int8
columns and their scales (DynamicQuantizeMatMul). The quantizer's warnings about the tensors it
leaves in float32 show only under a root logger below WARNING (`keras-transformer --verbose`).

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
    table's rows left exact; written to `target`."""
    nodes = [node.name for graph in all_graphs(onnx.load(source).graph) for node in graph.node]
    shortlisted = [name for name in nodes if KERNEL_OP in name]
    with _quiet_root_logger():
        quantize_dynamic(source, target, weight_type=QuantType.QInt8,
                         nodes_to_exclude=shortlisted + [n for n in nodes if POSITIONS_OP in n],
                         extra_options={"EnableSubgraph": True})
    if shortlisted:
        model = onnx.load(target)
        quantize_shortlist_kernel(model)
        onnx.save(model, target)


def quantize_shortlist_kernel(model: onnx.ModelProto) -> int:
    """Rewrites, in place, each shortlist projection of `model`: Gather(kernel [d, vocab],
    ids, axis 1) named for KERNEL_OP, read by MatMul(x, columns) (in a Loop body or not),
    becomes Gather(int8 kernel, ids), Gather(scales [vocab], ids) and
    DynamicQuantizeMatMul(x, int8 columns, their scales) (ONNX Runtime's contrib op, x
    quantized per call as its quantizer does). The kernel is quantized symmetrically per
    column (one scale per vocabulary piece: max |column| / 127). Returns how many."""
    initializers = {tensor.name: tensor for tensor in model.graph.initializer}
    gathers = [node for node in model.graph.node
               if KERNEL_OP in node.name and node.op_type == "Gather"
               and node.input[0] in initializers  # float32 [d, vocab]: not yet quantized
               and initializers[node.input[0]].data_type == onnx.TensorProto.FLOAT
               and len(initializers[node.input[0]].dims) == 2]
    for gather in gathers:
        name = gather.input[0]
        kernel = numpy_helper.to_array(initializers[name]).astype(np.float32)  # [d, vocab]
        scales = np.abs(kernel).max(axis=0) / 127.0  # [vocab]
        scales[scales == 0] = 1.0
        quantized = np.clip(np.rint(kernel / scales), -127, 127).astype(np.int8)  # [d, vocab]
        model.graph.initializer.extend([
            numpy_helper.from_array(quantized, name + "_int8"),
            numpy_helper.from_array(scales.astype(np.float32), name + "_column_scales")])
        columns = gather.output[0]  # float32 [d, U]: its consumers' input, its value_info
        column_scales = columns + "_scales"
        gather.input[0], gather.output[0] = name + "_int8", columns + "_int8"  # int8 [d, U]
        index = list(model.graph.node).index(gather)
        model.graph.node.insert(index + 1, helper.make_node(
            "Gather", [name + "_column_scales", gather.input[1]], [column_scales],
            name=gather.name + "_scales", axis=0))
        for graph in all_graphs(model.graph):
            for node in graph.node:
                if node.op_type == "MatMul" and node.input[1] == columns:
                    node.op_type, node.domain = "DynamicQuantizeMatMul", CONTRIB_DOMAIN
                    node.input[1] = gather.output[0]
                    node.input.append(column_scales)
        if not any(name in node.input for graph in all_graphs(model.graph)
                   for node in graph.node):
            model.graph.initializer.remove(initializers[name])  # the float32 kernel
    if gathers:
        use_contrib_domain(model)
    return len(gathers)


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
