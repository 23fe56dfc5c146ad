"""`keras-transformer` as a shell user meets it: a reader that leaves early, Ctrl-C."""
import io
import subprocess
import sys
from pathlib import Path

from export_helpers import SENTENCES
from pipelines.cli import main

CLI = str(Path(sys.executable).with_name("keras-transformer"))


def test_translate_into_a_pipe_closed_early_stops_quietly(onnx_dir):
    child = subprocess.Popen([CLI, "translate", str(onnx_dir), "--runtime", "onnx"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    child.stdout.close()  # as `| head -0` does, before any output
    _, stderr = child.communicate(("\n".join(SENTENCES) + "\n").encode(), timeout=300)
    assert (child.returncode, stderr.decode()) == (141, "")


class _Interrupted(io.RawIOBase):
    """A terminal whose user presses Ctrl-C while the program reads it."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        raise KeyboardInterrupt


def test_ctrl_c_is_one_line_and_status_130(onnx_dir, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(_Interrupted())))
    assert main(["translate", str(onnx_dir), "--runtime", "onnx"]) == 130
    assert capsys.readouterr().err == "keras-transformer translate: interrupted\n"
