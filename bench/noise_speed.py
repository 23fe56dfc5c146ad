"""The train input pipeline with and without noise on the fly: target tokens per second of the
batches `train_dataset_fn` makes of a prepared run's train split (the trainer's batches: its
shards mixed, noised, tokenized and bucketed), `data.noise` set to every modifier at
`--probability`, or none.

    .venv/bin/python bench/noise_speed.py CONFIG [--batches 600] [--probability 0.1 | 0]

With data.alignments prepared, the inline tags read the word alignments. Time two processes
back to back with farm-bench (one with noise, one with `--probability 0`) for the ratio: the
process's own tokens/s figure leaves out the start (TensorFlow, the first batch).
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import tensorflow as tf

from keras_transformer.tokenizer import PAD_ID
from pipelines.config import NoiseConfig, load_config
from pipelines.training.noise import MODIFIERS
from pipelines.training.train_data import train_dataset_fn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("--batches", type=int, default=600)
    parser.add_argument("--probability", type=float, default=0.1)
    args = parser.parse_args()
    config = load_config(args.config)
    noise = NoiseConfig(**dict.fromkeys(MODIFIERS, args.probability))
    data = (dataclasses.replace(config.data, corpora=tuple(
        dataclasses.replace(corpus, noise=noise) for corpus in config.data.corpora))
        if config.data.corpora else dataclasses.replace(config.data, noise=noise))
    config = dataclasses.replace(config, data=data)
    batches = iter(train_dataset_fn(config, seed=config.data.seed)(tf.distribute.InputContext()))
    next(batches)
    start, tokens = time.perf_counter(), 0
    for _ in range(args.batches):
        tokens += int(np.count_nonzero(next(batches)["target_ids"].numpy() != PAD_ID))
    seconds = time.perf_counter() - start
    print(f"noise {args.probability} per modifier: {tokens / seconds:,.0f} target tokens/s "
          f"({args.batches} batches, {seconds:.1f} s)")


if __name__ == "__main__":
    main()
