"""Peak memory of the training loss under XLA (`train.jit_compile`) at the base config's batch:
25,000 target tokens (200 x 125) of d_model 512 against the base config's 37,000-piece
vocabulary, the loss and its gradients compiled with XLA, as the trainer computes them
(`projected_label_smoothed_cross_entropy(..., static_shapes=True)`: chunks of rows) and as it
did before (whole [batch, time, vocab] float32 logits and their one-hot targets).

    .venv/bin/python bench/xla_loss_memory.py [--vocab 37000] [--rows 200] [--time 125]

Each variant runs in its own process; printed: its peak resident memory (ru_maxrss) over the
resident memory once its inputs are built, and the seconds of one compiled call.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

D_MODEL = 512
VARIANTS = ("chunked", "whole logits")


def measure(variant: str, rows: int, length: int, vocab: int) -> dict[str, float]:
    """Runs `variant` once compiled in this process; (MiB over the inputs, seconds)."""
    import numpy as np
    import tensorflow as tf

    from keras_transformer.losses import (label_smoothed_cross_entropy,
                                          projected_label_smoothed_cross_entropy)

    rng = np.random.default_rng(0)
    hidden = tf.constant(rng.normal(size=(rows, length, D_MODEL)).astype(np.float32))
    table = tf.constant(rng.normal(size=(vocab, D_MODEL)).astype(np.float32) * 0.05)
    labels = rng.integers(4, vocab, (rows, length)).astype(np.int32)
    labels[:, int(0.9 * length):] = 0  # 90% real tokens, as the demo's batches
    labels = tf.constant(labels)

    def loss_and_gradients(hidden: tf.Tensor, table: tf.Tensor):
        with tf.GradientTape() as tape:
            tape.watch([hidden, table])
            if variant == "chunked":
                loss, _ = projected_label_smoothed_cross_entropy(labels, hidden, table, 0.1,
                                                                 static_shapes=True)
            else:
                logits = tf.matmul(hidden, table, transpose_b=True)  # [rows, length, vocab]
                loss, _ = label_smoothed_cross_entropy(labels, logits, 0.1)
        return loss, tape.gradient(loss, [hidden, table])

    compiled = tf.function(loss_and_gradients, jit_compile=True, autograph=False)
    compiled.get_concrete_function(hidden, table)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    loss, grads = compiled(hidden, table)
    _ = [g.numpy() for g in grads]
    first = time.monotonic() - started  # compiles and runs
    started = time.monotonic()
    loss, grads = compiled(hidden, table)
    _ = [g.numpy() for g in grads]
    seconds = time.monotonic() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_mib": (peak - base) / 1024, "first_seconds": first, "seconds": seconds,
            "loss": float(loss)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=37000)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--time", type=int, default=125)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(measure(args.variant, args.rows, args.time, args.vocab)))
        return
    logits_gib = args.rows * args.time * args.vocab * 4 / 2 ** 30
    print(f"batch {args.rows} x {args.time} target tokens, d_model {D_MODEL}, vocab "
          f"{args.vocab:,}: whole float32 logits are {logits_gib:.2f} GiB")
    for variant in VARIANTS:
        result = subprocess.run([sys.executable, __file__, "--variant", variant,
                                 "--vocab", str(args.vocab), "--rows", str(args.rows),
                                 "--time", str(args.time)], capture_output=True, text=True)
        if result.returncode:
            print(f"{variant:13s} failed: {result.stderr.strip().splitlines()[-1]}")
            continue
        figures = json.loads(result.stdout.strip().splitlines()[-1])
        print(f"{variant:13s} peak memory over the inputs {figures['peak_mib']:8,.0f} MiB | "
              f"a call {figures['seconds']:.2f} s (the first, compiling: "
              f"{figures['first_seconds']:.1f} s) | loss {figures['loss']:.1f}")


if __name__ == "__main__":
    main()
