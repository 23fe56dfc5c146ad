"""Training throughput: real target tokens per second of a config's model (demo: the `small`
preset, dropout 0.1) in steady state, in float32 and mixed_bfloat16, each without and with XLA.

    .venv/bin/python bench/train_throughput.py [CONFIG] [--steps N]

Batches: the run's train split as the trainer reads it (data.batch_tokens per update, padded
to bucket boundaries) when runs/NAME is prepared, else synthetic batches of demo-like shapes
(the output says which). Each variant trains its own model through `pipelines.train.Trainer`
(the compiled update, under the machine's strategy) on the same `--steps` batches, taken
beforehand (the input pipeline is not timed). Steady state: one untimed update per distinct
batch shape first traces the step and, with XLA, compiles every shape (its time is printed);
then each batch is one timed update.
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from pipelines.config import PipelineConfig, load_config
from pipelines.data import bucket_boundaries
from pipelines.strategy import make_strategy
from pipelines.train import DatasetFn, Trainer, train_dataset_fn

VARIANTS = (("float32", False), ("float32", True), ("mixed_bfloat16", False),
            ("mixed_bfloat16", True))
SYNTHETIC_VOCAB = 8000
SYNTHETIC_MEAN_LENGTH = 36  # demo: 35.3 target pieces per sentence plus BOS / EOS


def synthetic_dataset_fn(config: PipelineConfig, seed: int = 0) -> DatasetFn:
    """Batches of the token budget padded to bucket boundaries, of lengths drawn around the
    demo corpus's, with 90% real tokens (the demo's padding efficiency)."""
    bounds = bucket_boundaries(config.data.max_length)
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(500):
        length = int(np.clip(rng.normal(SYNTHETIC_MEAN_LENGTH, 15), 4, config.data.max_length))
        padded = next(bound for bound in bounds if bound >= length)
        rows = config.data.batch_tokens // padded
        ids = rng.integers(4, SYNTHETIC_VOCAB, (rows, padded), dtype=np.int32)  # [rows, len]
        ids[:, 0] = BOS_ID
        real = np.clip(rng.normal(0.9 * padded, 2, rows).astype(int), 3, padded)  # [rows]
        ids[np.arange(rows), real - 1] = EOS_ID
        ids[np.arange(padded)[None, :] >= real[:, None]] = PAD_ID
        batches.append({"source_ids": ids[:, 1:], "target_ids": ids})
    spec = tf.TensorSpec([None, None], tf.int32)

    def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return tf.data.Dataset.from_generator(
            lambda: iter(batches), output_signature={"source_ids": spec, "target_ids": spec}
        ).repeat().prefetch(tf.data.AUTOTUNE)

    return make


def measure(config: PipelineConfig, vocab_size: int, dataset_fn: DatasetFn,
            steps: int) -> dict:
    """Takes `steps` batches, runs one untimed update per distinct batch shape (tracing, XLA
    compilations), then times an update on each batch."""
    keras.utils.set_random_seed(config.train.seed)
    strategy = make_strategy()
    trainer = Trainer(config, vocab_size, strategy)
    dataset = strategy.distribute_datasets_from_function(dataset_fn)
    trainer.compile(dataset.element_spec)
    iterator = iter(dataset)
    batches = [next(iterator) for _ in range(steps)]
    one_per_shape = {_shape(strategy, batch): batch for batch in batches}
    started = time.monotonic()
    for batch in one_per_shape.values():
        float(trainer.train_step((batch,))[1])  # waits for the update
    warmup_seconds = time.monotonic() - started
    started = time.monotonic()
    tokens = sum(float(trainer.train_step((batch,))[1]) for batch in batches)
    seconds = time.monotonic() - started
    return {"tokens_per_second": tokens / seconds, "seconds_per_step": seconds / steps,
            "shapes": len(one_per_shape), "warmup_seconds": warmup_seconds}


def _shape(strategy: tf.distribute.Strategy, batch: dict) -> tuple:
    """(source shape, target shape) of the first replica's batch."""
    return tuple(tuple(strategy.experimental_local_results(batch[key])[0].shape)
                 for key in ("source_ids", "target_ids"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", default="demo")
    parser.add_argument("--steps", type=int, default=40, help="timed updates")
    args = parser.parse_args()
    config = load_config(args.config)
    spm_path = config.run_path / "vocab" / "spm.model"
    if spm_path.is_file():
        source = f"{config.run_path}/data/train (prepared run)"
        vocab_size = Tokenizer.from_file(spm_path).vocab_size
        dataset_fn = train_dataset_fn(config, seed=config.data.seed)
    else:
        source = f"synthetic batches of demo-like shapes ({config.run_path} is not prepared)"
        vocab_size, dataset_fn = SYNTHETIC_VOCAB, synthetic_dataset_fn(config)
    print(f"model {config.model.preset}, batches of {config.data.batch_tokens} tokens from "
          f"{source}; {args.steps} timed updates after one per batch shape")
    for dtype, xla in VARIANTS:
        variant = dataclasses.replace(
            config, model=dataclasses.replace(config.model, dtype=dtype),
            train=dataclasses.replace(config.train, jit_compile=xla))
        result = measure(variant, vocab_size, dataset_fn, args.steps)
        print(f"{dtype:15s} XLA {'on ' if xla else 'off'}  "
              f"{result['tokens_per_second']:8,.0f} target tokens/s  "
              f"({result['seconds_per_step']:.3f} s/update; warm-up on {result['shapes']} "
              f"batch shapes {result['warmup_seconds']:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
