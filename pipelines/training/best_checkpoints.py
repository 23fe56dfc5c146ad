"""The best validations of a run (`train.keep_best`) and early stopping
(`train.early_stopping`), by one metric: dev loss (lower is better), dev BLEU or chrF (higher).

    checkpoints/best/best.json         the metric, every validation so far [[step, value]...]
                                       and the kept steps, best first
    checkpoints/best/ckpt-STEP/ckpt.*  the model alone at a kept validation (model.json beside)

A new best is written whole (`write_weights`: a staging directory renamed into place) before
best.json names it, and a checkpoint that falls out of the best is removed after, so best.json
only ever lists complete checkpoints. The history survives a resumed run, so patience counts
validations across invocations.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import keras

from pipelines import InputError
from pipelines.files import atomic_open
from pipelines.paths import CHECKPOINT_NAME, RunPaths
from pipelines.config.train import EarlyStopping
from pipelines.training.checkpoints import write_weights

LOWER_IS_BETTER = {"dev_loss": True, "dev_bleu": False, "dev_chrf": False}


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
    record = _load(paths.best_record)
    return ([str(paths.best / f"ckpt-{step}" / CHECKPOINT_NAME) for step in record.kept]
            if record else [])


class BestCheckpoints:
    """Records each validation of the metric, keeps the best `keep` model-only checkpoints and
    says when early stopping ends training.

    Args:
        paths: the run's map (checkpoints/best).
        keep: checkpoints kept (0: none, the history alone).
        stopping: the metric, patience and min_delta.
    """

    def __init__(self, paths: RunPaths, keep: int, stopping: EarlyStopping) -> None:
        self.paths, self.keep, self.stopping = paths, keep, stopping
        self.lower_is_better = LOWER_IS_BETTER[stopping.metric]
        record = _load(paths.best_record)
        self.record = (record if record and record.metric == stopping.metric
                       else BestRecord(stopping.metric))

    def add(self, step: int, value: float, model: keras.Model) -> str | None:
        """Records `value` at `step`, keeps the model's weights if among the best; returns why
        early stopping ends training now (`stop_reason`), if it does."""
        history = [entry for entry in self.record.history if entry[0] < step]  # a rerun step
        self.record.history = history + [[step, value]]
        values = dict((int(s), v) for s, v in self.record.history)
        ranked = sorted([s for s in self.record.kept if s in values and s != step] + [step],
                        key=lambda s: values[s], reverse=not self.lower_is_better)
        kept = ranked[:self.keep]
        if step in kept:
            write_weights(model.variables, model.model_config, self.paths.best / f"ckpt-{step}",
                          {"step": step, "metric": self.stopping.metric, "value": value})
        dropped = [s for s in self.record.kept if s not in kept]
        self.record.kept = kept
        self.paths.best.mkdir(parents=True, exist_ok=True)
        with atomic_open(self.paths.best_record, "w") as file:
            json.dump(dataclasses.asdict(self.record), file, indent=2)
            file.write("\n")
        for old in dropped:
            shutil.rmtree(self.paths.best / f"ckpt-{old}", ignore_errors=True)
        return self.stop_reason()

    def stop_reason(self) -> str | None:
        """Why training ends now (patience validations without improving on the best by more
        than min_delta), else None."""
        patience = self.stopping.patience
        history = self.record.history
        if not patience or len(history) <= patience:
            return None
        sign = 1.0 if self.lower_is_better else -1.0
        best_step, best = history[0]
        since = 0
        for step, value in history[1:]:
            if sign * (best - value) > self.stopping.min_delta:
                best_step, best, since = step, value, 0
            else:
                since += 1
        if since < patience:
            return None
        name = self.stopping.metric.replace("_", " ")
        return (f"early stopping: {name} has not improved on {best:.4f} (step "
                f"{int(best_step):,}) by more than {self.stopping.min_delta:g} in {since} "
                f"validations")


def _load(path: Path) -> BestRecord | None:
    if not path.is_file():
        return None
    try:
        return BestRecord(**json.loads(path.read_text()))
    except (ValueError, TypeError) as error:
        raise InputError(f"{path}: not a record of best checkpoints ({error}); move the "
                         f"best/ directory away") from None
