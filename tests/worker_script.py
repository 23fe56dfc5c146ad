"""Subprocess of tests/test_train.py: one MultiWorkerMirroredStrategy worker (TF_CONFIG set by
the test) trains the run of CONFIG as `keras-transformer train` does, saves its final
variables to OUT (.npz) and ends as the CLI ends a worker.

Usage: python tests/worker_script.py CONFIG OUT
"""
from __future__ import annotations

import sys

import numpy as np

from pipelines.config import load_config
from pipelines.strategy import exit_worker
from pipelines.train import TrainingRun

if __name__ == "__main__":
    run = TrainingRun(load_config(sys.argv[1]))
    print(run.run().format())
    np.savez(sys.argv[2], *[variable.numpy() for variable in run.trainer.model.variables])
    exit_worker(0)
