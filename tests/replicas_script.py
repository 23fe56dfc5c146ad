"""Subprocess of tests/test_distributed.py: splits the CPU into 2 logical devices (before TF
starts; GPUs hidden), then trains the same updates three ways from the same initial weights and
prints JSON:

* `merged`: 1 replica on the merged batches (one per update);
* `replicas`: MirroredStrategy over both devices (`make_strategy`), a half per replica;
* `accumulated`: 1 replica accumulating the two halves (accumulate_steps 2).

The attention key biases are reported apart: softmax is invariant to them, so their true
gradient is 0 and Adam turns the rounding noise of their gradient into steps of about the
learning rate, which differ with the order of summation.

Usage: python tests/replicas_script.py CONFIG STEPS
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys

import numpy as np

from pipelines.startup import import_tensorflow_quietly

import_tensorflow_quietly()  # as the CLI imports TensorFlow
import tensorflow as tf  # noqa: E402

from tiny_run import dataset_fn, merged, synthetic_halves, use_two_logical_cpus  # noqa: E402

use_two_logical_cpus()

from keras_transformer.schedules import TransformerSchedule  # noqa: E402
from keras_transformer.tokenizer import Tokenizer  # noqa: E402
from pipelines.config import load_config  # noqa: E402
from pipelines.training.strategy import make_strategy  # noqa: E402
from pipelines.training.train import TrainingRun  # noqa: E402

Weights = dict[str, list[np.ndarray]]  # "key_bias" | "other" -> arrays


def main(config_path: str, steps: int) -> None:
    config = load_config(config_path)
    spm_model = (config.run_path / "vocab" / "spm.model").read_bytes()
    halves = synthetic_halves(steps, Tokenizer(spm_model).vocab_size)
    single = tf.distribute.MirroredStrategy(["/cpu:0"])
    runs = {"merged": (single, merged(halves), 1), "replicas": (make_strategy(), halves, 1),
            "accumulated": (single, halves, 2)}
    initial, final, replicas, traces = {}, {}, {}, {}
    for name, (strategy, batches, accumulate) in runs.items():
        run_config = dataclasses.replace(
            config, run_dir=str(config.run_path / name),
            train=dataclasses.replace(config.train, steps=steps, accumulate_steps=accumulate))
        (run_config.run_path / "vocab").mkdir(parents=True, exist_ok=True)
        (run_config.run_path / "vocab" / "spm.model").write_bytes(spm_model)
        run = TrainingRun(run_config, strategy=strategy, dataset_fn=dataset_fn(batches))
        initial[name] = _weights(run.trainer.model)
        run.run()
        final[name] = _weights(run.trainer.model)
        replicas[name] = strategy.num_replicas_in_sync
        traces[name] = run.trainer.train_step.experimental_get_tracing_count()
    schedule = TransformerSchedule(run.trainer.model.model_config.d_model,
                                   config.train.warmup_steps, config.train.learning_rate_scale)
    print(json.dumps({
        "replicas": replicas, "traces": traces,
        "learning_rate_sum": sum(float(schedule(step)) for step in range(steps)),
        "trained_change": _max_diff(initial["merged"], final["merged"], "other"),
        "initial_diff": {name: _max_diff(initial["merged"], initial[name], "other")
                         for name in runs},
        "max_diff": {name: _max_diff(final["merged"], final[name], "other") for name in runs},
        "key_bias_diff": {name: _max_diff(final["merged"], final[name], "key_bias")
                          for name in runs}}), flush=True)


def _weights(model) -> Weights:
    weights: Weights = {"key_bias": [], "other": []}
    for variable in model.trainable_variables:
        kind = "key_bias" if variable.path.endswith("/key/bias") else "other"
        weights[kind].append(variable.numpy())
    return weights


def _max_diff(first: Weights, second: Weights, kind: str) -> float:
    return max(float(np.max(np.abs(a - b))) for a, b in zip(first[kind], second[kind]))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
    os._exit(0)  # the report is printed; the threads deleting the runs' iterators not awaited
