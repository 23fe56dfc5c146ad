"""Test helpers that see `keras-transformer` as its user does: the whole stderr of the CLI run in
the test's process (`cli_output`), and the CLI in a child process (`CLI`) whose environment
leaves TF_CPP_MIN_LOG_LEVEL unset as a user's may (`user_env`), on a read-only run directory
(`run_read_only`).

Shared by tests/test_train.py, tests/test_faults.py and tests/test_run.py.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest

# A child's `keras-transformer ARGS`: [sys.executable, "-c", CLI, *ARGS]
CLI = "import sys; from pipelines.cli import main; sys.exit(main(sys.argv[1:]))"
# Makes $0 read-only in the mount namespace of `unshare -m`, then runs the command after it.
READ_ONLY_MOUNT = ('mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" || exit 77; '
                   'exec "$@"')


def cli_output(capfd: pytest.CaptureFixture,
               caplog: pytest.LogCaptureFixture) -> tuple[list[str], list[str]]:
    """(stdout lines, stderr lines) of `pipelines.cli.main` run in this process since the last
    call. A user's stderr also shows the Python log records of WARNING and above (TensorFlow's
    handler prints `WARNING:tensorflow:...`), which pytest takes: they are added, as that
    handler prints them, after the lines written (their order is not kept)."""
    out, err = capfd.readouterr()
    logged = [f"{record.levelname}:{record.name}:{record.getMessage()}"
              for record in caplog.records if record.levelno >= logging.WARNING]
    caplog.clear()
    return out.splitlines(), err.splitlines() + logged


def user_env() -> dict[str, str]:
    """This process's environment without TF_CPP_MIN_LOG_LEVEL (the Makefile sets it, a user's
    shell may not)."""
    return {name: value for name, value in os.environ.items()
            if name != "TF_CPP_MIN_LOG_LEVEL"}


def run_read_only(directory: Path, command: list[str]) -> subprocess.CompletedProcess:
    """Runs `command` (its stdout and stderr captured as text, in `user_env`) with `directory`
    really read-only: chmod for a user; for root, whom chmod does not stop, a read-only bind
    mount in a mount namespace of its own. Skips the test where neither can be had."""
    if os.geteuid() == 0:
        if shutil.which("unshare") is None:
            pytest.skip("root without unshare: chmod cannot make a directory read-only for root")
        command = ["unshare", "-m", "sh", "-c", READ_ONLY_MOUNT, str(directory), *command]
    else:
        subprocess.run(["chmod", "-R", "a-w", str(directory)], check=True)
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=300,
                                env=user_env())
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(directory)], check=True)
    if result.returncode == 77:
        pytest.skip("root without the right to mount: chmod cannot make a directory read-only "
                    "for root")
    return result
