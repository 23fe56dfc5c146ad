"""The encoder-decoder attention of one beam-search step, with the memory's keys and values
tiled to every beam (the cache's layout today: `search_primitives.start_beams` repeats each
sentence's rows beam_size times) against held once per sentence (the beams of a sentence as
that many query positions over one copy): microseconds a call of ONNX Runtime's fused
`com.microsoft.MultiHeadAttention`, as `export.onnx_attention` fuses the step.

    .venv/bin/python bench/attention_layouts.py [--d-model 192] [--heads 4]
        [--source-length 40] [--beam 4] [--batch-sizes 1,32] [--threads N] [--calls 2000]

Both layouts compute the same numbers (checked before timing); the query is the step's
(already projected), the keys and values the memory's (projected once before the search).
`--threads`: intra-op threads (default: one per CPU core).
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Callable

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

CONTRIB_DOMAIN = "com.microsoft"


def fused_attention_model(queries: int, d_model: int, heads: int, length: int) -> bytes:
    """One MultiHeadAttention node: query [rows, queries, d_model], keys and values [rows,
    heads, length, depth], additive bias [rows, 1, queries, length] -> [rows, queries,
    d_model]."""
    depth = d_model // heads
    inputs = [helper.make_tensor_value_info("query", TensorProto.FLOAT,
                                            ["rows", queries, d_model])]
    inputs += [helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                             ["rows", heads, length, depth])
               for name in ("key", "value")]
    inputs.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT,
                                                ["rows", 1, queries, length]))
    output = helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                           ["rows", queries, d_model])
    node = helper.make_node("MultiHeadAttention", ["query", "key", "value", "", "", "bias"],
                            ["output"], domain=CONTRIB_DOMAIN, num_heads=heads)
    model = helper.make_model(helper.make_graph([node], "step_attention", inputs, [output]),
                              opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid(CONTRIB_DOMAIN, 1)])
    model.ir_version = 9  # what onnxruntime reads
    return model.SerializeToString()


def microseconds(call: Callable[[], object], calls: int) -> float:
    for _ in range(min(50, calls)):
        call()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d-model", type=int, default=192)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--source-length", type=int, default=40)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    depth, length, beam = args.d_model // args.heads, args.source_length, args.beam
    threads = args.threads or os.cpu_count() or 1
    rng = np.random.default_rng(0)
    for batch in (int(size) for size in args.batch_sizes.split(",")):
        query = rng.standard_normal((batch, beam, args.d_model), np.float32)
        key, value = (rng.standard_normal((batch, args.heads, length, depth), np.float32)
                      for _ in range(2))
        bias = np.where(np.arange(length) < length - 3, 0.0, -1e9).astype(np.float32)
        per_sentence = {"query": query, "key": key, "value": value,
                        "bias": np.broadcast_to(bias, (batch, 1, beam, length)).copy()}
        tiled = {"query": query.reshape(batch * beam, 1, args.d_model),
                 "key": np.repeat(key, beam, axis=0), "value": np.repeat(value, beam, axis=0),
                 "bias": np.broadcast_to(bias, (batch * beam, 1, 1, length)).copy()}
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        sessions = {name: ort.InferenceSession(
            fused_attention_model(queries, args.d_model, args.heads, length), options)
            for name, queries in (("tiled", 1), ("per_sentence", beam))}
        feeds = {"tiled": tiled, "per_sentence": per_sentence}
        outputs = {name: session.run(None, feeds[name])[0]
                   for name, session in sessions.items()}
        np.testing.assert_allclose(outputs["tiled"].reshape(query.shape),
                                   outputs["per_sentence"], rtol=1e-4, atol=1e-5)
        timing = {name: microseconds(lambda name=name: sessions[name].run(
            None, feeds[name]), args.calls) for name in sessions}
        print(f"batch {batch} x beam {beam}, {threads} thread(s): tiled "
              f"{timing['tiled']:,.1f} us, per sentence {timing['per_sentence']:,.1f} us "
              f"({timing['tiled'] / timing['per_sentence']:.2f}x)")


if __name__ == "__main__":
    main()
