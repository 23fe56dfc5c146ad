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


def test_translate_prints_nbest_lists(saved_model_dir, export_translator, tmp_path,
                                      capsysbinary):
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(SENTENCES) + "\n")
    assert main(["translate", str(saved_model_dir), str(source), "--n-best", "3"]) == 0
    rows = [line.split(" ||| ") for line in capsysbinary.readouterr().out.decode().splitlines()]
    assert [int(index) for index, _, _ in rows] == [i for i in range(len(SENTENCES))
                                                    for _ in range(3)]
    assert [text for _, text, _ in rows[::3]] == export_translator.translate_lines(SENTENCES)
    scores = [[float(score) for _, _, score in rows[i:i + 3]] for i in range(0, len(rows), 3)]
    assert all(a >= b >= c for a, b, c in scores)


def test_nbest_lists_the_export_cannot_give_are_refused_before_any_work(exported, tmp_path,
                                                                        capsys):
    source = tmp_path / "lines.txt"
    source.write_text("bird\n")
    for args, error in [
            ([str(exported.saved_model), "--n-best", "5"],
             "--n-best 5: at most the beam size (4); raise --beam"),
            ([str(exported.onnx), "--n-best", "2"],
             f"--n-best: {exported.onnx} is not a SavedModel, whose translate_nbest "
             f"signature gives n-best lists; use --runtime tf"),
            ([str(exported.saved_model), "--n-best", "0"],
             "--beam, --batch-size, --n-best and --window must be positive")]:
        assert main(["translate", args[0], str(source), *args[1:]]) == 2
        assert capsys.readouterr().err == f"keras-transformer translate: error: {error}\n"


def test_translate_forces_the_prefixes_of_a_prefix_file(saved_model_dir, tmp_path,
                                                        capsysbinary):
    source, prefixes = tmp_path / "lines.txt", tmp_path / "prefixes.txt"
    source.write_text("\n".join(SENTENCES) + "\n")
    prefixes.write_text("".join(f"{'bird' if i % 2 else ''}\n" for i in range(len(SENTENCES))))
    assert main(["translate", str(saved_model_dir), str(source), "--beam", "4",
                 "--prefix-file", str(prefixes)]) == 0
    forced = capsysbinary.readouterr().out.decode().splitlines()
    assert main(["translate", str(saved_model_dir), str(source)]) == 0
    best = capsysbinary.readouterr().out.decode().splitlines()
    assert all(text.startswith("bird") for text in forced[1::2]) and forced[::2] == best[::2]


def test_prefixes_that_cannot_be_forced_are_refused_before_any_work(saved_model_dir,
                                                                   tmp_path, capsys):
    source, prefixes = tmp_path / "lines.txt", tmp_path / "prefixes.txt"
    source.write_text("bird\nfish\n")
    for text, error in [("bird\n", "1 prefixes for 2 lines"),
                        ("\n" + "fish " * 60 + "\n",
                         "line 2: the prefix has 180 pieces, more than the 54 tokens its "
                         "translation may have (source length + extra_length)")]:
        prefixes.write_text(text)
        assert main(["translate", str(saved_model_dir), str(source),
                     "--prefix-file", str(prefixes)]) == 2
        assert capsys.readouterr().err == \
            f"keras-transformer translate: error: --prefix-file {prefixes}: {error}\n"
