"""Rewrites of a converted ONNX model: loop invariants out of the beam-search Loops (the outer
one that retires finished sentences and the inner one that steps the rest), and int8 weights.

tf2onnx turns every tensor that the TF while loop captures (the weights, the encoder memory's
projections) into a loop-carried value that the body passes through unchanged; ONNX Runtime
then copies each of them at every decoding step (the decoder's weights: ~100 MB a step for
the base model) and its quantizer, which looks for initializers, finds no weight to quantize
inside the body. `hoist_loop_invariants` makes the body read them from the outer scope
instead (what ONNX's implicit inputs are for): the same results, and the weights visible.
`sink_initializers` then moves each weight into the body that reads it, where ONNX Runtime
prepacks it for its matrix products.
"""
from __future__ import annotations

from pathlib import Path

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic


def hoist_loop_invariants(model: onnx.ModelProto) -> int:
    """Removes, in place, the loop-carried values of every Loop (nested ones too) that each
    iteration passes through unchanged (directly or through Identity) and that are not a
    graph output; the body, and whatever read the loop's final value, read the initial value
    instead. Returns how many were removed."""
    return _hoist_in(model.graph)


def _hoist_in(graph: onnx.GraphProto) -> int:
    """`hoist_loop_invariants` for the Loops of `graph`, then for the Loops in their bodies."""
    graph_outputs = {output.name for output in graph.output}
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
            if source == state.name and loop.output[k] not in graph_outputs:
                invariant.append(k)
        _rename_inputs(body, {body.input[2 + k].name: loop.input[2 + k] for k in invariant})
        _rename_inputs(graph, {loop.output[k]: loop.input[2 + k] for k in invariant})
        for k in reversed(invariant):
            del loop.input[2 + k], body.input[2 + k], body.output[1 + k], loop.output[k]
        _remove_dead_nodes(body)
        removed += len(invariant) + _hoist_in(body)
    return removed


def sink_initializers(model: onnx.ModelProto) -> int:
    """Moves, in place, each main-graph initializer that only one subgraph reads (at any depth)
    into the innermost subgraph that reads it all. ONNX Runtime prepacks a MatMul's constant
    weights when they are its graph's own initializers or the main graph's read one level
    down, not two: the inner beam-search Loop's matrix products ran 1.27x slower without this
    (demo model, AVX2). Returns how many were moved."""
    graph = model.graph
    kept = {name for node in graph.node for name in node.input}
    kept |= {value.name for value in [*graph.input, *graph.output]}
    moved = 0
    for initializer in list(graph.initializer):
        if initializer.name in kept:
            continue
        target = _innermost_reader(graph, initializer.name)
        if target is not graph:
            target.initializer.append(initializer)
            graph.initializer.remove(initializer)
            moved += 1
    return moved


def _innermost_reader(graph: onnx.GraphProto, name: str) -> onnx.GraphProto:
    """The deepest graph under `graph` (itself included) that contains every read of `name`."""
    if any(name in node.input for node in graph.node):
        return graph
    readers = [attribute.g for node in graph.node for attribute in node.attribute
               if attribute.type == onnx.AttributeProto.GRAPH
               and name in _outer_names(attribute.g)]
    return _innermost_reader(readers[0], name) if len(readers) == 1 else graph


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
