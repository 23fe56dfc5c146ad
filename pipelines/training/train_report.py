"""What the train stage reports: the summary of a run (`TrainSummary`), the throughput and
mean loss of a window of updates (`Window`) and the realised mix of the corpora (`Mix`).

Example:
    >>> window = Window()
    >>> window.add(loss=4.2, tokens=4096, seconds=0.5)
    >>> window.tokens_per_second()
    8192.0
    >>> mix = Mix(["europarl", "bt"], [3.0, 1.0])
    >>> mix.add(np.array([0, 0, 1, 0]))
    >>> mix.shares()
    (('europarl', 0.75, 0.75), ('bt', 0.25, 0.25))
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class TrainSummary:
    """What a train run did."""

    run_dir: Path
    strategy: str
    replicas: int
    start_step: int  # the checkpoint resumed from; 0 for a fresh run
    step: int
    loss: float  # over the last logging window
    tokens_per_second: float  # real target tokens, after the first (compiling) step
    dev_loss: float | None
    dev_bleu: float | None
    checkpoint: str | None
    seconds: float  # the stage's wall time, over all its invocations
    multi_worker: bool
    dtype: str  # the Keras dtype policy trained in (`auto` resolved)
    dtype_reason: str  # why that policy, e.g. "mixed_bfloat16: the CPU has amx_bf16 and ..."
    # or "budget": train.max_minutes ended it before train.steps; or "early_stopping"
    ended_by: str = "steps"
    stop_reason: str | None = None  # why early stopping ended training
    budget_minutes: float | None = None
    planned_steps: int | None = None  # steps of the recipe followed (compressed by a budget)
    warmup_steps: int | None = None
    learning_rate_scale: float | None = None
    init_from: str | None = None  # the parent checkpoint of a fine-tuning run
    skipped_updates: int = 0  # skipped by mixed_float16's loss scaling (gradients overflowed)
    loss_scale: float | None = None  # mixed_float16's dynamic loss scale at the end
    model_size: str | None = None  # the size `model.preset: auto` chose (LAYERSxD_MODEL)
    model_size_reason: str | None = None
    # With several corpora: (name, weight's share, share of the pairs trained on) each, as
    # this worker read them (`Mix.shares`).
    corpus_mix: tuple[tuple[str, float, float], ...] = ()

    def format(self) -> str:
        """The summary as the CLI prints it."""
        resumed = f"resumed at step {self.start_step:,}, " if self.start_step else ""
        lines = [f"trained {self.run_dir} to step {self.step:,} ({resumed}{self.strategy}, "
                 f"{self.replicas} replica(s)) in {self.seconds:.0f} s"]
        if self.model_size:
            lines.append(f"  size      {self.model_size} (model.preset auto): "
                         f"{self.model_size_reason}")
        if self.init_from:
            lines.append(f"  parent    {self.init_from} (fine-tuned from its weights)")
        lines += [
                 f"  loss      {self.loss:.4f} (train)" + (
                     f", {self.dev_loss:.4f} (dev)" if self.dev_loss is not None else ""),
                 f"  speed     {self.tokens_per_second:,.0f} target tokens/s",
                 f"  dtype     {self.dtype_reason}"]
        if self.dev_bleu is not None:
            lines.append(f"  dev BLEU  {self.dev_bleu:.2f} (train.bleu_max_sentences pairs)")
        if self.ended_by == "budget":
            lines.append(f"  budget    {self.budget_minutes:g} min ended training at step "
                         f"{self.step:,}: a {self.planned_steps:,}-step recipe, warm-up "
                         f"{self.warmup_steps:,}, learning-rate scale "
                         f"{self.learning_rate_scale:.3f}")
        if self.stop_reason:
            lines.append(f"  stopped   {self.stop_reason}")
        if self.corpus_mix:
            lines.append("  corpora   " + ", ".join(
                f"{name} {share:.1%} (weight {weight:.1%})"
                for name, weight, share in self.corpus_mix) + " of the pairs trained on")
        if self.loss_scale is not None:
            lines.append(f"  float16   loss scale {self.loss_scale:g}; {self.skipped_updates:,} "
                         f"update(s) skipped where the gradients overflowed")
        lines.append(f"  saved     {self.checkpoint}")
        return "\n".join(lines)


class Window:
    """Token-weighted mean loss and training throughput over some steps."""

    def __init__(self) -> None:
        self.loss_sum = self.tokens = self.seconds = 0.0
        self.updates = 0

    def add(self, loss: float, tokens: float, seconds: float) -> None:
        self.loss_sum += loss * tokens
        self.tokens += tokens
        self.seconds += seconds
        self.updates += 1

    def seconds_per_update(self) -> float:
        return self.seconds / max(self.updates, 1)

    def mean_loss(self) -> float:
        return self.loss_sum / max(self.tokens, 1.0)

    def tokens_per_second(self) -> float:
        """Real target tokens per second of training (validation and saving left out)."""
        return self.tokens / max(self.seconds, 1e-9)


class Mix:
    """The realised mix of the corpora: the pairs of each trained on, against its weight."""

    def __init__(self, names: Sequence[str], weights: Sequence[float]) -> None:
        self.names = list(names)
        self.weights = np.array(weights, float) / sum(weights)
        self.pairs = np.zeros(len(self.names), np.int64)

    def add(self, corpus: np.ndarray) -> None:
        """Counts the pairs of a batch by their corpus index (its "corpus": int [batch])."""
        self.pairs += np.bincount(corpus, minlength=len(self.names))

    def shares(self) -> tuple[tuple[str, float, float], ...]:
        """(name, weight's share, share of the pairs counted) of each corpus."""
        shares = self.pairs / max(int(self.pairs.sum()), 1)
        return tuple((name, float(weight), float(share))
                     for name, weight, share in zip(self.names, self.weights, shares))
