"""model_int8.onnx: ONNX Runtime's dynamic int8 quantization of model.onnx, quietly.

`quantize_int8(source, target)` quantizes the MatMul weights of `source` (the Loop bodies' too,
once `export.onnx_graph` has made them visible initializers) to int8, activations per batch at
run time, and writes `target` (a lexical shortlist's gathered kernel columns stay float32: no
weight, they are computed per batch); the quantizer's warnings about the tensors it leaves in float32
show only under a root logger below WARNING (`keras-transformer --verbose`).

Example:
    quantize_int8(Path("export/onnx/model.onnx"), Path("export/onnx/model_int8.onnx"))
"""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Iterator

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic

from keras_transformer.shortlist import KERNEL_OP


def quantize_int8(source: Path, target: Path) -> None:
    """ONNX Runtime's dynamic quantization of `source`'s MatMul weights to int8 (activations
    quantized per batch at run time), inside the Loop body too; written to `target`."""
    excluded = [node.name for node in _nodes(onnx.load(source).graph) if KERNEL_OP in node.name]
    with _quiet_root_logger():
        quantize_dynamic(source, target, weight_type=QuantType.QInt8,
                         nodes_to_exclude=excluded, extra_options={"EnableSubgraph": True})


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """The nodes of `graph` and of its subgraphs (Loop and If bodies)."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(attribute.g)


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
