"""Broken files and unusable directories in a run: one line naming the file (or the config key)
and exit status 2 from every stage, never a traceback, and nothing lost or left half-written.

One tiny run trained once (checkpoints 10 and 20) is copied for each destructive case.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import tensorflow as tf

from pipelines.checkpoints.files import (checkpoint_problem, checkpoint_step,
                                                 training_checkpoints)
from pipelines.cli import main
from cli_helpers import cli_output, run_read_only
from tiny_run import copy_run

DEV = ("--split", "dev")  # the tiny run has a dev split, no test split


@pytest.fixture
def trained(trained_tiny_run: Path) -> Path:
    """The directory of a tiny run trained 20 steps (checkpoints 10 and 20) and its config:
    conftest's, shared with other files, so the tests here change copies only."""
    return trained_tiny_run


def cli_error(capture: pytest.CaptureFixture, *argv: str | Path) -> str:
    """Runs the CLI in-process, expecting exit status 2 and no traceback; returns the message
    of its `keras-transformer CMD: error: MESSAGE` line."""
    assert main([str(arg) for arg in argv]) == 2
    err = capture.readouterr().err
    assert "Traceback" not in err
    prefix = f"keras-transformer {argv[0]}: error: "
    last = err.strip().splitlines()[-1]
    assert last.startswith(prefix), err[-2000:]
    return last[len(prefix):]


def test_an_incomplete_checkpoint_is_named_and_resuming_skips_it(trained, tmp_path, capfd,
                                                               caplog):
    config, paths = copy_run(trained, tmp_path)
    data = paths.checkpoints / "ckpt-20.data-00000-of-00001"
    intact = (paths.checkpoints / "ckpt-10.data-00000-of-00001").read_bytes()
    os.truncate(data, data.stat().st_size // 3)
    for command in (["average"], ["evaluate", *DEV], ["export"]):
        assert cli_error(capfd, command[0], config, *command[1:]).startswith(
            f"{data}: truncated")

    # Training resumes from the newest complete checkpoint and saves a whole ckpt-20 again,
    # naming both in its output; nothing on stderr (no TensorFlow log line).
    assert main(["train", str(config)]) == 0
    out, err = cli_output(capfd, caplog)
    assert out[1].startswith(f"skipped the incomplete checkpoint ckpt-20: {data}: truncated")
    assert out[2].startswith(f"resumed from {paths.checkpoints / 'ckpt-10'} at step 10 (")
    assert err == []
    assert [checkpoint_step(p) for p in training_checkpoints(paths)] == [10, 20]
    assert checkpoint_problem(paths.checkpoints / "ckpt-20") is None
    assert (paths.checkpoints / "ckpt-10.data-00000-of-00001").read_bytes() == intact

    index = paths.checkpoints / "ckpt-20.index"
    os.truncate(index, 100)
    assert cli_error(capfd, "evaluate", config, *DEV, "--checkpoint",
                     paths.checkpoints / "ckpt-20").startswith(f"{index}: unreadable")
    paths.checkpoint_index.write_text("garbage {{{\n")  # train rewrites it (tests/test_train.py)
    assert cli_error(capfd, "average", config) == (
        f"{paths.checkpoint_index}: unreadable (line 1: Message type "
        f'"tensorflow.CheckpointState" has no field named "garbage".); `keras-transformer '
        f"train` rewrites it from the checkpoints beside it")


def test_an_edited_model_section_names_the_field_not_a_shape(trained, tmp_path, capsys):
    config, paths = copy_run(trained, tmp_path, d_model=128)
    for command in (["train"], ["average"], ["evaluate", *DEV], ["export"]):
        message = cli_error(capsys, command[0], config, *command[1:])
        assert re.fullmatch(rf"{paths.checkpoints}/ckpt-\d+ was trained with d_model 64; the "
                            r"config says d_model 128: set the `model` section back, or train "
                            r"afresh in another run_dir", message), message
    paths.checkpoint_model.unlink()  # a run of an older version: the shapes tell
    assert re.search(r"ckpt-20 holds another model than the `model` section describes "
                     r"\(variable 0 is \[\d+, 64\] there, \[\d+, 128\] in the config's model\)",
                     cli_error(capsys, "evaluate", config, *DEV))


def test_a_corrupt_vocabulary_is_named_by_every_stage(trained, tmp_path, capsys):
    config, paths = copy_run(trained, tmp_path)
    paths.spm_model.write_bytes(paths.spm_model.read_bytes()[:1000])
    for command in (["train"], ["average"], ["evaluate", *DEV], ["export"]):
        assert cli_error(capsys, command[0], config, *command[1:]).startswith(
            f"{paths.spm_model}: not a SentencePiece model (truncated or corrupt)")


def test_a_file_where_a_run_directory_belongs_is_named(trained, tmp_path, capsys):
    config, paths = copy_run(trained, tmp_path)
    shutil.rmtree(paths.logs)
    for directory in (paths.logs, paths.root / "eval", paths.export):
        directory.write_text("not a directory\n")
    for command, directory in ((["train"], paths.logs), (["evaluate", *DEV], paths.root / "eval"),
                               (["export"], paths.export)):
        assert cli_error(capsys, command[0], config, *command[1:]) == \
            f"{directory}: a file, not a directory"

    # run_dir itself, or a parent, a file: a config error before TensorFlow's start-up
    blocking = tmp_path / "a_file"
    blocking.write_text("not a run\n")
    text = config.read_text()
    for run_dir in (blocking, blocking / "run"):
        config.write_text(re.sub(r"run_dir: .*", f"run_dir: {run_dir}", text))
        line = next(number for number, content in enumerate(config.read_text().splitlines(), 1)
                    if content.startswith("run_dir:"))
        where = "" if run_dir == blocking else f"{blocking} is "
        for command in ("prepare", "train", "average", "evaluate", "export", "run"):
            assert cli_error(capsys, command, config) == \
                f"{config}:{line}: run_dir: {run_dir}: {where}a file, not a directory"


def test_a_full_disk_while_checkpointing_is_one_line_and_leaves_no_part(trained, tmp_path,
                                                                        capsys, monkeypatch):
    config, paths = copy_run(trained, tmp_path)
    config.write_text(config.read_text().replace("steps: 20", "steps: 21"))  # one more, saved

    def full_disk(checkpoint, file_prefix, options=None):  # a save cut short, as TF leaves it
        temporary = Path(f"{file_prefix}_temp")
        temporary.mkdir()
        (temporary / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"\0" * 1000)
        Path(f"{file_prefix}.data-00000-of-00001").write_bytes(b"\0" * 1000)
        shutil.copy(paths.checkpoints / "ckpt-20.index", f"{file_prefix}.index")
        raise tf.errors.ResourceExhaustedError(
            None, None, f"{temporary}/part-00000-of-00001.data-00000-of-00001.tempstate1; "
            f"{os.strerror(errno.ENOSPC)} [Op:SaveV2]")

    monkeypatch.setattr(tf.train.Checkpoint, "_write", full_disk)
    assert cli_error(capsys, "train", config) == \
        f"{paths.checkpoints}: no space left on device"
    assert sorted(p.name for p in paths.checkpoints.iterdir()) == [
        "checkpoint", "ckpt-10.data-00000-of-00001", "ckpt-10.index",
        "ckpt-20.data-00000-of-00001", "ckpt-20.index", "model.json", "vocabulary.sha256"]
    assert [checkpoint_step(p) for p in training_checkpoints(paths)] == [10, 20]


def test_a_read_only_run_fails_in_one_line_before_any_work(trained, tmp_path):
    """A real read-only directory (`run_read_only`), one child process: each command's error
    line, and nothing else on stderr."""
    config, paths = copy_run(trained, tmp_path)
    code = ("import sys; from pipelines.cli import main; config = sys.argv[1]; "
            "print([main([command, config, *extra]) for command, *extra in "
            "(['evaluate', '--split', 'dev'], ['export'], ['train'], ['average'])])")
    result = run_read_only(paths.root, [sys.executable, "-c", code, str(config)])
    assert result.returncode == 0 and result.stdout.strip().splitlines()[-1] == "[2, 2, 2, 2]", \
        result.stderr[-3000:]
    reason = "read-only file system" if os.geteuid() == 0 else "permission denied"
    expected = (("evaluate", paths.root), ("export", paths.root), ("train", paths.checkpoints),
                ("average", paths.checkpoints))
    assert result.stderr.splitlines() == [
        f"keras-transformer {stage}: error: {directory}: {reason}"
        for stage, directory in expected]
