"""model_int8.onnx: ONNX Runtime's dynamic int8 quantization of model.onnx, quietly.

`quantize_int8(source, target)` quantizes the MatMul weights of `source` (the Loop bodies' too,
once `export.onnx_graph` has made them visible initializers) to int8, activations per batch at
run time, and writes `target`; the quantizer's warnings about the tensors it leaves in float32
show only under a root logger below WARNING (`keras-transformer --verbose`).

Example:
    quantize_int8(Path("export/onnx/model.onnx"), Path("export/onnx/model_int8.onnx"))
"""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Iterator

from onnxruntime.quantization import QuantType, quantize_dynamic


def quantize_int8(source: Path, target: Path) -> None:
    """ONNX Runtime's dynamic quantization of `source`'s MatMul weights to int8 (activations
    quantized per batch at run time), inside the Loop body too; written to `target`."""
    with _quiet_root_logger():
        quantize_dynamic(source, target, weight_type=QuantType.QInt8,
                         extra_options={"EnableSubgraph": True})


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
