"""The best validations' checkpoints of a run (`train.keep_best`), as train writes them and
evaluate (`evaluate.weights: best`) and average (`train.average_from: best`) read them:

    checkpoints/best/best.json         the metric, every validation so far [[step, value]...]
                                       and the kept steps, best first
    checkpoints/best/ckpt-STEP/ckpt.*  the model alone at a kept validation (model.json beside)

A new best is written whole before best.json names it, and a checkpoint that falls out of the
best is removed after (pipelines.training.best_checkpoints), so best.json only ever lists
complete checkpoints.

Example:
    >>> kept_checkpoints(RunPaths(run_dir))
    ['runs/demo/checkpoints/best/ckpt-3000/ckpt', 'runs/demo/checkpoints/best/ckpt-2000/ckpt']
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from pipelines import InputError
from pipelines.paths import CHECKPOINT_NAME, RunPaths


@dataclasses.dataclass
class BestRecord:
    """What best.json holds."""

    metric: str
    history: list[list[float]] = dataclasses.field(default_factory=list)  # [[step, value]]
    kept: list[int] = dataclasses.field(default_factory=list)  # steps, best first


def best_checkpoint(paths: RunPaths) -> str:
    """The prefix of the run's best kept checkpoint.

    Raises:
        InputError: none is kept.
    """
    kept = kept_checkpoints(paths)
    if not kept:
        raise InputError(f"{paths.best}: no best checkpoint kept; train with "
                         f"train.keep_best (e.g. 3), or choose other weights")
    return kept[0]


def kept_checkpoints(paths: RunPaths) -> list[str]:
    """The prefixes of the run's kept best checkpoints, best first (none: [])."""
    record = load_best_record(paths.best_record)
    return ([str(paths.best / f"ckpt-{step}" / CHECKPOINT_NAME) for step in record.kept]
            if record else [])


def load_best_record(path: Path) -> BestRecord | None:
    """best.json read, None before the first validation recorded.

    Raises:
        InputError: the file is not such a record.
    """
    if not path.is_file():
        return None
    try:
        return BestRecord(**json.loads(path.read_text()))
    except (ValueError, TypeError) as error:
        raise InputError(f"{path}: not a record of best checkpoints ({error}); move the "
                         f"best/ directory away") from None
