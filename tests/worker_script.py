"""Subprocess of tests/test_distributed.py: one MultiWorkerMirroredStrategy worker (TF_CONFIG set
by the test) trains the run of CONFIG as `keras-transformer train` does, saves its final
variables to OUT (.npz) and ends as the CLI ends a worker.

--overflow-at N makes this worker's gradients infinite at update N (when it holds replica 1);
--clock-skew S adds S seconds to its training clock, so that its budget decisions come first.

Usage: python tests/worker_script.py CONFIG OUT [--overflow-at N] [--clock-skew S]
"""
from __future__ import annotations

import argparse

import numpy as np

from pipelines.training.budget import TrainingClock
from pipelines.config import load_config
from pipelines.training.strategy import exit_worker
from pipelines.training.train import TrainingRun
from tiny_run import keep_iterators, overflow_replica_1_at


def skew_clock(seconds: float) -> None:
    elapsed = TrainingClock.elapsed
    TrainingClock.elapsed = lambda self: elapsed(self) + seconds


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("out")
    parser.add_argument("--overflow-at", type=int)
    parser.add_argument("--clock-skew", type=float, default=0.0)
    args = parser.parse_args()
    if args.overflow_at:
        overflow_replica_1_at(args.overflow_at)
    skew_clock(args.clock_skew)
    run = TrainingRun(load_config(args.config))
    keep_iterators(run)  # exit_worker ends the process before they are destroyed
    print(run.run().format())
    np.savez(args.out, *[variable.numpy() for variable in run.trainer.model.variables])
    exit_worker(0)
