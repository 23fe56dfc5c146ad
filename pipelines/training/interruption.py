"""How training stops before its end: a preemption signal, agreed by every worker, and a worker
lost from the cluster; each ends every process with its own exit status and one line.

* Preemption (`PreemptionSignals`): SIGTERM (a cloud provider's notice) and SIGINT (Ctrl-C)
  set a flag instead of killing the process. The training loop ends the update in flight,
  agrees the flag across workers in the collective it already runs after every update
  (`pipelines.training.strategy.any_worker`), saves a checkpoint at that step and raises
  `Preempted`: every process exits with `PREEMPTED_STATUS` (75, sysexits' EX_TEMPFAIL: run
  again). Signals during the save are only noted, so a second SIGTERM never cuts a checkpoint.
* A lost worker (`worker_lost`): a worker that dies or freezes stops its heartbeats to the
  cluster's coordination service, which aborts the others' collectives within seconds
  (TensorFlow's UnavailableError, naming the task); one that is alive but stuck leaves the
  others in a collective until `train.worker_timeout_minutes` (DeadlineExceededError), when
  they ask the coordination service which workers never arrived. Every survivor raises
  `WorkerLost` naming them and exits with `WORKER_LOST_STATUS` (69, EX_UNAVAILABLE); a restart
  of every worker resumes from the last checkpoint.

Example:
    >>> with PreemptionSignals() as signals:  # SIGTERM, SIGINT: signals.received == "SIGTERM"
    ...     train_until(lambda: signals.received is not None)
"""
from __future__ import annotations

import re
import signal
import threading
import time
from types import FrameType, TracebackType

import tensorflow as tf
from tensorflow.python.eager import context

PREEMPTED_STATUS = 75  # sysexits.h EX_TEMPFAIL: a temporary failure, the user is to run again
WORKER_LOST_STATUS = 69  # sysexits.h EX_UNAVAILABLE: a service (a worker) went away
TASK_NAME = re.compile(r"/job:(\w+)/replica:\d+/task:(\d+)")
ARRIVAL_KEY = "keras_transformer/arrived/{task}"
ARRIVAL_WAIT_MS = 10_000  # how long a survivor waits for all the others to say they arrived


class TrainingStopped(RuntimeError):
    """Training ended before its steps or budget; the message is the process's one line."""

    status: int


class Preempted(TrainingStopped):
    """A preemption signal reached a worker; every worker saved and ends here."""

    status = PREEMPTED_STATUS


class WorkerLost(TrainingStopped):
    """A worker died or stopped answering; the others end without saving."""

    status = WORKER_LOST_STATUS


class PreemptionSignals:
    """Within the block, SIGTERM and SIGINT set `received` (the first signal's name) instead of
    ending the process; the previous handlers come back after it. Outside Python's main thread
    (where signals cannot be handled) the block changes nothing."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> PreemptionSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {number: signal.signal(number, self._note)
                              for number in self.SIGNALS}
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def _note(self, number: int, frame: FrameType | None) -> None:
        self.received = self.received or signal.Signals(number).name


def preempted_line(signalled: list[str], here: str | None, step: int, latest: str | None,
                   multi_worker: bool) -> str:
    """The one line of every process: which signal reached which worker, the step, and how to
    resume (from `latest`, the checkpoint of that step when one was saved)."""
    if here and not multi_worker:
        what = here
    else:
        what = f"{here} to this worker" if here else f"a signal to {', '.join(signalled)}"
    rerun = ("restart every worker with the same command" if multi_worker
             else "run the same command")
    resume = f"resume from {latest}" if latest else "start again (no checkpoint saved yet)"
    return f"preempted ({what}) at step {step:,}: {rerun} to {resume}"


def worker_lost(error: tf.errors.OpError, workers: dict[str, str], this_worker: str,
                step: int, latest: str | None, timeout_minutes: float) -> WorkerLost:
    """The `WorkerLost` of a collective aborted by `error`, naming the worker(s) lost.

    Args:
        error: UnavailableError (the coordination service saw a worker's heartbeats stop) or
            DeadlineExceededError (a collective outlasted `timeout_minutes`).
        workers: every worker's `TYPE-ID` -> its address.
        this_worker: this process's `TYPE-ID`.
        step: the last update this worker applied.
        latest: the last checkpoint saved, if any.
    """
    if isinstance(error, tf.errors.DeadlineExceededError):
        lost = _absent_workers(list(workers), this_worker)
        how = f"did not answer within train.worker_timeout_minutes ({timeout_minutes:g})"
    else:
        lost = sorted({f"{job}-{task}" for job, task in TASK_NAME.findall(error.message)}
                      - {this_worker})
        how = "stopped (no heartbeat)"
    named = ", ".join(f"{name} ({workers[name]})" for name in lost if name in workers)
    resume = f"resume from {latest}" if latest else "start again (no checkpoint saved yet)"
    return WorkerLost(f"{named or 'another worker'} {how} after step {step:,}: restart every "
                      f"worker to {resume}")


def _absent_workers(workers: list[str], this_worker: str) -> list[str]:
    """The workers that never reached the collective this one timed out in: each survivor
    records its arrival with the coordination service, then waits a little for the others'.
    With one other worker there is nothing to wait for: it is the one that never came."""
    others = [name for name in workers if name != this_worker]
    if len(others) == 1:
        return others
    context.context().set_config_key_value(ARRIVAL_KEY.format(task=this_worker), "1")
    deadline = time.monotonic() + ARRIVAL_WAIT_MS / 1000  # one wait for all, not one each
    absent = []
    for name in others:
        left_ms = max(1, round(1000 * (deadline - time.monotonic())))
        try:
            context.context().get_config_key_value(ARRIVAL_KEY.format(task=name),
                                                   timeout_in_ms=left_ms)
        except tf.errors.OpError:
            absent.append(name)
    return absent
