"""The words and signals of a stopped training (pipelines/training/interruption.py), without a
cluster: the signals caught and given back, the preemption line, the lost worker named from
TensorFlow's error. The runs that stop: tests/test_train.py and tests/test_distributed.py."""
from __future__ import annotations

import os
import signal
import time

import pytest
import tensorflow as tf

from pipelines.training.interruption import (PREEMPTED_STATUS, WORKER_LOST_STATUS, Preempted,
                                             PreemptionSignals, WorkerLost, preempted_line,
                                             worker_lost)


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_in_the_block_is_noted_once_and_the_handlers_come_back(number: int) -> None:
    before = signal.getsignal(number)
    with PreemptionSignals() as signals:
        os.kill(os.getpid(), number)
        os.kill(os.getpid(), signal.SIGTERM)  # a second signal keeps the first one's name
        time.sleep(0.01)  # Python runs handlers between bytecodes
    assert signals.received == signal.Signals(number).name
    assert signal.getsignal(number) is before


def test_the_preemption_line_says_where_and_how_to_resume() -> None:
    assert preempted_line([], "SIGTERM", 1234, "runs/a/checkpoints/ckpt-1234", False) == (
        "preempted (SIGTERM) at step 1,234: run the same command to resume from "
        "runs/a/checkpoints/ckpt-1234")
    assert preempted_line(["worker-1"], None, 7, "c/ckpt-7", True) == (
        "preempted (a signal to worker-1) at step 7: restart every worker with the same "
        "command to resume from c/ckpt-7")
    assert preempted_line(["worker-1"], "SIGINT", 0, None, True) == (
        "preempted (SIGINT to this worker) at step 0: restart every worker with the same "
        "command to start again (no checkpoint saved yet)")
    assert (Preempted.status, WorkerLost.status) == (PREEMPTED_STATUS, WORKER_LOST_STATUS) == (
        75, 69)


def test_a_lost_worker_is_named_from_the_coordination_services_list() -> None:
    """The unhealthy tasks listed (not the task that reported them) are the ones lost."""
    error = tf.errors.UnavailableError(None, None, (
        "Collective ops is aborted by: Error reported from /job:worker/task:1: The following "
        "tasks are unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:2\n"
        "The tasks have crashed."))
    workers = {"worker-0": "10.0.0.1:2222", "worker-1": "10.0.0.2:2222",
               "worker-2": "10.0.0.3:2222"}
    lost = worker_lost(error, workers, "worker-0", 41, "r/checkpoints/ckpt-40", 5.0)
    assert isinstance(lost, WorkerLost)
    assert str(lost) == ("worker-2 (10.0.0.3:2222) stopped (no heartbeat) after step 41: "
                         "restart every worker to resume from r/checkpoints/ckpt-40")


def test_a_timeout_with_one_other_worker_names_it_at_once() -> None:
    """A collective timed out with two workers: the other is the one that never came, named
    without asking the coordination service (none runs here) or waiting for its answer."""
    error = tf.errors.DeadlineExceededError(None, None, "Collective ops timed out")
    workers = {"worker-0": "10.0.0.1:2222", "worker-1": "10.0.0.2:2222"}
    started = time.monotonic()
    lost = worker_lost(error, workers, "worker-0", 12, "r/checkpoints/ckpt-10", 0.1)
    assert time.monotonic() - started < 1
    assert str(lost) == ("worker-1 (10.0.0.2:2222) did not answer within "
                         "train.worker_timeout_minutes (0.1) after step 12: restart every worker "
                         "to resume from r/checkpoints/ckpt-10")
