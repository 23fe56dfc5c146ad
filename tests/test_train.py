"""The train stage in one process (and the CLI's): runs resume after SIGKILL and SIGTERM, one
trace, XLA, NaN stop, bad checkpoints and configs. Budgets: tests/test_budget.py; replicas and workers:
tests/test_distributed.py."""
from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
import typing
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import yaml

from keras_transformer.config import PRESETS
from pipelines import InputError
from pipelines.cli import main
from pipelines.checkpoints.files import checkpoint_step, training_checkpoints
from pipelines.training.buckets import bucket_boundaries
from pipelines.config import ConfigError, load_config
from pipelines.paths import RunPaths
from pipelines.config import ModelSection
from pipelines.training.train import TrainingDiverged, TrainingRun
from cli_helpers import CLI, cli_output
from tiny_run import copy_run, dataset_fn, make_tiny_run, subprocess_env, synthetic_halves

@pytest.mark.slow
def test_sigterm_saves_the_update_in_flight_and_a_killed_rerun_resumes_from_its_last_checkpoint(
        tmp_path: Path, capsys) -> None:
    """SIGTERM as update 7 starts, and again during the save: the process ends update 7, saves
    checkpoint 7 whole, prints one line and exits 75. The rerun resumes at step 7 and is
    SIGKILLed at a checkpoint of step 10 or later; the rerun after the kill (in this process)
    resumes from its last checkpoint and ends, validated. (One run for both: each start costs
    a process's start-up or a first trace.)"""
    # 40 steps: the kill comes at checkpoint 10 or later, and the 30 steps, 6 checkpoints (every
    # 5 steps from the rerun on: the first run's save signals) and the final validation after
    # it leave the child seconds of margin on a loaded CPU.
    config = make_tiny_run(tmp_path, train={
        "steps": 40, "checkpoint_every_steps": 10, "validate_every_steps": 40,
        "bleu_every_steps": 40, "bleu_max_sentences": 16, "log_every_steps": 20})
    run_dir = tmp_path / "run"
    env = subprocess_env()
    del env["TF_CPP_MIN_LOG_LEVEL"]  # the CLI's default, as users run it
    result = subprocess.run(
        [sys.executable, str(Path(__file__).parent / "worker_script.py"), str(config),
         str(tmp_path / "final.npz"), "--signal-at", "7", "--signal-in-save"],
        env=env, capture_output=True, text=True, timeout=240)
    checkpoint = run_dir / "checkpoints" / "ckpt-7"
    assert (result.returncode, result.stderr) == (75, (
        f"keras-transformer train: preempted (SIGTERM) at step 7: run the same command to "
        f"resume from {checkpoint}\n"))
    assert [checkpoint_step(path) for path in training_checkpoints(RunPaths(run_dir))
            ] == [7]

    config.write_text(config.read_text().replace("checkpoint_every_steps: 10",
                                                 "checkpoint_every_steps: 5"))
    command = [sys.executable, "-c", CLI, "train", str(config)]
    with open(tmp_path / "rerun.out", "w") as out:  # unbuffered: the kill leaves what it wrote
        process = subprocess.Popen(command, env=subprocess_env(PYTHONUNBUFFERED="1"),
                                   stdout=out, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and process.poll() is None:
                kept = training_checkpoints(RunPaths(run_dir))
                if kept and checkpoint_step(kept[-1]) >= 10:
                    break
                time.sleep(0.05)
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
        finally:
            process.kill()
    assert process.returncode == -signal.SIGKILL, "train ended before it was killed"
    assert f"resumed from {checkpoint} at step 7" in (tmp_path / "rerun.out").read_text()
    kept = training_checkpoints(RunPaths(run_dir))
    killed_at = checkpoint_step(kept[-1])
    assert 10 <= killed_at < 40, "train saved no checkpoint after step 7 within 120 s"

    # The rerun in this process (the same CLI entry point; no second TensorFlow start-up).
    capsys.readouterr()
    assert main(["train", str(config)]) == 0
    out = capsys.readouterr().out
    assert f"ckpt-{killed_at} at step {killed_at}" in out  # resumed, not from 0
    assert f"trained {run_dir} to step 40 (resumed at step {killed_at}" in out
    assert "dev BLEU" in out
    assert checkpoint_step(training_checkpoints(RunPaths(run_dir))[-1]) == 40
    summary = json.loads(RunPaths(run_dir).train_summary.read_text())  # `train` alone writes it
    assert (summary["start_step"], summary["step"]) == (killed_at, 40)
    tags = {value.tag for path in (run_dir / "logs").glob("events.out.tfevents.*")
            for event in tf.compat.v1.train.summary_iterator(str(path))
            for value in event.summary.value}
    assert {"train/loss", "train/learning_rate", "train/tokens_per_second", "dev/loss",
            "dev/perplexity", "dev/bleu"} <= tags


@pytest.mark.slow
def test_one_trace_over_batches_of_20_shapes_in_mixed_bfloat16(tmp_path: Path,
                                                             bfloat16_runs: None) -> None:
    config = load_config(make_tiny_run(tmp_path, model={"dtype": "mixed_bfloat16"}, train={
        "steps": 12, "accumulate_steps": 2, "warmup_steps": 4, "validate_every_steps": 12,
        "bleu_every_steps": 12, "bleu_max_sentences": 8}))
    batches = synthetic_halves(12, vocab_size=100)
    assert len({(b["source_ids"].shape, b["target_ids"].shape) for b in batches}) >= 20
    run = TrainingRun(config, dataset_fn=dataset_fn(batches))
    summary = run.run()
    assert run.trainer.train_step.experimental_get_tracing_count() == 1
    assert run.trainer.model.compute_dtype == "bfloat16"
    assert summary.dtype == "mixed_bfloat16" and "dtype     mixed_bfloat16: as configured" in \
        summary.format()
    assert summary.step == 12 and np.isfinite(summary.loss)
    assert summary.dev_loss is not None and np.isfinite(summary.dev_loss)
    assert summary.dev_bleu is not None and 0 <= summary.dev_bleu <= 100


@pytest.mark.slow
def test_a_tiny_xla_run_compiles_once_per_bucket_and_says_so(tmp_path: Path, capsys) -> None:
    config = load_config(make_tiny_run(tmp_path, train={"steps": 4, "jit_compile": True,
                                                        "checkpoint_every_steps": 4}))
    run = TrainingRun(config)
    summary = run.run()
    shapes = run.trainer.compiled_shapes
    assert summary.step == 4 and np.isfinite(summary.loss)
    assert run.trainer.train_step.experimental_get_tracing_count() == 1
    assert 1 <= len(shapes) <= len(bucket_boundaries(40))
    assert all(source[1] == target[1] for source, target in shapes)  # one bucket a batch
    logged = [line for line in capsys.readouterr().out.splitlines()
              if line.startswith("XLA: compiling the update for batches of")]
    assert len(logged) == len(shapes)
    assert logged[-1].endswith(f"(shape {len(shapes)} of at most {len(bucket_boundaries(40))})")


@pytest.fixture(scope="module")
def six_steps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, typing.Any]:
    """A tiny run trained 6 steps (checkpoints 3 and 6) that tests resume copies of:
    {"directory": of make_tiny_run, and what training held at its end: "optimizer" and
    "weights" (arrays), "learning_rate"}."""
    directory = tmp_path_factory.mktemp("six_steps")
    first = TrainingRun(load_config(make_tiny_run(directory, train={
        "steps": 6, "checkpoint_every_steps": 3})))
    first.run()
    return {"directory": directory, "learning_rate": first.trainer.learning_rate(),
            "optimizer": [v.numpy() for v in first.trainer.optimizer.variables],
            "weights": [v.numpy() for v in first.trainer.model.variables]}


@pytest.mark.slow
def test_resume_restores_step_optimizer_and_schedule_and_nan_stops(
        six_steps: dict[str, typing.Any], tmp_path: Path) -> None:
    config = load_config(copy_run(six_steps["directory"], tmp_path)[0])
    second = TrainingRun(dataclasses.replace(
        config, train=dataclasses.replace(config.train, steps=12)))
    assert second.start_step == 6 and second.trainer.step == 6
    assert second.trainer.learning_rate() == six_steps["learning_rate"]
    for saved, restored in zip(six_steps["optimizer"], second.trainer.optimizer.variables):
        np.testing.assert_array_equal(saved, restored.numpy())
    for saved, restored in zip(six_steps["weights"], second.trainer.model.variables):
        np.testing.assert_array_equal(saved, restored.numpy())

    embeddings = second.trainer.model.trainable_variables[0]
    embeddings.assign(np.full(embeddings.shape, np.nan, np.float32))
    with pytest.raises(TrainingDiverged, match=r"at step 7 .*ckpt-6"):
        second.run()
    assert [checkpoint_step(p) for p in training_checkpoints(RunPaths(config.run_path))] == [3, 6]


def train_to(config: Path, steps: int) -> int:
    """`keras-transformer train CONFIG` in this process with train.steps set to `steps` in
    the config file; returns the exit status."""
    text = yaml.safe_load(config.read_text())
    text["train"]["steps"] = steps
    config.write_text(yaml.safe_dump(text))
    return main(["train", str(config)])


@pytest.mark.slow
def test_a_broken_checkpoint_index_resumes_from_the_newest_complete_checkpoint(
        six_steps: dict[str, typing.Any], tmp_path: Path, capfd, caplog) -> None:
    """Never train again from step 0 over good checkpoints: an unreadable index, a listed
    checkpoint whose files are gone, or nothing complete (a clear error). The CLI says what it
    found and where it resumed, and nothing on stderr (no TensorFlow log line)."""
    config, paths = copy_run(six_steps["directory"], tmp_path)

    def listed() -> list[int]:
        return [checkpoint_step(p) for p in training_checkpoints(paths)]

    paths.checkpoint_index.write_text("garbage {{{\n")
    assert train_to(config, 9) == 0
    out, err = cli_output(capfd, caplog)
    assert out[1] == (f"rewrote the unreadable checkpoint index {paths.checkpoint_index} "
                      f'(line 1: Message type "tensorflow.CheckpointState" has no field named '
                      f'"garbage".)')
    assert out[2].startswith(f"resumed from {paths.checkpoints / 'ckpt-6'} at step 6 (")
    assert (err, listed()) == ([], [3, 6, 9])

    (paths.checkpoints / "ckpt-9.index").unlink()  # the newest listed one is incomplete
    assert train_to(config, 12) == 0
    out, err = cli_output(capfd, caplog)
    assert out[1] == (f"skipped the incomplete checkpoint ckpt-9: "
                      f"{paths.checkpoints / 'ckpt-9.index'}: no such file")
    assert out[2].startswith(f"resumed from {paths.checkpoints / 'ckpt-6'} at step 6 (")
    assert (err, listed()) == ([], [3, 6, 9, 12])

    for index in paths.checkpoints.glob("ckpt-*.index"):
        index.unlink()
    assert main(["train", str(config)]) == 2
    assert cli_output(capfd, caplog) == ([], [
        f"keras-transformer train: error: {paths.checkpoints}: no checkpoint there is complete "
        f"({paths.checkpoints / 'ckpt-12.index'}: no such file); move the directory away to "
        f"train from step 0"])
    assert list(paths.checkpoints.glob("ckpt-*.data-*"))  # nothing was deleted


@pytest.mark.slow
def test_steps_below_the_latest_checkpoint_train_nothing_and_say_so(
        six_steps: dict[str, typing.Any], tmp_path: Path, capfd, caplog) -> None:
    """Not an error (status 0): one line, and nothing trained or written."""
    config, paths = copy_run(six_steps["directory"], tmp_path)
    files = sorted((path, path.stat().st_mtime_ns) for path in paths.root.rglob("*"))
    assert train_to(config, 4) == 0
    assert cli_output(capfd, caplog) == ([], [
        "keras-transformer train: the run is already at step 6, beyond train.steps 4: nothing "
        "to train (raise train.steps to train further)"])
    assert sorted((path, path.stat().st_mtime_ns) for path in paths.root.rglob("*")) == files


@pytest.mark.slow
def test_checkpoints_of_another_vocabulary_are_refused(six_steps: dict[str, typing.Any],
                                                       tmp_path: Path) -> None:
    from keras_transformer.tokenizer import train_sentencepiece
    from pipelines.models import load_model_for_inference

    config_path, paths = copy_run(six_steps["directory"], tmp_path)
    config = load_config(config_path)
    [(train_src, train_tgt)] = paths.train_shards()
    paths.spm_model.write_bytes(train_sentencepiece([train_src, train_tgt], vocab_size=380))
    for stage in (lambda: TrainingRun(config), lambda: load_model_for_inference(config)):
        with pytest.raises(InputError, match="trained with another vocabulary than"):
            stage()


def test_model_and_train_sections_are_validated(tmp_path: Path) -> None:
    assert set(typing.get_args(typing.get_type_hints(ModelSection)["preset"])) == {
        *PRESETS, "auto"}
    demo = load_config("demo")
    assert demo.model.preset == "auto" and demo.model.dtype == "auto"
    config = make_tiny_run(tmp_path)
    text = config.read_text()
    for line, bad_line in (("  steps: 20", "  steps: 0"), ("  dropout: 0.0", "  dropout: 1.5"),
                           ("  average_last: 3", "  average_last: 9"),
                           ("  preset: tiny", "  preset: huge")):
        config.write_text(text.replace(line, bad_line))
        key = bad_line.split(":")[0].strip()
        with pytest.raises(ConfigError, match=rf"config.yaml:\d+: (model|train)\.{key}:"):
            load_config(config)
    config.write_text(text.replace("preset: tiny", "preset: tiny\n  d_model: 30"))
    with pytest.raises(ConfigError, match=r"config.yaml:\d+: model.d_model: .*divisible"):
        load_config(config)


@pytest.mark.slow
def test_no_train_pair_within_max_length_stops_before_training(tmp_path: Path, capsys) -> None:
    config = make_tiny_run(tmp_path)  # pairs of 2 to 12 words: 4 tokens or more with BOS, EOS
    config.write_text(config.read_text().replace("max_length: 40", "max_length: 3"))
    assert main(["train", str(config)]) == 2
    assert capsys.readouterr().err == (
        f"keras-transformer train: error: {tmp_path / 'run' / 'data' / 'train.json'}: no train "
        f"pair fits data.max_length (3 tokens a side, BOS and EOS included)\n")
    assert not (tmp_path / "run" / "checkpoints").exists()

