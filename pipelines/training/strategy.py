"""The tf.distribute strategy of this machine, and what the trainer asks of it.

MultiWorkerMirroredStrategy when the TF_CONFIG environment variable names a cluster (one
process per worker, the chief being task `chief` 0, else `worker` 0); otherwise
MirroredStrategy over every visible GPU, or over the logical CPU devices on a machine without
one (a single device unless `tf.config.set_logical_device_configuration` split the CPU).

Example:
    >>> strategy = make_strategy()  # TF_CONFIG unset, no GPU: MirroredStrategy on the CPU
    >>> is_chief(strategy), strategy.num_replicas_in_sync
    (True, 1)
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Sequence

import numpy as np
import tensorflow as tf

from pipelines import InputError


def cluster_spec() -> dict[str, list[str]]:
    """The `cluster` of TF_CONFIG ({} when unset): task type -> addresses."""
    return json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})


def make_strategy(collective_timeout_minutes: float | None = None) -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy for a TF_CONFIG cluster, else MirroredStrategy on the
    local GPUs (or logical CPUs). Under a cluster, a collective that waits longer than
    `collective_timeout_minutes` for a worker fails with DeadlineExceededError (None: never)."""
    if cluster_spec():
        timeout = collective_timeout_minutes and 60 * collective_timeout_minutes
        return tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                timeout_seconds=timeout or None))
    devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    return tf.distribute.MirroredStrategy([device.name for device in devices])


def is_multi_worker(strategy: tf.distribute.Strategy) -> bool:
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def strategy_name(strategy: tf.distribute.Strategy) -> str:
    """The class users chose (MultiWorkerMirroredStrategy's is CollectiveAllReduceStrategy)."""
    return "MultiWorkerMirroredStrategy" if is_multi_worker(strategy) else type(strategy).__name__


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True in the one process that writes checkpoints, logs and prints."""
    if not is_multi_worker(strategy):
        return True
    resolver = strategy.cluster_resolver
    if resolver.task_type == "chief":
        return True
    return resolver.task_type == "worker" and resolver.task_id == 0 and \
        "chief" not in resolver.cluster_spec().as_dict()


def task_id(strategy: tf.distribute.Strategy) -> str:
    """`TYPE-ID` of this worker (`local` without a cluster)."""
    if not is_multi_worker(strategy):
        return "local"
    return f"{strategy.cluster_resolver.task_type}-{strategy.cluster_resolver.task_id}"


def workers(strategy: tf.distribute.Strategy) -> dict[str, str]:
    """Every worker's `TYPE-ID` -> its address, the chief first (`local` -> "" without a
    cluster); `any_worker` flags per worker follow this order."""
    if not is_multi_worker(strategy):
        return {"local": ""}
    spec = strategy.cluster_resolver.cluster_spec().as_dict()
    return {f"{job}-{index}": address for job in ("chief", "worker")
            for index, address in enumerate(spec.get(job, []))}


def any_worker(strategy: tf.distribute.Strategy, flags: Sequence[bool]) -> tuple[bool, ...]:
    """Each of `flags` true where it is true in any worker, in one collective: decisions taken
    from a worker's own clock (a checkpoint every N minutes, the budget) must agree, or the
    workers' collectives would diverge (a hang). Every worker must call it at the same point."""
    return tuple(mean > 0 for mean in _mean_over_replicas(strategy, [float(f) for f in flags]))


def mean_over_workers(strategy: tf.distribute.Strategy, value: float) -> float:
    """The mean of a per-worker measurement over all workers (`value` itself on one machine),
    so that decisions taken from it agree everywhere."""
    return _mean_over_replicas(strategy, [value])[0]


def _mean_over_replicas(strategy: tf.distribute.Strategy, values: list[float]) -> list[float]:
    """Each value's mean over all workers (every replica of a worker holds its value)."""
    if not is_multi_worker(strategy):
        return values
    return [float(mean) for mean in _reduce_over_replicas(strategy, "MEAN", values)]


def chief_value(strategy: tf.distribute.Strategy, value: float) -> float:
    """The chief's `value` on every worker (what only the chief measures, such as the time its
    validation takes), so that decisions taken from it agree everywhere."""
    if not is_multi_worker(strategy):
        return value
    share = value / len(strategy.extended.worker_devices) if is_chief(strategy) else 0.0
    return float(_reduce_over_replicas(strategy, "SUM", [share])[0])


def wait_for_chief(strategy: tf.distribute.Strategy) -> None:
    """Every worker waits here until all arrive, for as long as the chief's validation takes
    (up to CHIEF_WAIT_SECONDS, not train.worker_timeout_minutes); a chief that dies still ends
    the wait (its heartbeats stop)."""
    if is_multi_worker(strategy):
        _reduce_over_replicas(strategy, "SUM", [0.0], timeout_seconds=CHIEF_WAIT_SECONDS)


CHIEF_WAIT_SECONDS = 24 * 3600


def _reduce_over_replicas(strategy: tf.distribute.Strategy, operation: str,
                          values: list[float], timeout_seconds: float | None = None
                          ) -> np.ndarray:
    """`values` (each replica holding them) reduced over every replica of every worker, in a
    tf.function traced once per strategy, operation and timeout (run eagerly, a collective
    costs more and TensorFlow warns of it on every call). `timeout_seconds` replaces the
    strategy's collective timeout (None: keeps it)."""
    key = (id(strategy), operation, timeout_seconds)
    if key not in _REDUCERS:
        options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout_seconds)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)], autograph=False)
        def reduce(local: tf.Tensor) -> tf.Tensor:  # [len(values)] -> the same
            per_replica = strategy.run(  # identity: a copy on the replica's device
                lambda: tf.distribute.get_replica_context().all_reduce(
                    operation, tf.identity(local), options=options))
            return strategy.experimental_local_results(per_replica)[0]

        _REDUCERS[key] = reduce
    return _REDUCERS[key](tf.constant(values, tf.float32)).numpy()


_REDUCERS: dict[tuple[int, str, float | None], tf.types.experimental.GenericFunction] = {}


def check_same_step_as_chief(strategy: tf.distribute.Strategy, step: int,
                             checkpoints: Path) -> None:
    """Refuses to train when the workers restored different steps: each reads `checkpoints`,
    which must be the chief's directory on a filesystem that every worker shares.

    Raises:
        InputError: on every worker, naming this worker's step and the chief's.
    """
    chief_step = round(chief_value(strategy, float(step)))
    (differs,) = any_worker(strategy, [step != chief_step])
    if differs:
        whose = ("another worker restored another step than the chief's "
                 f"{chief_step:,}" if is_chief(strategy) else
                 f"{task_id(strategy)} restored step {step:,}, the chief step {chief_step:,}")
        raise InputError(f"{checkpoints}: {whose}; every worker must read the chief's "
                         f"checkpoints: put the run directory on a filesystem all workers share")


def exit_worker(status: int) -> None:
    """Ends a multi-worker process at once once its outputs are saved: its collective
    runtime can otherwise hang at interpreter exit for up to a minute."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
