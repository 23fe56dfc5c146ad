"""Rewrites of a converted ONNX model: loop invariants out of the beam-search Loop, and int8
weights.

tf2onnx turns every tensor that the TF while loop captures (the weights, the encoder memory's
projections) into a loop-carried value that the body passes through unchanged; ONNX Runtime
then copies each of them at every decoding step (the decoder's weights: ~100 MB a step for
the base model) and its quantizer, which looks for initializers, finds no weight to quantize
inside the body. `hoist_loop_invariants` makes the body read them from the outer scope
instead (what ONNX's implicit inputs are for): the same results, and the weights visible.
"""
from __future__ import annotations

from pathlib import Path

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic


def hoist_loop_invariants(model: onnx.ModelProto) -> int:
    """Removes, in place, the loop-carried values of the top-level Loops that every iteration
    passes through unchanged (directly or through Identity) and that nothing reads after the
    loop; the body reads their initial values instead. Returns how many were removed."""
    graph = model.graph
    read_after = {name for node in graph.node for name in node.input}
    read_after |= {output.name for output in graph.output}
    removed = 0
    for loop in (node for node in graph.node if node.op_type == "Loop"):
        body = next(attribute.g for attribute in loop.attribute if attribute.name == "body")
        producers = {output: node for node in body.node for output in node.output}
        invariant = []
        # Loop inputs: (M, cond, v...), outputs: (v..., scans...); body inputs: (iteration,
        # cond, v...), outputs: (cond, v..., scans...).
        for k, (state, result) in enumerate(zip(body.input[2:], body.output[1:])):
            source = result.name
            while source in producers and producers[source].op_type == "Identity":
                source = producers[source].input[0]
            if source == state.name and loop.output[k] not in read_after:
                invariant.append(k)
        _rename_inputs(body, {body.input[2 + k].name: loop.input[2 + k] for k in invariant})
        for k in reversed(invariant):
            del loop.input[2 + k], body.input[2 + k], body.output[1 + k], loop.output[k]
        _remove_dead_nodes(body)
        removed += len(invariant)
    return removed


def quantize_int8(source: Path, target: Path) -> None:
    """ONNX Runtime's dynamic quantization of `source`'s MatMul weights to int8 (activations
    quantized per batch at run time), inside the Loop body too; written to `target`."""
    quantize_dynamic(source, target, weight_type=QuantType.QInt8,
                     extra_options={"EnableSubgraph": True})


def _rename_inputs(graph: onnx.GraphProto, names: dict[str, str]) -> None:
    """Replaces node input names in `graph` and its subgraphs."""
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name in names:
                node.input[index] = names[name]
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                _rename_inputs(attribute.g, names)


def _remove_dead_nodes(graph: onnx.GraphProto) -> None:
    """Removes nodes none of whose outputs is read (by a node or as a graph output)."""
    while True:
        read = {output.name for output in graph.output}
        read |= {name for node in graph.node for name in node.input}
        read |= {name for node in graph.node for attribute in node.attribute
                 if attribute.type == onnx.AttributeProto.GRAPH
                 for name in _outer_names(attribute.g)}
        dead = [node for node in graph.node if not any(o in read for o in node.output)]
        if not dead:
            return
        for node in dead:
            graph.node.remove(node)


def _outer_names(graph: onnx.GraphProto) -> set[str]:
    """Every name a subgraph's nodes read (a superset of what it reads from outer scopes)."""
    names = {name for node in graph.node for name in node.input}
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                names |= _outer_names(attribute.g)
    return names
