"""The `train` section: the paper's recipe (section 5.3), the budget, checkpoints and
validations, checked when the config loads (`FieldError` names the key); `train.batch_tokens`
against data.max_length is checked with the whole config (pipelines.config.pipeline).

Example:
    >>> TrainConfig(steps=4000, max_minutes=30).warmup_steps
    4000
"""
from __future__ import annotations

import dataclasses
from typing import Literal

from pipelines.yaml_dataclasses import FieldError


@dataclasses.dataclass(frozen=True)
class EarlyStopping:
    """`train.early_stopping`: the validation metric that ranks checkpoints (`keep_best`) and
    ends training after `patience` validations without improving on its best by more than
    `min_delta` (patience 0: never)."""

    metric: Literal["dev_loss", "dev_bleu", "dev_chrf"] = "dev_loss"
    patience: int = 0
    min_delta: float = 0.0

    def __post_init__(self) -> None:
        if self.patience < 0:
            raise FieldError("patience", f"must be at least 0 (0: off), got {self.patience!r}")
        if self.min_delta < 0:
            raise FieldError("min_delta", f"must be at least 0, got {self.min_delta!r}")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The `train` section: the paper's recipe (section 5.3) and the run's bookkeeping.

    An update sums `accumulate_steps` batches of `batch_tokens` (split evenly over the
    replicas); the loss is divided by the real target tokens of all of them. Pairs are read in
    an order shuffled within `shuffle_buffer` pairs. Intervals set to 0 are off. Training ends
    at `steps` or at `max_minutes`, whichever comes first.

    `init_from` (fine-tuning, domain adaptation) starts the run from the weights of another:
    a run directory (its averaged checkpoint, else its latest) or a checkpoint prefix, relative
    to the working directory like `run_dir`. The run keeps the parent's vocabulary (`prepare`
    copies its spm.model) and architecture (the `model` section must describe it); the
    optimizer and the schedule start afresh, from `warmup_steps` and `learning_rate_scale`.
    See pipelines/training/parent.py.
    """

    steps: int = 100_000  # updates; the paper trains the base model 100k steps, big 300k
    batch_tokens: int = 4096  # per side and batch, padding included, over all replicas
    shuffle_buffer: int = 100_000  # pairs
    # A wall-clock budget for the stage (0: none); it compresses the recipe to fit (see
    # pipelines/training/budget.py) and ends training with a checkpoint when time is up.
    max_minutes: float = 0.0
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0  # multiplies the learning rate of eq. 3
    accumulate_steps: int = 1
    checkpoint_every_steps: int = 1000
    checkpoint_every_minutes: float = 10.0  # the paper's interval
    keep_checkpoints: int = 5
    average_last: int = 5  # the paper averages the last 5 checkpoints (base), 20 (big)
    average_from: Literal["last", "best"] = "last"  # the last checkpoints, or the best kept
    validate_every_steps: int = 1000  # dev loss
    bleu_every_steps: int = 5000  # dev BLEU and chrF
    bleu_max_sentences: int = 500  # the first dev pairs scored for BLEU
    bleu_beam_size: int = 1  # dev BLEU's decoding: 1 is greedy search
    # Model-only checkpoints of the keep_best best validations by early_stopping.metric
    # (checkpoints/best/; 0: none), for `evaluate.weights: best` and `average_from: best`.
    keep_best: int = 0
    early_stopping: EarlyStopping = dataclasses.field(default_factory=EarlyStopping)
    log_every_steps: int = 100
    jit_compile: bool = False  # XLA: one compilation per batch shape
    # An exponential moving average of the weights (0: off), written to checkpoints/ema for
    # evaluate and export (`evaluate.weights: ema`); see pipelines/training/weight_average.py.
    ema_decay: float = 0.0
    # Guided alignment (0: off): the weight of one head's alignment cross-entropy in the loss
    # (keras_transformer/guided_alignment.py; OpenNMT-tf's default 1, Garg et al. 0.05), with
    # data.alignments' gold links; word alignments then read that head (model.alignment_heads 1).
    guided_alignment_weight: float = 0.0
    # Several workers: how long one waits in a collective for the others before ending with
    # the name of the worker that never came (a dead one is found in seconds by its missing
    # heartbeats); longer than any pause of one worker (the chief's validation, a save).
    worker_timeout_minutes: float = 5.0
    seed: int = 1234  # initialisation and dropout
    init_from: str | None = None  # the parent run directory or checkpoint of a fine-tuning

    def __post_init__(self) -> None:
        if self.init_from is not None and not self.init_from.strip():
            raise FieldError("init_from", "must name a run directory or a checkpoint, got ''")
        for key, low in (("steps", 1), ("batch_tokens", 1), ("shuffle_buffer", 1),
                         ("warmup_steps", 1), ("accumulate_steps", 1),
                         ("checkpoint_every_steps", 0), ("keep_checkpoints", 1),
                         ("average_last", 1), ("validate_every_steps", 0),
                         ("bleu_every_steps", 0), ("bleu_max_sentences", 1),
                         ("bleu_beam_size", 1), ("keep_best", 0), ("log_every_steps", 1)):
            if getattr(self, key) < low:
                raise FieldError(key, f"must be at least {low}, got {getattr(self, key)!r}")
        if self.learning_rate_scale <= 0:
            raise FieldError("learning_rate_scale",
                             f"must be positive, got {self.learning_rate_scale!r}")
        if self.guided_alignment_weight < 0:
            raise FieldError("guided_alignment_weight", f"must be at least 0 (0: off), "
                             f"got {self.guided_alignment_weight!r}")
        if not 0 <= self.ema_decay < 1:
            raise FieldError("ema_decay", f"must be in [0, 1) (0: off; 0.999 averages about "
                             f"the last 1,000 updates), got {self.ema_decay!r}")
        if self.max_minutes < 0:
            raise FieldError("max_minutes", f"must be at least 0 (0: no budget), "
                             f"got {self.max_minutes!r}")
        if self.worker_timeout_minutes <= 0:
            raise FieldError("worker_timeout_minutes",
                             f"must be positive, got {self.worker_timeout_minutes!r}")
        if self.checkpoint_every_minutes < 0:
            raise FieldError("checkpoint_every_minutes",
                             f"must be at least 0, got {self.checkpoint_every_minutes!r}")
        metric = self.early_stopping.metric
        interval = "validate_every_steps" if metric == "dev_loss" else "bleu_every_steps"
        if (self.keep_best or self.early_stopping.patience) and not getattr(self, interval):
            raise FieldError("early_stopping.metric", f"{metric} is measured every "
                             f"train.{interval} steps, which is 0 (off): set it")
        if self.average_from == "best" and self.average_last > self.keep_best:
            raise FieldError("average_last", f"must be at most keep_best ({self.keep_best}) "
                             f"to average the best, got {self.average_last!r}")
        if self.average_last > self.keep_checkpoints:
            raise FieldError("average_last", f"must be at most keep_checkpoints "
                             f"({self.keep_checkpoints}), got {self.average_last!r}")
