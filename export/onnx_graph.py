"""Rewrites of a converted ONNX model, in place, each returning how many it made: loop
invariants out of the beam-search Loops (the outer one that retires finished sentences and the
inner one that steps the rest), weights into the Loop body that reads them, fused layer norms,
selects as Where, each attention of the decoding step as ONNX Runtime's fused
MultiHeadAttention, and log-softmaxes that never compute a subnormal. `export.onnx.convert`
runs all six, in that order, on every model it converts.

tf2onnx turns every tensor that the TF while loop captures (the weights, the encoder memory's
projections) into a loop-carried value that the body passes through unchanged; ONNX Runtime
then copies each of them at every decoding step (the decoder's weights included) and
its quantizer (`export.onnx_quantize`), which looks for initializers, finds no weight to
quantize inside the body. `hoist_loop_invariants` makes the body read them from the outer
scope instead (what ONNX's implicit inputs are for): the same results, and the weights
visible. `sink_initializers` then moves each weight into the body that reads it, where ONNX
Runtime prepacks it for its matrix products. `fuse_layer_norms` replaces the 13 nodes of each
of Keras's layer normalisations by one LayerNormalization, which neither tf2onnx nor ONNX
Runtime does for the form Keras computes. `selects_as_where` gives back the one Where node of
each tf.where that tf2onnx wrote as arithmetic. `log_softmax_without_underflow` computes each
LogSoftmax from logits clamped to 80 below their row's maximum, which gives the same result
(no clamped entry weighs in the sum) without the subnormal exponentials that make ONNX
Runtime's LogSoftmax several times slower on the rows a shortlist masks.

Example:
    model = graph.make_model("...")       # tf2onnx's output (a ModelProto)
    hoist_loop_invariants(model)          # loop-carried values removed
    sink_initializers(model)              # initializers moved into a Loop body
    fuse_layer_norms(model)               # LayerNormalization nodes made
    selects_as_where(model)               # Where nodes made
    fuse_step_attention(model)            # MultiHeadAttention nodes made
    log_softmax_without_underflow(model)  # LogSoftmax nodes replaced
"""
from __future__ import annotations

import dataclasses
import heapq
from typing import Iterator

import numpy as np
import onnx
from onnx import numpy_helper

# log_softmax_without_underflow's clamp of x - max(x): e^-80 is no subnormal, and too small to
# change a float32 sum that holds e^0 (the maximum's), even over a million entries.
UNDERFLOW_FLOOR = -80.0
CONTRIB_DOMAIN = "com.microsoft"  # ONNX Runtime's own operators


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """`graph` and its subgraphs (Loop bodies, If branches), at any depth."""
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from all_graphs(attribute.g)


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
    down, not two, so the inner beam-search Loop's weights must live in its own body
    (docs/decoding-speed.md, "ONNX Runtime: the graph rewrites and the session options").
    Returns how many were moved."""
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


def fuse_layer_norms(model: onnx.ModelProto) -> int:
    """Replaces, in place, each layer normalisation over the last axis as Keras computes it,
        mean = ReduceMean(x), variance = ReduceMean((x - mean) * (x - mean)),
        inv = gamma / Sqrt(variance + epsilon), y = x * inv + (beta - mean * inv),
    (13 nodes; gamma and beta constants [1, ..., 1, d] or Reshapes of constants [d] to that) by
    one LayerNormalization(x, gamma [d], beta [d]) (opset 17), in every graph. Returns how
    many."""
    return _fuse_in(model.graph, {})


def _fuse_in(graph: onnx.GraphProto, outer: dict[str, onnx.TensorProto]) -> int:
    """`fuse_layer_norms` in `graph`, whose enclosing graphs hold the initializers `outer`."""
    constants = {**outer, **{tensor.name: tensor for tensor in graph.initializer}}
    fused = sum(_fuse_in(attribute.g, constants) for node in graph.node
                for attribute in node.attribute if attribute.type == onnx.AttributeProto.GRAPH)
    producers = {output: node for node in graph.node for output in node.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:  # a node with a subgraph reads what the subgraph reads
        for name in {*node.input, *_subgraph_reads(node)}:
            readers.setdefault(name, []).append(node)
    graph_outputs = {output.name for output in graph.output}
    match = _LayerNormMatch(producers, readers, constants)
    for reciprocal in [node for node in graph.node if node.op_type == "Reciprocal"]:
        found = match.at(reciprocal)
        if found is None:
            continue
        nodes, (x, gamma, beta, epsilon, y) = found
        internal = {output for node in nodes for output in node.output} - {y}
        if internal & graph_outputs or any(reader not in nodes for name in internal
                                           for reader in readers.get(name, [])):
            continue
        gamma, beta = (_vector(graph, constants, name) for name in (gamma, beta))
        position = next(index for index, node in enumerate(graph.node) if y in node.output)
        graph.node.insert(position, onnx.helper.make_node(
            "LayerNormalization", [x, gamma, beta], [y], axis=-1, epsilon=epsilon,
            name=f"{y}/LayerNormalization"))
        for node in nodes:
            graph.node.remove(node)
        fused += 1
    _remove_dead_nodes(graph)  # the Reshapes of gamma and beta
    read = {name for node in graph.node for name in [*node.input, *_subgraph_reads(node)]}
    read |= graph_outputs
    for tensor in [tensor for tensor in graph.initializer if tensor.name not in read]:
        graph.initializer.remove(tensor)  # the [1, ..., 1, d] gammas and betas
    return fused


def selects_as_where(model: onnx.ModelProto) -> int:
    """Replaces, in place, each select that tf2onnx writes as arithmetic,
        Add(Mul(Cast(c), x), Mul(y, Cast(Not(c))))  (either Mul first, operands in any order),
    by Where(c, x, y), in every graph. tf2onnx converts a float tf.where so (six nodes where
    one does; NaN where the value not chosen is infinite, 0 * inf); Where gives TensorFlow's
    result in every case, and the beam search's step runs a few percent faster without the
    five other nodes (docs/decoding-speed.md, "ONNX Runtime: the graph rewrites and the
    session options"). Returns how many."""
    return _selects_in(model.graph)


def _selects_in(graph: onnx.GraphProto) -> int:
    """`selects_as_where` in `graph` and its subgraphs."""
    made = sum(_selects_in(attribute.g) for node in graph.node for attribute in node.attribute
               if attribute.type == onnx.AttributeProto.GRAPH)
    producers = {output: node for node in graph.node for output in node.output}
    for add in [node for node in graph.node if node.op_type == "Add"]:
        operands = _select_operands(producers, add)
        if operands is None:
            continue
        position = list(graph.node).index(add)
        graph.node.insert(position, onnx.helper.make_node("Where", operands, list(add.output),
                                                          name=add.name))
        graph.node.remove(add)
        made += 1
    _remove_dead_nodes(graph)  # the Muls, Casts and Nots no other node reads
    return made


def log_softmax_without_underflow(model: onnx.ModelProto) -> int:
    """Replaces, in place, each LogSoftmax(x) over an axis, in every graph, by
        m = ReduceMax(x), s = x - m, s - Log(ReduceSum(Exp(Max(s, UNDERFLOW_FLOOR)))).
    The clamped entries (e^-80 or less against the maximum's e^0) change no float32 sum, so the
    result is the log-softmax (each entry, clamped or not, is s minus the same normalizer).
    ONNX Runtime's LogSoftmax computes e^s of every entry; below about -87 that is a subnormal
    float, and on a thread without flush-to-zero (the caller's, which ONNX Runtime does not
    set) each costs a microcode assist: on a batch's shortlisted rows, NEG_INF outside each
    row's own candidates, the step's LogSoftmax ran 7x slower than on unmasked rows. Its
    session option `session.set_denormal_as_zero` sets only its pool's threads. Returns how
    many (docs/decoding-speed.md, "A shortlisted batch in ONNX Runtime: subnormals, a select,
    float32 columns")."""
    return sum(_log_softmaxes_in(graph) for graph in all_graphs(model.graph))


def _log_softmaxes_in(graph: onnx.GraphProto) -> int:
    """`log_softmax_without_underflow` in `graph` itself (not its subgraphs)."""
    made = 0
    for node in [node for node in graph.node if node.op_type == "LogSoftmax"]:
        axis = next((attribute.i for attribute in node.attribute if attribute.name == "axis"),
                    -1)
        name = node.name or node.output[0]
        floor, axes = f"{name}/floor", f"{name}/axes"
        graph.initializer.extend([
            numpy_helper.from_array(np.array(UNDERFLOW_FLOOR, np.float32), floor),
            numpy_helper.from_array(np.array([axis], np.int64), axes)])
        x, names = node.input[0], [f"{name}/{part}" for part in
                                   ("max", "shifted", "clamped", "exp", "sum", "log")]
        maximum, shifted, clamped, exponentials, total, log_total = names
        position = list(graph.node).index(node)
        graph.node.remove(node)
        for offset, new in enumerate([
                onnx.helper.make_node("ReduceMax", [x], [maximum], axes=[axis], keepdims=1),
                onnx.helper.make_node("Sub", [x, maximum], [shifted]),
                onnx.helper.make_node("Max", [shifted, floor], [clamped]),
                onnx.helper.make_node("Exp", [clamped], [exponentials]),
                onnx.helper.make_node("ReduceSum", [exponentials, axes], [total], keepdims=1),
                onnx.helper.make_node("Log", [total], [log_total]),
                onnx.helper.make_node("Sub", [shifted, log_total], list(node.output),
                                      name=node.name)]):
            graph.node.insert(position + offset, new)
        made += 1
    return made


def fuse_step_attention(model: onnx.ModelProto) -> int:
    """Replaces, in place, each attention of one query position (the beam search's step: a
    row per hypothesis) in every graph,
        scores = MatMul(Reshape(q, [-1, N, 1, H]), Transpose(K, [0, 1, 3, 2])) * scale,
        y = Reshape(MatMul(Softmax(scores), V), [-1, N * H]),
    by ONNX Runtime's fused MultiHeadAttention (com.microsoft): self-attention, whose K and V
    are Concat(past, Reshape(k or v, [-1, N, 1, H])) on axis 2 (the cache; the fused node
    writes the same concatenations as its present_key and present_value), and encoder-decoder
    attention, whose scores are masked as Where(mask [batch, 1, 1, L], scores, e) over the
    memory's K and V [batch, N, L, H] (the mask becomes an additive bias Where(mask, 0, e),
    made once where the mask is defined, outside the step's Loop). Attention over whole
    sequences (the encoder, score.onnx) is left as it is. The same values (the fused kernel's
    products and softmax are those of the nodes it replaces) in about ten fewer nodes a
    decoder layer and step (docs/decoding-speed.md, "Fused attention in ONNX Runtime").
    Returns how many."""
    unread: set[str] = set()  # what the replaced nodes read
    fused = _attention_in(model.graph, [], {}, unread)
    for graph in all_graphs(model.graph):  # the constants only they read (ONNX Runtime warns)
        read = {name for node in graph.node for name in [*node.input, *_subgraph_reads(node)]}
        for tensor in [tensor for tensor in graph.initializer
                       if tensor.name in unread - read]:
            graph.initializer.remove(tensor)
    if fused and not any(opset.domain == CONTRIB_DOMAIN for opset in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(CONTRIB_DOMAIN, 1))
    return fused


def _attention_in(graph: onnx.GraphProto, scopes: list[onnx.GraphProto],
                  outer: dict[str, onnx.TensorProto], unread: set[str]) -> int:
    """`fuse_step_attention` in `graph` and its subgraphs; `scopes`: the enclosing graphs,
    outermost first, whose initializers are `outer`; adds what the replaced nodes read to
    `unread`."""
    constants = {**outer, **{tensor.name: tensor for tensor in graph.initializer}}
    fused = sum(_attention_in(attribute.g, [*scopes, graph], constants, unread)
                for node in list(graph.node) for attribute in node.attribute
                if attribute.type == onnx.AttributeProto.GRAPH)
    for softmax in [node for node in graph.node if node.op_type == "Softmax"]:
        producers = {output: node for node in graph.node for output in node.output}
        readers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in {*node.input, *_subgraph_reads(node)}:
                readers.setdefault(name, []).append(node)
        found = _AttentionMatch(producers, readers, constants,
                                {output.name for output in graph.output}).at(softmax)
        if found is None:
            continue
        if found.mask is not None:
            bias = _attention_bias(found.mask, [*scopes, graph])
            if bias is None:
                continue
            found.inputs.append(bias)
        axis = _constant(graph, constants, "fuse_step_attention/axis_1", np.array([1], np.int64))
        made = [onnx.helper.make_node("Unsqueeze", [rows, axis], [f"{rows}/rows"])
                for rows in found.rows]
        attention = f"{found.outputs[0]}/MultiHeadAttention"
        made.append(onnx.helper.make_node(
            "MultiHeadAttention", [f"{name}/rows" if name in found.rows else name
                                   for name in found.inputs],
            [f"{attention}:0", *found.outputs[1:]], name=attention, domain=CONTRIB_DOMAIN,
            num_heads=found.heads, scale=found.scale))
        made.append(onnx.helper.make_node("Squeeze", [f"{attention}:0", axis],
                                          [found.outputs[0]]))
        # typed for ONNX's shape inference (which knows no com.microsoft operator): the
        # quantizer types the nodes after them from these
        graph.value_info.extend(onnx.helper.make_tensor_value_info(
            name, onnx.TensorProto.FLOAT, [None] * rank) for name, rank in zip(
                [f"{attention}:0", found.outputs[0], *found.outputs[1:]], [3, 2, 4, 4]))
        nodes = list(graph.node)
        position = max(nodes.index(node) for node in found.removed) + 1
        for offset, node in enumerate(made):
            graph.node.insert(position + offset, node)
        for node in found.removed:
            graph.node.remove(node)
            unread.update(node.input)
        fused += 1
    if fused:
        _sort_topologically(graph)
    return fused


@dataclasses.dataclass
class _Attention:
    """One query position's attention found by `_AttentionMatch`: the nodes it replaces; the
    fused node's inputs (query, key, value, then past key and value, or then the mask's bias)
    and outputs (y, then the present key and value); `rows`, the inputs [rows, N * H] that it
    reads as [rows, 1, N * H]."""
    removed: list[onnx.NodeProto]
    inputs: list[str]
    outputs: list[str]
    rows: list[str]
    heads: int
    scale: float
    mask: str | None


class _AttentionMatch:
    """The nodes of one graph around a Softmax that make one query position's attention."""

    def __init__(self, producers: dict[str, onnx.NodeProto],
                 readers: dict[str, list[onnx.NodeProto]],
                 constants: dict[str, onnx.TensorProto], graph_outputs: set[str]) -> None:
        self.producers, self.readers, self.constants = producers, readers, constants
        self.graph_outputs = graph_outputs

    def at(self, softmax: onnx.NodeProto) -> _Attention | None:
        if next((attribute.i for attribute in softmax.attribute if attribute.name == "axis"),
                -1) not in (-1, 3):
            return None
        scores, mask = softmax.input[0], None
        select = _made_by(self.producers, scores, "Where")
        if select is not None:
            mask, scores, masked = select.input
            if self.scalar(masked) != float(np.finfo(np.float32).min):
                return None
        scaling = _made_by(self.producers, scores, "Mul")
        product = scaling and next((_made_by(self.producers, name, "MatMul")
                                    for name in scaling.input
                                    if _made_by(self.producers, name, "MatMul")), None)
        scale = product and self.scalar(_other_input(scaling, product.output[0]),
                                        onnx.TensorProto.FLOAT)
        transpose = product and _made_by(self.producers, product.input[1], "Transpose")
        query = product and self.heads_of(product.input[0])
        weighted = self.only_reader(softmax.output[0], "MatMul")
        merged = weighted and self.only_reader(weighted.output[0], "Reshape")
        if None in (scale, transpose, query, weighted, merged) or \
                weighted.input[0] != softmax.output[0] or _perm(transpose) != [0, 1, 3, 2]:
            return None
        query_node, query_rows, heads, depth = query
        if self.shape(merged.input[1]) != [-1, heads * depth]:
            return None
        keys, values = transpose.input[0], weighted.input[1]
        chain = [query_node, transpose, product, scaling, *([select] if select else []),
                 softmax, weighted, merged]
        if mask is None:  # self-attention over the cache: Concat(past, this step's)
            cached = [self.cached(name, heads, depth) for name in (keys, values)]
            if None in cached:
                return None
            (key_concat, past_key, key_node, key_rows), (value_concat, past_value, value_node,
                                                         value_rows) = cached
            chain += [key_node, key_concat, value_node, value_concat]
            found = _Attention(chain, [query_rows, key_rows, value_rows, "", "", "", past_key,
                                       past_value], [merged.output[0], keys, values],
                               [query_rows, key_rows, value_rows], heads, scale, None)
        else:
            found = _Attention(chain, [query_rows, keys, values, "", ""], [merged.output[0]],
                               [query_rows], heads, scale, mask)
        internal = {output for node in chain for output in node.output} - set(found.outputs)
        if internal & self.graph_outputs or any(reader not in chain for name in internal
                                                for reader in self.readers.get(name, [])):
            return None
        return found

    def heads_of(self, name: str) -> tuple[onnx.NodeProto, str, int, int] | None:
        """(the Reshape, its input [rows, N * H], N, H) if `name` is Reshape(x, [-1, N, 1, H])."""
        reshape = _made_by(self.producers, name, "Reshape")
        shape = reshape and self.shape(reshape.input[1])
        if shape is None or len(shape) != 4 or shape[0] != -1 or shape[2] != 1:
            return None
        return reshape, reshape.input[0], int(shape[1]), int(shape[3])

    def cached(self, name: str, heads: int, depth: int
               ) -> tuple[onnx.NodeProto, str, onnx.NodeProto, str] | None:
        """(the Concat, the past [rows, N, T, H], the Reshape, its input) if `name` is
        Concat(past, Reshape(x, [-1, N, 1, H])) on axis 2."""
        concat = _made_by(self.producers, name, "Concat")
        axis = concat and next((attribute.i for attribute in concat.attribute
                                if attribute.name == "axis"), None)
        step = axis == 2 and len(concat.input) == 2 and self.heads_of(concat.input[1])
        if not step or step[2:] != (heads, depth):
            return None
        return concat, concat.input[0], step[0], step[1]

    def only_reader(self, name: str, op_type: str) -> onnx.NodeProto | None:
        readers = self.readers.get(name, [])
        return readers[0] if len(readers) == 1 and readers[0].op_type == op_type else None

    def shape(self, name: str) -> list[int] | None:
        tensor = self.constants.get(name)
        return None if tensor is None else numpy_helper.to_array(tensor).tolist()

    def scalar(self, name: str | None, data_type: int | None = None) -> float | None:
        """The value of `name` if it is a constant of one element (of `data_type`)."""
        tensor = self.constants.get(name) if name else None
        if tensor is None or int(np.prod(tensor.dims)) != 1 or \
                data_type not in (None, tensor.data_type):
            return None
        return float(numpy_helper.to_array(tensor).reshape(()))


def _perm(node: onnx.NodeProto) -> list[int]:
    return next((list(attribute.ints) for attribute in node.attribute
                 if attribute.name == "perm"), [])


def _attention_bias(mask: str, scopes: list[onnx.GraphProto]) -> str | None:
    """The name of Where(mask, 0, e) float32 (e: float32's lowest, the scores' masked value),
    made once in the innermost of `scopes` that defines `mask` (a node's output, or a graph
    input of rank 4), else None."""
    for graph in reversed(scopes):
        position = next((index + 1 for index, node in enumerate(graph.node)
                         if mask in node.output), None)
        if position is None:
            declared = next((value for value in graph.input if value.name == mask), None)
            if declared is None:
                continue
            if len(declared.type.tensor_type.shape.dim) != 4:
                return None
            position = 0
        bias = f"{mask}/attention_bias"
        if not any(bias in node.output for node in graph.node):
            constants = {tensor.name: tensor for tensor in graph.initializer}
            zero = _constant(graph, constants, "fuse_step_attention/zero",
                             np.array(0.0, np.float32))
            lowest = _constant(graph, constants, "fuse_step_attention/lowest",
                               np.array(np.finfo(np.float32).min, np.float32))
            graph.node.insert(position, onnx.helper.make_node(
                "Where", [mask, zero, lowest], [bias], name=bias))
        return bias
    return None


def _constant(graph: onnx.GraphProto, constants: dict[str, onnx.TensorProto], name: str,
              value: np.ndarray) -> str:
    """`name`, an initializer of `graph` holding `value` (added once)."""
    if not any(tensor.name == name for tensor in graph.initializer):
        tensor = numpy_helper.from_array(value, name)
        graph.initializer.append(tensor)
        constants[name] = tensor
    return name


def _sort_topologically(graph: onnx.GraphProto) -> None:
    """Reorders `graph`'s nodes, in place, so that each follows the nodes whose outputs it
    reads, keeping their order otherwise (names no node makes are inputs or outer names)."""
    nodes = list(graph.node)
    maker = {output: index for index, node in enumerate(nodes) for output in node.output}
    needs = [{maker[name] for name in {*node.input, *_subgraph_reads(node)} if name in maker}
             for node in nodes]
    waiting = [len(need) for need in needs]
    needed_by: dict[int, list[int]] = {}
    for index, need in enumerate(needs):
        for other in need:
            needed_by.setdefault(other, []).append(index)
    ready = [index for index, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    ordered = []
    while ready:
        index = heapq.heappop(ready)
        ordered.append(nodes[index])
        for reader in needed_by.get(index, []):
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, reader)
    if len(ordered) != len(nodes):
        raise ValueError(f"{graph.name}: its nodes read each other in a cycle")
    del graph.node[:]
    graph.node.extend(ordered)


def _select_operands(producers: dict[str, onnx.NodeProto],
                     add: onnx.NodeProto) -> list[str] | None:
    """[c, x, y] where `add` is Add(Mul(Cast(c), x), Mul(y, Cast(Not(c)))), else None (Not
    takes bool alone, so c is a condition)."""
    products = [_made_by(producers, name, "Mul") for name in add.input]
    if len(products) != 2 or None in products:
        return None
    for chosen, other in (products, products[::-1]):
        for mask in chosen.input:
            cast = _made_by(producers, mask, "Cast")
            for inverse in other.input:
                inverse_cast = _made_by(producers, inverse, "Cast")
                negation = inverse_cast and _made_by(producers, inverse_cast.input[0], "Not")
                if cast and negation and negation.input[0] == cast.input[0]:
                    return [cast.input[0], _other_input(chosen, mask),
                            _other_input(other, inverse)]
    return None


def _made_by(producers: dict[str, onnx.NodeProto], name: str | None,
             op_type: str) -> onnx.NodeProto | None:
    """The node of `op_type` whose output `name` is, else None."""
    node = producers.get(name)
    return node if node is not None and node.op_type == op_type else None


def _other_input(node: onnx.NodeProto, name: str) -> str | None:
    """The input of a two-input `node` besides `name`."""
    names = list(node.input)
    return names[1 - names.index(name)] if len(names) == 2 and name in names else None


def _vector(graph: onnx.GraphProto, constants: dict[str, onnx.TensorProto], name: str) -> str:
    """`name` itself if it is a vector, else (a constant [1, ..., 1, d]) the name of a [d]
    copy, added to `graph` (once)."""
    tensor = constants[name]
    if len(tensor.dims) == 1:
        return name
    vector_name = f"{name}/vector"
    if vector_name not in constants:
        vector = onnx.TensorProto()
        vector.CopyFrom(tensor)
        vector.name, vector.dims[:] = vector_name, [tensor.dims[-1]]
        graph.initializer.append(vector)
        constants[vector_name] = vector
    return vector_name


def _subgraph_reads(node: onnx.NodeProto) -> set[str]:
    """The names that `node`'s subgraphs read."""
    return {name for attribute in node.attribute if attribute.type == onnx.AttributeProto.GRAPH
            for name in _outer_names(attribute.g)}


class _LayerNormMatch:
    """The nodes of one graph around a Reciprocal that make a Keras layer norm."""

    def __init__(self, producers: dict[str, onnx.NodeProto],
                 readers: dict[str, list[onnx.NodeProto]],
                 constants: dict[str, onnx.TensorProto]) -> None:
        self.producers, self.readers, self.constants = producers, readers, constants

    def at(self, reciprocal: onnx.NodeProto):
        """(the nodes, (x, gamma, beta, epsilon, y)) of the layer norm whose 1 / Sqrt(variance
        + epsilon) is `reciprocal`, or None where the nodes around it are not one."""
        sqrt = self.made_by(reciprocal.input[0], "Sqrt")
        plus_epsilon = sqrt and self.made_by(sqrt.input[0], "Add")
        variance = plus_epsilon and next(
            (self.producers[name] for name in plus_epsilon.input
             if self.mean_axis(self.producers.get(name)) is not None), None)
        if variance is None:
            return None
        axis = self.mean_axis(variance)
        epsilon = self.scalar(self.other(plus_epsilon, variance.output[0]))
        square = self.made_by(variance.input[0], "Mul")
        difference = square and square.input[0] == square.input[1] \
            and self.made_by(square.input[0], "Sub")
        mean = difference and self.producers.get(difference.input[1])
        if epsilon is None or not mean or self.mean_axis(mean) != axis \
                or mean.input[0] != difference.input[0]:
            return None
        x = mean.input[0]
        scaled = self.only_reader(reciprocal.output[0], "Mul")  # inv = gamma / std
        gamma = scaled and self.last_axis_vector(self.other(scaled, reciprocal.output[0]), axis)
        negated = [node for node in self.readers.get(mean.output[0], []) if node.op_type == "Neg"]
        if gamma is None or len(negated) != 1:
            return None
        inv_readers = self.readers.get(scaled.output[0], [])
        times_x = next((node for node in inv_readers if node.op_type == "Mul"
                        and self.other(node, scaled.output[0]) == x), None)
        times_mean = next((node for node in inv_readers if node.op_type == "Mul"
                           and self.other(node, scaled.output[0]) == negated[0].output[0]), None)
        shift = times_mean and self.only_reader(times_mean.output[0], "Add")  # beta - mean*inv
        beta = shift and self.last_axis_vector(self.other(shift, times_mean.output[0]), axis)
        total = times_x and self.only_reader(times_x.output[0], "Add")
        if beta is None or total is None \
                or self.other(total, times_x.output[0]) != shift.output[0]:
            return None
        nodes = [mean, difference, square, variance, plus_epsilon, sqrt, reciprocal, scaled,
                 negated[0], times_mean, shift, times_x, total]
        return nodes, (x, gamma, beta, epsilon, total.output[0])

    def made_by(self, name: str, op_type: str) -> onnx.NodeProto | None:
        return _made_by(self.producers, name, op_type)

    def only_reader(self, name: str, op_type: str) -> onnx.NodeProto | None:
        nodes = self.readers.get(name, [])
        return nodes[0] if len(nodes) == 1 and nodes[0].op_type == op_type else None

    other = staticmethod(_other_input)

    @staticmethod
    def mean_axis(node: onnx.NodeProto | None) -> int | None:
        """k for a ReduceMean over the one axis k that keeps it, else None."""
        if node is None or node.op_type != "ReduceMean" or len(node.input) != 1:
            return None
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        axes = attributes.get("axes", [])
        return axes[0] if len(axes) == 1 and attributes.get("keepdims", 1) == 1 else None

    def scalar(self, name: str | None) -> float | None:
        tensor = self.constants.get(name)
        if tensor is None or np.prod(tensor.dims, dtype=int) != 1:
            return None
        return float(numpy_helper.to_array(tensor).reshape(()))

    def last_axis_vector(self, name: str | None, axis: int) -> str | None:
        """The constant of shape [1, ..., 1, d] along `axis` (the last: -1, or [1] * axis +
        [d]) that `name` is, or that `name` reshapes a vector [d] to; else None."""
        def along_axis(dims: list[int]) -> bool:
            return all(dim == 1 for dim in dims[:-1]) and (axis == -1 or len(dims) == axis + 1)

        if name in self.constants:
            return name if along_axis(list(self.constants[name].dims)) else None
        reshape = self.made_by(name, "Reshape")
        if reshape is None or reshape.input[1] not in self.constants \
                or len(self.constants.get(reshape.input[0], onnx.TensorProto()).dims) != 1:
            return None
        shape = numpy_helper.to_array(self.constants[reshape.input[1]]).tolist()
        size = self.constants[reshape.input[0]].dims[0]
        return reshape.input[0] if along_axis(shape) and shape[-1] == size else None


def _rename_inputs(graph: onnx.GraphProto, names: dict[str, str]) -> None:
    """Replaces node input names in `graph` and its subgraphs."""
    for node in (node for body in all_graphs(graph) for node in body.node):
        for index, name in enumerate(node.input):
            if name in names:
                node.input[index] = names[name]


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
    return {name for body in all_graphs(graph) for node in body.node for name in node.input}
