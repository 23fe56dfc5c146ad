"""Keeping the best validations of a run (`train.keep_best`) and early stopping
(`train.early_stopping`), by one metric: dev loss (lower is better), dev BLEU or chrF (higher).

Each validation is recorded in checkpoints/best/best.json (its layout, and the reading of it by
evaluate and average: pipelines.checkpoints.best). A new best is written whole (`write_weights`:
a staging directory renamed into place) before best.json names it, and a checkpoint that falls
out of the best is removed after, so best.json only ever lists complete checkpoints. The
history survives a resumed run, so patience counts validations across invocations.

Example:
    >>> best = BestCheckpoints(paths, keep=3, stopping=config.train.early_stopping)
    >>> best.add(step=2000, value=dev_loss, model=model)  # the reason training ends, or None
"""
from __future__ import annotations

import dataclasses
import json
import shutil

import keras

from pipelines.checkpoints.best import BestRecord, load_best_record
from pipelines.checkpoints.weights import write_weights
from pipelines.config.train import EarlyStopping
from pipelines.files import atomic_open
from pipelines.paths import RunPaths

LOWER_IS_BETTER = {"dev_loss": True, "dev_bleu": False, "dev_chrf": False}


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
        record = load_best_record(paths.best_record)
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
