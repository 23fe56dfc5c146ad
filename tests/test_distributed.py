"""Training across replicas and workers, each run in subprocesses: N replicas and gradient
accumulation make the one-replica update; a float16 overflow on one replica (one worker) is
skipped by all; workers whose clocks differ agree on the budget and the checkpoints; a pair
stops together on a preemption signal to one worker, and a lost worker (stuck, or killed) ends
the other in bounded time naming it."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from pipelines.checkpoints.files import checkpoint_step, training_checkpoints
from pipelines.config import load_config
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


def _start_workers(config: Path, outs: list[Path], extra: dict[int, list[str]] | None = None,
                   workers: list[str] | None = None) -> list[subprocess.Popen]:
    """Two localhost workers of tests/worker_script.py (worker 0 the chief) training the run
    of `config` at `workers` (default: free ports); worker i saves its final variables to
    outs[i] and takes extra[i]'s options. Their stdout and stderr are apart: stderr is what a
    user sees of a stop."""
    workers = workers or [f"127.0.0.1:{_free_port()}" for _ in range(2)]
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        processes.append(subprocess.Popen(
            [sys.executable, str(TESTS / "worker_script.py"), str(config), str(outs[index]),
             *(extra or {}).get(index, [])],
            env=_user_env(TF_CONFIG=json.dumps(tf_config), CUDA_VISIBLE_DEVICES=""),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return processes


def _user_env(**extra: str) -> dict[str, str]:
    """A subprocess environment without TF_CPP_MIN_LOG_LEVEL: the CLI's own default, as users
    run it."""
    env = subprocess_env(**extra)
    del env["TF_CPP_MIN_LOG_LEVEL"]
    return env


def _finish(processes: list[subprocess.Popen], timeout: float = 240) -> list[tuple[str, str]]:
    """Each worker's (stdout, stderr) once all have ended (killed after `timeout` s)."""
    try:
        return [process.communicate(timeout=timeout) for process in processes]
    finally:
        for process in processes:
            process.kill()


def _assert_identical(outs: list[Path], config: Path) -> None:
    """Both workers saved every variable of the model of `config`, finite and equal."""
    from pipelines.models import build_model, run_tokenizer

    loaded = load_config(config)
    model = build_model(loaded, run_tokenizer(RunPaths(loaded.run_path)).vocab_size)
    first, second = (np.load(out) for out in outs)
    assert len(first.files) == len(second.files) == len(model.variables)
    for key in first.files:
        assert np.all(np.isfinite(first[key]))
        np.testing.assert_array_equal(first[key], second[key])


@pytest.mark.slow
def test_two_workers_agree_on_overflow_and_budget_and_finish_with_identical_weights(
        tmp_path: Path, float16_runs: None) -> None:
    """Worker 1's float16 gradients overflow at update 5 and its clock runs 20 s ahead (it
    reaches the budget's 5% calibration point first): both skip the same update, plan at the
    same step and save by minutes at the same steps; the chief's validation at step 10 lasts
    longer than train.worker_timeout_minutes (8 s more than its 6 s), which worker 1 waits
    out; neither hangs."""
    config = make_tiny_run(tmp_path, model={"dtype": "mixed_float16"},
                           train={"checkpoint_every_minutes": 10.0, "max_minutes": 5.0,
                                  "validate_every_steps": 10, "worker_timeout_minutes": 0.1})
    outs = [tmp_path / f"worker{index}.npz" for index in range(2)]
    processes = _start_workers(config, outs, {0: ["--slow-validation", "8"],
                                              1: ["--overflow-at", "5", "--clock-skew", "20"]})
    outputs = [out + err for out, err in _finish(processes)]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]
        assert "to step 20 (MultiWorkerMirroredStrategy, 2 replica(s))" in output
        assert "loss scale 16384; 1 update(s) skipped" in output
    assert "step 5: float16 gradients overflowed; update skipped" in outputs[0]  # the chief's
    _assert_identical(outs, config)
    paths = RunPaths(tmp_path / "run")
    assert [checkpoint_step(p) for p in training_checkpoints(paths)] == [10, 20]
    assert not list(paths.checkpoints.glob(".*"))  # the non-chief's temporary saves are gone


def _pause_worker_1(config: Path, outs: list[Path], workers: list[str]) -> list[subprocess.Popen]:
    """The pair with worker 1 stopping (alive, asleep) before update 13, after checkpoint 10;
    returns once it has stopped."""
    paused = Path(f"{outs[1]}.paused")
    paused.unlink(missing_ok=True)  # an earlier pause's
    processes = _start_workers(config, outs, {1: ["--pause-at", "13"]}, workers)
    deadline = time.monotonic() + 180
    while not paused.exists() and time.monotonic() < deadline and processes[0].poll() is None:
        time.sleep(0.1)
    assert paused.exists(), _finish(processes, timeout=1)
    return processes


def _set_worker_timeout(config: Path, minutes: float) -> None:
    """train.worker_timeout_minutes of the run's config file set to `minutes`."""
    text = yaml.safe_load(config.read_text())
    text["train"]["worker_timeout_minutes"] = minutes
    config.write_text(yaml.safe_dump(text))


STUCK_TIMEOUT_MINUTES = 0.1  # the stuck worker's phase: what the chief waits


@pytest.mark.slow
def test_a_pair_survives_a_preemption_a_stuck_worker_and_a_killed_one(tmp_path: Path) -> None:
    """1. SIGTERM reaches worker 1 as update 7 starts, and again while it saves: both end
    update 7, the chief saves checkpoint 7, each exits 75 with one line. 2. Restarted, the
    pair resumes at 7; worker 1 stops, alive, before update 13: its heartbeats go on, so
    worker 0 waits in the collective until train.worker_timeout_minutes (0.1: 6 s), then
    exits 69 naming it (its one other worker, no further wait). 3. Restarted with a timeout
    of a minute, the pair resumes from checkpoint 10; worker 1 is SIGKILLed before update 13:
    worker 0, waiting in that update's collective, exits 69 within the bound naming it (its
    heartbeats stopped). 4. Restarted, the pair resumes from checkpoint 10 and ends with
    identical weights. (One run for the four: each start of the pair costs two processes'
    start-up and first trace.)"""
    config = make_tiny_run(tmp_path, train={"worker_timeout_minutes": 1.0})
    outs = [tmp_path / f"worker{index}.npz" for index in range(2)]
    processes = _start_workers(config, outs, {1: ["--signal-at", "7", "--signal-in-save"]})
    outputs = _finish(processes)
    checkpoints = tmp_path / "run" / "checkpoints"
    resume = f"restart every worker with the same command to resume from {checkpoints}/ckpt-7"
    assert [(process.returncode, err) for process, (_, err) in zip(processes, outputs)] == [
        (75, f"keras-transformer train: preempted (a signal to worker-1) at step 7: {resume}\n"),
        (75, f"keras-transformer train: preempted (SIGTERM to this worker) at step 7: "
             f"{resume}\n")]
    paths = RunPaths(tmp_path / "run")
    assert [checkpoint_step(path) for path in training_checkpoints(paths)] == [7]
    assert not any(out.exists() for out in outs)

    _set_worker_timeout(config, STUCK_TIMEOUT_MINUTES)
    workers = [f"127.0.0.1:{_free_port()}" for _ in range(2)]
    chief, worker = _pause_worker_1(config, outs, workers)
    stopped = time.monotonic()
    try:
        out, err = chief.communicate(timeout=90)
    finally:
        worker.kill()
        _finish([chief, worker])
    assert 60 * STUCK_TIMEOUT_MINUTES - 2 < time.monotonic() - stopped < 60
    assert f"resumed from {checkpoints}/ckpt-7 at step 7" in out  # the chief's progress
    assert (chief.returncode, err) == (69, (
        f"keras-transformer train: worker-1 ({workers[1]}) did not answer within "
        f"train.worker_timeout_minutes (0.1) after step 12: restart every worker to resume "
        f"from {checkpoints}/ckpt-10\n"))

    _set_worker_timeout(config, 1.0)
    workers = [f"127.0.0.1:{_free_port()}" for _ in range(2)]
    chief, worker = _pause_worker_1(config, outs, workers)
    worker.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    (out, err), _ = _finish([chief, worker], timeout=90)
    assert time.monotonic() - killed < 60
    assert f"resumed from {checkpoints}/ckpt-10 at step 10" in out
    assert (chief.returncode, err) == (69, (
        f"keras-transformer train: worker-1 ({workers[1]}) stopped (no heartbeat) after step "
        f"12: restart every worker to resume from {checkpoints}/ckpt-10\n"))

    outputs = _finish(_start_workers(config, outs))
    for out, err in outputs:
        assert "to step 20 (resumed at step 10, MultiWorkerMirroredStrategy" in out, out + err
    _assert_identical(outs, config)
