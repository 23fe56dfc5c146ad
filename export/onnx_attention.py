"""`fuse_step_attention`: each attention of the beam search's decoding step in a converted ONNX
model as ONNX Runtime's fused MultiHeadAttention (`export.onnx.convert` runs it after
`export.onnx_graph`'s rewrites that select as Where, before the log-softmax's).

Example:
    fuse_step_attention(model)  # MultiHeadAttention nodes made; how many
"""
from __future__ import annotations

import dataclasses
import heapq

import numpy as np
import onnx
from onnx import numpy_helper

from export.onnx_graph import (CONTRIB_DOMAIN, GraphMatch, all_graphs, subgraph_reads,
                               use_contrib_domain)


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
    made once where the mask is defined, outside the step's Loop); there the rows may come in
    groups of G, a sentence's beams over its one copy of the memory:
    Transpose(Reshape(q, [-1, G, N, H]), [0, 2, 1, 3]) and Reshape(Transpose(MatMul(...),
    [0, 2, 1, 3]), [-1, N * H]), fused as G query positions. Attention over whole sequences
    (the encoder, score.onnx) is left as it is. The same values (the fused kernel's
    products and softmax are those of the nodes it replaces) in about ten fewer nodes a
    decoder layer and step (docs/decoding-speed.md, "Fused attention in ONNX Runtime").
    Returns how many."""
    unread: set[str] = set()  # what the replaced nodes read
    fused = _attention_in(model.graph, [], {}, unread)
    for graph in all_graphs(model.graph):  # the constants only they read (ONNX Runtime warns)
        read = {name for node in graph.node for name in [*node.input, *subgraph_reads(node)]}
        for tensor in [tensor for tensor in graph.initializer
                       if tensor.name in unread - read]:
            graph.initializer.remove(tensor)
    if fused:
        use_contrib_domain(model)
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
    here = 0
    for softmax in [node for node in graph.node if node.op_type == "Softmax"]:
        found = _AttentionMatch(graph, constants).at(softmax)  # the graph as a fusion left it
        if found is None:
            continue
        if found.mask is not None:
            bias = _attention_bias(found.mask, [*scopes, graph], found.queries)
            if bias is None:
                continue
            found.inputs.append(bias)
        attention = f"{found.outputs[0]}/MultiHeadAttention"
        if found.queries == 1:  # [rows, N * H] as [rows, 1, N * H] and back
            axis = _constant(graph, constants, "fuse_step_attention/axis_1",
                             np.array([1], np.int64))
            made = [onnx.helper.make_node("Unsqueeze", [rows, axis], [f"{rows}/rows"])
                    for rows in found.rows]
            unmade = onnx.helper.make_node("Squeeze", [f"{attention}:0", axis],
                                           [found.outputs[0]])
        else:  # [rows, N * H] as [rows / G, G, N * H] and back
            width = found.heads * found.depth
            grouped = _constant(graph, constants, f"fuse_step_attention/groups_{found.queries}"
                                f"_{width}", np.array([-1, found.queries, width], np.int64))
            flat = _constant(graph, constants, f"fuse_step_attention/rows_{width}",
                             np.array([-1, width], np.int64))
            made = [onnx.helper.make_node("Reshape", [rows, grouped], [f"{rows}/rows"])
                    for rows in found.rows]
            unmade = onnx.helper.make_node("Reshape", [f"{attention}:0", flat],
                                           [found.outputs[0]])
        made.append(onnx.helper.make_node(
            "MultiHeadAttention", [f"{name}/rows" if name in found.rows else name
                                   for name in found.inputs],
            [f"{attention}:0", *found.outputs[1:]], name=attention, domain=CONTRIB_DOMAIN,
            num_heads=found.heads, scale=found.scale))
        made.append(unmade)
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
        here += 1
    if here:
        _sort_topologically(graph)
    return fused + here


@dataclasses.dataclass
class _Attention:
    """One query position's attention found by `_AttentionMatch`: the nodes it replaces; the
    fused node's inputs (query, key, value, then past key and value, or then the mask's bias)
    and outputs (y, then the present key and value); `rows`, the inputs [rows, N * H] that it
    reads as [rows / G, G, N * H] (G = `queries`: 1, or the rows of a sentence over its
    memory)."""
    removed: list[onnx.NodeProto]
    inputs: list[str]
    outputs: list[str]
    rows: list[str]
    heads: int
    depth: int
    scale: float
    mask: str | None
    queries: int = 1


class _AttentionMatch(GraphMatch):
    """The nodes of one graph around a Softmax that make one query position's attention."""

    def at(self, softmax: onnx.NodeProto) -> _Attention | None:
        if next((attribute.i for attribute in softmax.attribute if attribute.name == "axis"),
                -1) not in (-1, 3):
            return None
        scores, mask = softmax.input[0], None
        select = self.made_by(scores, "Where")
        if select is not None:
            mask, scores, masked = select.input
            if self.scalar(masked) != float(np.finfo(np.float32).min):
                return None
        scaling = self.made_by(scores, "Mul")
        product = scaling and next((self.made_by(name, "MatMul") for name in scaling.input
                                    if self.made_by(name, "MatMul")), None)
        scale = product and self.scalar(self.other(scaling, product.output[0]),
                                        onnx.TensorProto.FLOAT)
        transpose = product and self.made_by(product.input[1], "Transpose")
        query = product and (self.heads_of(product.input[0]) or
                             (mask and self.grouped_heads_of(product.input[0])))
        weighted = self.only_reader(softmax.output[0], "MatMul")
        if None in (scale, transpose, query, weighted) or \
                weighted.input[0] != softmax.output[0] or _perm(transpose) != [0, 1, 3, 2]:
            return None
        query_nodes, query_rows, heads, depth, queries = query
        ungrouped = queries > 1 and self.only_reader(weighted.output[0], "Transpose")
        if queries > 1 and (not ungrouped or _perm(ungrouped) != [0, 2, 1, 3]):
            return None
        merged = self.only_reader((ungrouped or weighted).output[0], "Reshape")
        if merged is None or self.shape(merged.input[1]) != [-1, heads * depth]:
            return None
        keys, values = transpose.input[0], weighted.input[1]
        chain = [*query_nodes, transpose, product, scaling, *([select] if select else []),
                 softmax, weighted, *([ungrouped] if ungrouped else []), merged]
        if mask is None:  # self-attention over the cache: Concat(past, this step's)
            cached = [self.cached(name, heads, depth) for name in (keys, values)]
            if None in cached:
                return None
            (key_concat, past_key, key_node, key_rows), (value_concat, past_value, value_node,
                                                         value_rows) = cached
            chain += [key_node, key_concat, value_node, value_concat]
            found = _Attention(chain, [query_rows, key_rows, value_rows, "", "", "", past_key,
                                       past_value], [merged.output[0], keys, values],
                               [query_rows, key_rows, value_rows], heads, depth, scale, None)
        else:
            found = _Attention(chain, [query_rows, keys, values, "", ""], [merged.output[0]],
                               [query_rows], heads, depth, scale, mask, queries)
        return found if self.replaceable(chain, set(found.outputs)) else None

    def heads_of(self, name: str
                 ) -> tuple[list[onnx.NodeProto], str, int, int, int] | None:
        """([the Reshape], its input [rows, N * H], N, H, 1) if `name` is Reshape(x, [-1, N,
        1, H])."""
        reshape = self.made_by(name, "Reshape")
        shape = reshape and self.shape(reshape.input[1])
        if shape is None or len(shape) != 4 or shape[0] != -1 or shape[2] != 1:
            return None
        return [reshape], reshape.input[0], int(shape[1]), int(shape[3]), 1

    def grouped_heads_of(self, name: str
                         ) -> tuple[list[onnx.NodeProto], str, int, int, int] | None:
        """([the Reshape, the Transpose], the Reshape's input [rows, N * H], N, H, G) if `name`
        is Transpose(Reshape(x, [-1, G, N, H]), [0, 2, 1, 3])."""
        transpose = self.made_by(name, "Transpose")
        reshape = transpose and _perm(transpose) == [0, 2, 1, 3] and self.made_by(
            transpose.input[0], "Reshape")
        shape = reshape and self.only_reader(reshape.output[0], "Transpose") and self.shape(
            reshape.input[1])
        if not shape or len(shape) != 4 or shape[0] != -1 or shape[1] < 2:
            return None
        return [reshape, transpose], reshape.input[0], int(shape[2]), int(shape[3]), int(shape[1])

    def cached(self, name: str, heads: int, depth: int
               ) -> tuple[onnx.NodeProto, str, onnx.NodeProto, str] | None:
        """(the Concat, the past [rows, N, T, H], the Reshape, its input) if `name` is
        Concat(past, Reshape(x, [-1, N, 1, H])) on axis 2."""
        concat = self.made_by(name, "Concat")
        axis = concat and next((attribute.i for attribute in concat.attribute
                                if attribute.name == "axis"), None)
        step = axis == 2 and len(concat.input) == 2 and self.heads_of(concat.input[1])
        if not step or step[2:4] != (heads, depth):
            return None
        return concat, concat.input[0], step[0][0], step[1]

    def shape(self, name: str) -> list[int] | None:
        tensor = self.constants.get(name)
        return None if tensor is None else numpy_helper.to_array(tensor).tolist()


def _perm(node: onnx.NodeProto) -> list[int]:
    return next((list(attribute.ints) for attribute in node.attribute
                 if attribute.name == "perm"), [])


def _attention_bias(mask: str, scopes: list[onnx.GraphProto], queries: int = 1) -> str | None:
    """The name of Where(mask, 0, e) float32 (e: float32's lowest, the scores' masked value),
    [batch, 1, 1, L], expanded to [batch, 1, `queries`, L] (the fused node's query positions)
    when `queries` > 1, made once in the innermost of `scopes` that defines `mask` (a node's
    output, or a graph input of rank 4), else None."""
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
        constants = {tensor.name: tensor for tensor in graph.initializer}
        if not any(bias in node.output for node in graph.node):
            zero = _constant(graph, constants, "fuse_step_attention/zero",
                             np.array(0.0, np.float32))
            lowest = _constant(graph, constants, "fuse_step_attention/lowest",
                               np.array(np.finfo(np.float32).min, np.float32))
            graph.node.insert(position, onnx.helper.make_node(
                "Where", [mask, zero, lowest], [bias], name=bias))
        if queries == 1:
            return bias
        expanded = f"{bias}_{queries}"
        if not any(expanded in node.output for node in graph.node):
            shape = _constant(graph, constants, f"fuse_step_attention/queries_{queries}",
                              np.array([1, 1, queries, 1], np.int64))
            made_at = next(index for index, node in enumerate(graph.node) if bias in node.output)
            graph.node.insert(made_at + 1, onnx.helper.make_node(
                "Expand", [bias, shape], [expanded], name=expanded))
        return expanded
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
    needs = [{maker[name] for name in {*node.input, *subgraph_reads(node)} if name in maker}
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
