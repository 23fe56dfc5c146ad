"""The model size for a training budget (`model.preset: auto`).

A budget fixes the compute; for a fixed compute a smaller model trained on more tokens beats a
larger one trained on fewer, down to a floor. `auto` chooses from a ladder of shapes
(`pipelines.config.model.SIZE_LADDER`). Before training, each size is probed on this
machine (a traced update, then PROBE_UPDATES timed ones on other batches of the run), from the
largest down; the chosen one is the first whose expected target tokens in the time left reach
TOKENS_PER_PARAMETER per parameter (so a fast machine probes one size), else the smallest.
The rule and its threshold come from the grid of sizes x training lengths on the demo corpus
(bench/budget_grid.py; the figures and their machines: docs/training.md, "Why 0.7 target
tokens per parameter"). The choice and its reason are recorded in checkpoints/model_size.json
(pipelines.checkpoints.size_record) before the first update, so that a resumed run, average,
evaluate and export use the same size.

Example:
    >>> config, choice = sized_for_budget(config, vocab_size, strategy, clock)
    >>> config.model.d_model, choice.size  # choice None unless model.preset auto
    (128, '2x128')
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

import keras
import tensorflow as tf

from pipelines.checkpoints.size_record import SizeChoice, recorded_size
from pipelines.config import PipelineConfig
from pipelines.config.model import SIZE_LADDER
from pipelines.paths import RunPaths
from pipelines.training.budget import PLANNED_SHARE, TrainingClock
from pipelines.training.strategy import chief_value, is_chief
from pipelines.training.train_data import DatasetFn, train_dataset_fn
from pipelines.training.trainer import Trainer

# Between the crossovers of the grid of sizes on the demo corpus (docs/training.md, "Why 0.7
# target tokens per parameter": its BLEU scores and machines).
TOKENS_PER_PARAMETER = 0.7
PROBE_UPDATES = 3
# (size) -> (seconds of the probed updates, target tokens they trained, parameters)
ProbeFn = Callable[[str], tuple[float, float, int]]


def choose_size(probe: ProbeFn, seconds_left: Callable[[], float]) -> SizeChoice:
    """Probes the ladder from the largest size down and chooses the first whose expected
    target tokens per parameter in the time left reach TOKENS_PER_PARAMETER (a fast machine
    probes one size), else the smallest."""
    probed: dict[str, dict[str, float]] = {}
    lines = []
    for size in reversed(SIZE_LADDER):
        seconds, tokens, parameters = probe(size)
        rate = tokens / max(seconds, 1e-9)
        probed[size] = {"tokens_per_second": round(rate, 1), "parameters": parameters}
        per_parameter = rate * max(seconds_left(), 0.0) / parameters
        lines.append(f"{size} {rate:,.0f} target tokens/s x the time left / {parameters:,} "
                     f"parameters = {per_parameter:.2f} tokens per parameter")
        if per_parameter >= TOKENS_PER_PARAMETER:
            verdict = (f"the largest size with at least {TOKENS_PER_PARAMETER} tokens per "
                       f"parameter")
            break
    else:
        verdict = "the smallest size (none reaches the threshold)"
    return SizeChoice(size=size, reason=f"{verdict}: {'; '.join(lines)}", probed=probed)


def timed_updates(train_step: Callable[[int], float]) -> tuple[float, float]:
    """(seconds, target tokens) of `train_step(k)` for k in 1..PROBE_UPDATES (it runs the
    k-th update and returns its target tokens), after an untimed `train_step(0)` that traces."""
    train_step(0)
    started, tokens = time.monotonic(), 0.0
    for update in range(1, PROBE_UPDATES + 1):
        tokens += train_step(update)
    return time.monotonic() - started, tokens


def probe_sizes(config: PipelineConfig, vocab_size: int, strategy: tf.distribute.Strategy,
                clock: TrainingClock, dataset_fn: DatasetFn | None = None) -> SizeChoice:
    """Probes the sizes on the run's first batches (default: its train split) under
    `strategy`, chooses with the time `clock` leaves and records the choice in the run's
    checkpoints directory (the chief's timings, so that every worker chooses alike). Reseeds
    Keras's random generators with train.seed, so that the chosen model starts as it would
    under an explicit preset."""
    dataset = strategy.distribute_datasets_from_function(
        dataset_fn or train_dataset_fn(config, seed=config.data.seed))
    iterator = iter(dataset)
    # Batches of several length buckets; under XLA one batch, whose shape the untimed update
    # compiles (another shape would time a compilation).
    updates = [tuple(next(iterator) for _ in range(config.train.accumulate_steps))
               for _ in range(1 if config.train.jit_compile else PROBE_UPDATES + 1)]

    def probe(size: str) -> tuple[float, float, int]:
        trainer = Trainer(dataclasses.replace(config, model=config.model.sized(size)),
                          vocab_size, strategy)
        trainer.compile(dataset.element_spec)
        seconds, tokens = timed_updates(
            lambda k: float(trainer.train_step(updates[k % len(updates)])[1]))
        return chief_value(strategy, seconds), tokens, trainer.model.count_params()

    choice = choose_size(probe, lambda: PLANNED_SHARE * chief_value(strategy,
                                                                    clock.seconds_left()))
    if is_chief(strategy):
        directory = RunPaths(config.run_path).checkpoints
        directory.mkdir(parents=True, exist_ok=True)
        choice.save(directory)
    keras.utils.set_random_seed(config.train.seed)
    return choice


def sized_for_budget(config: PipelineConfig, vocab_size: int, strategy: tf.distribute.Strategy,
                     clock: TrainingClock, dataset_fn: DatasetFn | None = None
                     ) -> tuple[PipelineConfig, SizeChoice | None]:
    """(`config` with `model.preset: auto` replaced by the run's size, the choice): the one
    recorded in its checkpoints (or the size its checkpoints have, trained before the config
    said auto), else chosen now (`probe_sizes`); any other preset as it is, without a
    choice."""
    if config.model.preset != "auto":
        return config, None
    directory = RunPaths(config.run_path).checkpoints
    choice = SizeChoice.load(directory)
    if choice is None:
        size = recorded_size(directory)  # checkpoints trained with an explicit preset
        choice = (SizeChoice(size, f"the size of the run's checkpoints ({directory})", {})
                  if size else probe_sizes(config, vocab_size, strategy, clock, dataset_fn))
    return dataclasses.replace(config, model=config.model.sized(choice.size)), choice
