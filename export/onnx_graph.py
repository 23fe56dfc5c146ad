"""Rewrites of a converted ONNX model, in place, each returning how many it made: loop
invariants out of the beam-search Loops (the outer one that retires finished sentences and the
inner one that steps the rest), weights into the Loop body that reads them, fused layer norms,
selects as Where and log-softmaxes that never compute a subnormal; and what a rewrite needs to
match a pattern (`GraphMatch`, `made_by`, `other_input`, `subgraph_reads`) or to use ONNX
Runtime's own operators (`use_contrib_domain`); the step's fused attention,
`export.onnx_attention`, and the int8 shortlist, `export.onnx_quantize`, use them too.
`export.onnx.convert` runs the five and the attention's, in the order of the example, on every
model it converts.

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
    fuse_step_attention(model)            # export.onnx_attention's
    log_softmax_without_underflow(model)  # LogSoftmax nodes replaced
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import onnx
from onnx import numpy_helper

# log_softmax_without_underflow's clamp of x - max(x): e^-80 is no subnormal, and too small to
# change a float32 sum that holds e^0 (the maximum's), even over a million entries.
UNDERFLOW_FLOOR = -80.0
CONTRIB_DOMAIN = "com.microsoft"  # ONNX Runtime's own operators


def use_contrib_domain(model: onnx.ModelProto) -> None:
    """Declares CONTRIB_DOMAIN (version 1) among `model`'s opsets, once, for the ONNX Runtime
    operators a rewrite put in it."""
    if not any(opset.domain == CONTRIB_DOMAIN for opset in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(CONTRIB_DOMAIN, 1))


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
    match = _LayerNormMatch(graph, constants)
    for reciprocal in [node for node in graph.node if node.op_type == "Reciprocal"]:
        found = match.at(reciprocal)
        if found is None or not match.replaceable(found[0], {found[1][-1]}):
            continue
        nodes, (x, gamma, beta, epsilon, y) = found
        gamma, beta = (_vector(graph, constants, name) for name in (gamma, beta))
        position = next(index for index, node in enumerate(graph.node) if y in node.output)
        graph.node.insert(position, onnx.helper.make_node(
            "LayerNormalization", [x, gamma, beta], [y], axis=-1, epsilon=epsilon,
            name=f"{y}/LayerNormalization"))
        for node in nodes:
            graph.node.remove(node)
        fused += 1
    _remove_dead_nodes(graph)  # the Reshapes of gamma and beta
    read = {name for node in graph.node for name in [*node.input, *subgraph_reads(node)]}
    read |= match.graph_outputs
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


def _select_operands(producers: dict[str, onnx.NodeProto],
                     add: onnx.NodeProto) -> list[str] | None:
    """[c, x, y] where `add` is Add(Mul(Cast(c), x), Mul(y, Cast(Not(c)))), else None (Not
    takes bool alone, so c is a condition)."""
    products = [made_by(producers, name, "Mul") for name in add.input]
    if len(products) != 2 or None in products:
        return None
    for chosen, other in (products, products[::-1]):
        for mask in chosen.input:
            cast = made_by(producers, mask, "Cast")
            for inverse in other.input:
                inverse_cast = made_by(producers, inverse, "Cast")
                negation = inverse_cast and made_by(producers, inverse_cast.input[0], "Not")
                if cast and negation and negation.input[0] == cast.input[0]:
                    return [cast.input[0], other_input(chosen, mask),
                            other_input(other, inverse)]
    return None


def made_by(producers: dict[str, onnx.NodeProto], name: str | None,
             op_type: str) -> onnx.NodeProto | None:
    """The node of `op_type` whose output `name` is, else None."""
    node = producers.get(name)
    return node if node is not None and node.op_type == op_type else None


def other_input(node: onnx.NodeProto, name: str) -> str | None:
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


def subgraph_reads(node: onnx.NodeProto) -> set[str]:
    """The names that `node`'s subgraphs read."""
    return {name for attribute in node.attribute if attribute.type == onnx.AttributeProto.GRAPH
            for name in _outer_names(attribute.g)}


class GraphMatch:
    """One graph's nodes indexed for matching a pattern around a node: who makes each name
    (`producers`), who reads it (`readers`: a node with a subgraph reads what the subgraph
    reads), and the constants in scope (`constants`: the graph's initializers and its enclosing
    graphs')."""

    def __init__(self, graph: onnx.GraphProto, constants: dict[str, onnx.TensorProto]) -> None:
        self.producers = {output: node for node in graph.node for output in node.output}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in {*node.input, *subgraph_reads(node)}:
                self.readers.setdefault(name, []).append(node)
        self.constants = constants
        self.graph_outputs = {output.name for output in graph.output}

    def made_by(self, name: str | None, op_type: str) -> onnx.NodeProto | None:
        return made_by(self.producers, name, op_type)

    def only_reader(self, name: str, op_type: str) -> onnx.NodeProto | None:
        nodes = self.readers.get(name, [])
        return nodes[0] if len(nodes) == 1 and nodes[0].op_type == op_type else None

    other = staticmethod(other_input)

    def scalar(self, name: str | None, data_type: int | None = None) -> float | None:
        """The value of `name` if it is a constant of one element (of `data_type`)."""
        tensor = self.constants.get(name) if name else None
        if tensor is None or np.prod(tensor.dims, dtype=int) != 1 or \
                data_type not in (None, tensor.data_type):
            return None
        return float(numpy_helper.to_array(tensor).reshape(()))

    def replaceable(self, nodes: list[onnx.NodeProto], kept: set[str]) -> bool:
        """Whether `nodes` can go: no output of theirs but `kept` is a graph output or read by
        a node outside them."""
        internal = {output for node in nodes for output in node.output} - kept
        return not internal & self.graph_outputs and all(
            reader in nodes for name in internal for reader in self.readers.get(name, []))


class _LayerNormMatch(GraphMatch):
    """The nodes of one graph around a Reciprocal that make a Keras layer norm."""

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

    @staticmethod
    def mean_axis(node: onnx.NodeProto | None) -> int | None:
        """k for a ReduceMean over the one axis k that keeps it, else None."""
        if node is None or node.op_type != "ReduceMean" or len(node.input) != 1:
            return None
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        axes = attributes.get("axes", [])
        return axes[0] if len(axes) == 1 and attributes.get("keepdims", 1) == 1 else None

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
