"""Training across replicas and workers, each run in subprocesses: N replicas and gradient
accumulation make the one-replica update; a float16 overflow on one replica (one worker) is
skipped by all; workers whose clocks differ agree on the budget and the checkpoints."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipelines.checkpoints.files import checkpoint_step, training_checkpoints
from pipelines.paths import RunPaths
from tiny_run import make_tiny_run, subprocess_env

TESTS = Path(__file__).parent


@pytest.mark.slow
def test_replicas_and_accumulation_make_the_one_replica_update(tmp_path: Path) -> None:
    # The paper's warm-up keeps the learning rate realistic: Adam amplifies rounding noise
    # in weights with tiny gradients in proportion to it.
    config = make_tiny_run(tmp_path, train={"warmup_steps": 4000, "learning_rate_scale": 50.0})
    result = subprocess.run([sys.executable, str(TESTS / "replicas_script.py"), str(config),
                             "20"], env=subprocess_env(), capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["replicas"] == {"merged": 1, "replicas": 2, "accumulated": 1}
    assert report["traces"] == {"merged": 1, "replicas": 1, "accumulated": 1}
    assert report["initial_diff"] == {"merged": 0.0, "replicas": 0.0, "accumulated": 0.0}
    assert report["trained_change"] > 1e-3  # the weights moved far more than the tolerance
    assert report["max_diff"]["replicas"] < 1e-5
    assert report["max_diff"]["accumulated"] < 1e-5
    # Key biases (zero true gradient) only drift by noise-driven steps of at most ~lr each.
    assert max(report["key_bias_diff"].values()) <= 2 * report["learning_rate_sum"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_an_overflow_on_one_replica_skips_the_update_on_both(tmp_path: Path) -> None:
    """mixed_float16 on 2 replicas, replica 1's gradients infinite at update 2: both skip it
    (weights unchanged, loss scale halved), then the next try applies on both."""
    config = make_tiny_run(tmp_path)
    result = subprocess.run([sys.executable, str(TESTS / "loss_scale_script.py"), str(config)],
                            env=subprocess_env(), capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["replicas"] == 2
    scale = report["initial_scale"]
    first, overflowed, after = report["calls"]
    assert (first["finite"], first["iterations"], first["loss_scale"]) == (True, 1, scale)
    assert (overflowed["finite"], overflowed["iterations"], overflowed["loss_scale"],
            overflowed["moved"]) == (False, 1, scale / 2, 0.0)
    assert (after["finite"], after["iterations"], after["loss_scale"]) == (True, 2, scale / 2)
    assert first["moved"] > 1e-4 and after["moved"] > 1e-4
    assert all(call["all_finite"] and call["replicas_equal"] for call in report["calls"])


@pytest.mark.slow
def test_two_workers_agree_on_overflow_and_budget_and_finish_with_identical_weights(
        tmp_path: Path) -> None:
    """Worker 1's float16 gradients overflow at update 5 and its clock runs 20 s ahead (it
    reaches the budget's 5% calibration point first): both skip the same update, plan at the
    same step and save by minutes at the same steps; neither hangs."""
    config = make_tiny_run(tmp_path, model={"dtype": "mixed_float16"},
                           train={"checkpoint_every_minutes": 10.0, "max_minutes": 5.0})
    workers = [f"127.0.0.1:{_free_port()}" for _ in range(2)]
    processes = []
    try:
        for index in range(2):
            tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            extra = ["--overflow-at", "5", "--clock-skew", "20"] if index == 1 else []
            processes.append(subprocess.Popen(
                [sys.executable, str(TESTS / "worker_script.py"), str(config),
                 str(tmp_path / f"worker{index}.npz"), *extra],
                env=subprocess_env(TF_CONFIG=json.dumps(tf_config), CUDA_VISIBLE_DEVICES=""),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outputs = [process.communicate(timeout=240)[0] for process in processes]
    finally:
        for process in processes:
            process.kill()
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]
        assert "to step 20 (MultiWorkerMirroredStrategy, 2 replica(s))" in output
        assert "loss scale 16384; 1 update(s) skipped" in output
    assert "step 5: float16 gradients overflowed; update skipped" in outputs[0]  # the chief's
    first, second = (np.load(tmp_path / f"worker{i}.npz") for i in range(2))
    assert len(first.files) > 50
    for key in first.files:
        assert np.all(np.isfinite(first[key]))
        np.testing.assert_array_equal(first[key], second[key])
    paths = RunPaths(tmp_path / "run")
    assert [checkpoint_step(p) for p in training_checkpoints(paths)] == [10, 20]
    assert not list(paths.checkpoints.glob(".*"))  # the non-chief's temporary saves are gone
