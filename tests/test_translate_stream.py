"""pipelines/translate_stream.py and `translate` on large inputs: windows, order, resuming an
interrupted --output, progress."""
import io
from pathlib import Path

from export_helpers import SENTENCES
from pipelines.cli import main
from pipelines.translate_stream import InputLines, LineNotes, resumed_output, translate_windows


def test_windows_bound_what_is_held_and_keep_the_input_order() -> None:
    seen: list[tuple[int, int]] = []

    def translate(lines: list[str], first: int) -> list[str]:
        seen.append((first, len(lines)))
        return [f"{first + i}:{line.upper()}\n" for i, line in enumerate(lines)]

    out, counts = io.BytesIO(), []
    lines = (f"line {i}" for i in range(10))  # a generator: never held whole
    assert translate_windows(lines, translate, out, window=4, done=counts.append) == 10
    assert seen == [(0, 4), (4, 4), (8, 2)] and counts == [4, 8, 10]
    assert out.getvalue().decode().splitlines() == [f"{i}:LINE {i}" for i in range(10)]


def test_an_interrupted_output_goes_on_after_its_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    path.write_bytes(b"a\nb\nc\nhal")  # killed while writing line 4
    with resumed_output(path, rows_per_line=1) as (done, out):
        assert done == 3
        out.write(b"d\n")
    assert path.read_bytes() == b"a\nb\nc\nd\n"
    path.write_bytes(b"0 ||| x\n0 ||| y\n1 ||| z\n")  # n-best of 2: line 1's group cut
    with resumed_output(path, rows_per_line=2) as (done, out):
        assert done == 1
    assert path.read_bytes() == b"0 ||| x\n0 ||| y\n"


def test_input_lines_count_the_share_of_a_file_read(tmp_path: Path) -> None:
    data = b"one\r\ntwo \xff\nthree\n"
    lines = InputLines(io.BytesIO(data), len(data))
    assert next(iter(lines)) == "one" and lines.fraction == 5 / len(data)
    assert list(lines) == ["two \ufffd", "three"] and lines.fraction == 1.0


def test_translate_to_an_output_file_resumes_and_reports_progress(onnx_dir, tmp_path, capsys):
    source = tmp_path / "lines.txt"
    lines = SENTENCES * 2
    source.write_text("\n".join(lines) + "\n")
    whole = tmp_path / "whole.txt"
    args = ["translate", str(onnx_dir), str(source), "--runtime", "onnx"]
    assert main(args + ["--output", str(whole)]) == 0
    expected = whole.read_text().splitlines()
    assert len(expected) == len(lines)
    capsys.readouterr()
    resumed = tmp_path / "resumed.txt"
    resumed.write_text("\n".join(expected[:3]) + "\n" + expected[3][:2])  # a kill mid-line
    assert main(args + ["--output", str(resumed), "--window", "2", "--progress"]) == 0
    assert resumed.read_text().splitlines() == expected
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"keras-transformer translate: {resumed} holds 3 translated lines; going "
                      f"on from line 4")
    assert err[-1].startswith(f"translated | {len(lines)} lines |")


def test_line_notes_name_the_first_lines_and_count_the_rest():
    notes = LineNotes("of invalid UTF-8")
    assert notes.summary("in.txt") is None
    for number in (3, 9, 10, 11, 12, 40, 41):
        notes.add(number)
    assert notes.summary("in.txt") == "7 lines of invalid UTF-8: in.txt:3, :9, :10, :11, :12, ..."


def test_translate_names_lines_cut_or_of_invalid_utf8_and_translates_them(saved_model_dir,
                                                                         tmp_path, capsys):
    path = tmp_path / "in.txt"
    path.write_bytes(b"bird\n" + b"fish " * 60 + b"\n\ncaf\xe9 fish\n")
    assert main(["translate", str(saved_model_dir), str(path)]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 4 and captured.out.splitlines()[2] == ""
    assert captured.err.splitlines()[-2:] == [
        f"keras-transformer translate: 1 line of invalid UTF-8, each bad byte read as U+FFFD: "
        f"{path}:4",
        f"keras-transformer translate: 1 line over the export's source limit (only the first "
        f"39 pieces translated): {path}:2"]
