"""Subprocess of tests/test_distributed.py and tests/test_train.py: `keras-transformer train
CONFIG` (the CLI's own entry point and exit), one MultiWorkerMirroredStrategy worker when the
test sets TF_CONFIG, with scripted events; a run that ends normally saves its final variables
to OUT (.npz).

--overflow-at N makes this worker's gradients infinite at update N (when it holds replica 1);
--clock-skew S adds S seconds to its training clock, so that its budget decisions come first;
--signal-at N sends this process SIGTERM as update N starts (the update is in flight);
--signal-in-save sends it a second SIGTERM inside the checkpoint save that follows;
--pause-at N stops this worker before update N (it sleeps, alive, after creating OUT.paused);
--slow-validation S makes the chief's validation after update 10 last S seconds more.

Usage: python tests/worker_script.py CONFIG OUT [--overflow-at N] [--clock-skew S]
           [--signal-at N [--signal-in-save]] [--pause-at N] [--slow-validation S]
"""
from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path

import numpy as np

from pipelines.startup import default_log_level, import_tensorflow_quietly

default_log_level("train")  # as the CLI starts: the stderr of the test is the user's
import_tensorflow_quietly()

from pipelines.cli import main  # noqa: E402
from pipelines.training.budget import TrainingClock  # noqa: E402
from pipelines.training.checkpoints import CheckpointSaver  # noqa: E402
from pipelines.training.strategy import exit_worker  # noqa: E402
from pipelines.training.train import TrainingRun  # noqa: E402
from pipelines.training.trainer import Trainer  # noqa: E402
from pipelines.training.validation import Validator  # noqa: E402
from tiny_run import overflow_replica_1_at  # noqa: E402


def skew_clock(seconds: float) -> None:
    elapsed = TrainingClock.elapsed
    TrainingClock.elapsed = lambda self: elapsed(self) + seconds


def before_update(update: int, event) -> None:
    """Calls `event()` as update `update` (counted from 1) starts, before its computation."""
    compile_step = Trainer.compile

    def compiling(self, element_spec) -> None:
        compile_step(self, element_spec)
        train_step = self.train_step

        def scripted(batches):
            if self.step == update - 1:
                event()
            return train_step(batches)

        self.train_step = scripted

    Trainer.compile = compiling


def signal_in_save() -> None:
    """A second SIGTERM as the preemption's checkpoint starts being written."""
    save = CheckpointSaver.save

    def signalled(self, step: int) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        save(self, step)

    CheckpointSaver.save = signalled


def pause(marker: Path) -> None:
    marker.touch()
    time.sleep(3600)


def slow_validation(seconds: float) -> None:
    maybe_run = Validator.maybe_run

    def slow(self, step: int, *args, **kwargs):
        if step == 10:
            time.sleep(seconds)
        return maybe_run(self, step, *args, **kwargs)

    Validator.maybe_run = slow


def save_final_variables(out: str) -> None:
    """OUT.npz of the model's variables once the run ends normally."""
    run = TrainingRun.run

    def saving(self):
        summary = run(self)
        np.savez(out, *[variable.numpy() for variable in self.trainer.model.variables])
        return summary

    TrainingRun.run = saving


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("out")
    parser.add_argument("--overflow-at", type=int)
    parser.add_argument("--clock-skew", type=float, default=0.0)
    parser.add_argument("--signal-at", type=int)
    parser.add_argument("--signal-in-save", action="store_true")
    parser.add_argument("--pause-at", type=int)
    parser.add_argument("--slow-validation", type=float)
    args = parser.parse_args()
    if args.overflow_at:
        overflow_replica_1_at(args.overflow_at)
    skew_clock(args.clock_skew)
    if args.signal_at:
        before_update(args.signal_at, lambda: os.kill(os.getpid(), signal.SIGTERM))
        if args.signal_in_save:
            signal_in_save()
    if args.pause_at:
        before_update(args.pause_at, lambda: pause(Path(f"{args.out}.paused")))
    if args.slow_validation:
        slow_validation(args.slow_validation)
    save_final_variables(args.out)
    exit_worker(main(["train", args.config]))
