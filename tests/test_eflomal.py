"""eflomal, the aligner of `data.alignments: eflomal`: a binary any x86-64-v2 CPU runs, and a
clear error when the one installed was built for another CPU."""
from __future__ import annotations

import platform
import re
import signal
import subprocess
from pathlib import Path

import eflomal
import pytest

from pipelines import InputError
from pipelines.corpus.alignments import eflomal_alignments

BINARY = Path(eflomal.__file__).parent / "bin" / "eflomal"


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the x86-64 build flags")
def test_the_installed_binary_is_built_for_any_x86_64_v2_cpu():
    # gcc records its flags in the binary's debug info (eflomal builds with -g); -march=native
    # would be recorded as the builder's CPU (e.g. -march=znver3).
    assert b"-march=x86-64-v2 " in BINARY.read_bytes()


def fail_with(monkeypatch, returncode: int) -> None:
    """eflomal's binary exits with returncode (negative: killed by that signal)."""
    def run(*args, **kwargs):
        raise subprocess.CalledProcessError(returncode, [str(BINARY), "-m", "3"])

    monkeypatch.setattr(eflomal.Aligner, "align", run)


def test_a_binary_built_for_another_cpu_fails_with_what_to_do(monkeypatch):
    fail_with(monkeypatch, -signal.SIGILL)
    with pytest.raises(InputError, match=f"{re.escape(str(BINARY))}.*SIGILL.*make setup"):
        eflomal_alignments([["a"]], [["b"]])


def test_other_failures_of_the_binary_are_raised_as_they_are(monkeypatch):
    fail_with(monkeypatch, 1)
    with pytest.raises(subprocess.CalledProcessError):
        eflomal_alignments([["a"]], [["b"]])
