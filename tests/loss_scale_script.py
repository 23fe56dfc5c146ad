"""Subprocess of tests/test_distributed.py: mixed_float16 on 2 logical CPU devices
(MirroredStrategy, as `make_strategy` builds it), replica 1's gradients made infinite at update
2. Runs three updates and prints JSON: per call, whether it reported finite gradients, the
optimizer's iterations, the loss scale, how far the weights moved, whether they are all finite,
and whether the two replicas' copies are identical.

Usage: python tests/loss_scale_script.py CONFIG
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys

import numpy as np

from tiny_run import (KEPT_ITERATORS, dataset_fn, overflow_replica_1_at, synthetic_halves,
                      use_two_logical_cpus)

use_two_logical_cpus()

from keras_transformer.tokenizer import Tokenizer  # noqa: E402
from pipelines.config import load_config  # noqa: E402
from pipelines.training.strategy import make_strategy  # noqa: E402
from pipelines.training.trainer import Trainer  # noqa: E402


def main(config_path: str) -> None:
    config = load_config(config_path)
    config = dataclasses.replace(config, model=dataclasses.replace(config.model,
                                                                   dtype="mixed_float16"))
    vocab_size = Tokenizer((config.run_path / "vocab" / "spm.model").read_bytes()).vocab_size
    overflow_replica_1_at(update=2)
    strategy = make_strategy()
    trainer = Trainer(config, vocab_size, strategy)
    dataset = strategy.distribute_datasets_from_function(
        dataset_fn(synthetic_halves(3, vocab_size)))
    trainer.compile(dataset.element_spec)
    batches = iter(dataset)
    KEPT_ITERATORS.append(batches)  # destroyed by os._exit: see tiny_run.keep_iterators
    calls = []
    for _ in range(3):
        before = [v.numpy() for v in trainer.model.trainable_variables]
        _, _, finite = trainer.train_step((next(batches),))
        after = [v.numpy() for v in trainer.model.trainable_variables]
        calls.append({
            "finite": bool(finite), "iterations": trainer.step,
            "loss_scale": trainer.loss_scale(),
            "moved": max(float(np.max(np.abs(a - b))) for a, b in zip(before, after)),
            "all_finite": all(bool(np.all(np.isfinite(a))) for a in after),
            "replicas_equal": all(_replicas_equal(strategy, v)
                                  for v in trainer.model.trainable_variables)})
    print(json.dumps({"replicas": strategy.num_replicas_in_sync,
                      "initial_scale": trainer.optimizer.initial_scale, "calls": calls}),
          flush=True)


def _replicas_equal(strategy, variable) -> bool:
    first, *others = (value.numpy() for value in strategy.experimental_local_results(variable))
    return all(np.array_equal(first, other) for other in others)


if __name__ == "__main__":
    main(sys.argv[1])
    os._exit(0)  # the report is printed; the kept iterator is not destroyed
