"""pipelines/training/strategy.py: the decisions that every worker must take alike."""
from __future__ import annotations

from pathlib import Path

import pytest
import tensorflow as tf

from pipelines import InputError
from pipelines.training import strategy as strategies


def test_one_machine_decides_alone() -> None:
    local = tf.distribute.get_strategy()
    assert strategies.any_worker(local, [False, True, False]) == (False, True, False)
    assert strategies.mean_over_workers(local, 2.5) == 2.5
    assert strategies.chief_value(local, 7.0) == 7.0
    strategies.check_same_step_as_chief(local, 40, Path("run/checkpoints"))  # agrees: no error


def test_a_worker_that_restored_another_step_than_the_chief_stops_every_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What each worker says when the chief restored step 40 and worker 1 step 0 (its own
    empty checkpoints/, no shared filesystem). The two-worker test in test_train.py runs the
    check for real, where the steps agree."""
    local = tf.distribute.get_strategy()
    monkeypatch.setattr(strategies, "chief_value", lambda strategy, value: 40.0)
    with pytest.raises(InputError, match=r"^run/checkpoints: another worker restored another "
                       r"step than the chief's 40; every worker must read the chief's "
                       r"checkpoints: put the run directory on a filesystem all workers share"):
        strategies.check_same_step_as_chief(local, 0, Path("run/checkpoints"))
    monkeypatch.setattr(strategies, "is_chief", lambda strategy: False)
    monkeypatch.setattr(strategies, "task_id", lambda strategy: "worker-1")
    with pytest.raises(InputError, match=r"^run/checkpoints: worker-1 restored step 0, the "
                       r"chief step 40; every worker must read"):
        strategies.check_same_step_as_chief(local, 0, Path("run/checkpoints"))
