"""The progress lines (training, prepare's passes): refreshed on a terminal, periodic lines in a
file."""
import io
import time

from pipelines import progress
from pipelines.progress import PassProgress, Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_line_is_redrawn_while_an_update_runs(monkeypatch):
    monkeypatch.setattr(progress, "TICK_SECONDS", 0.05)
    stream = Terminal()
    line = Progress(100, stream=stream, budget_seconds=3600)
    line.begin(1)
    line.update(2, {"loss": "4.1000", "tok/s": "600"})
    drawn = stream.getvalue().count("\r")
    time.sleep(0.5)  # a long update: no new step, the clock keeps moving
    assert stream.getvalue().count("\r") >= drawn + 3
    line.close()
    text = stream.getvalue()
    assert "step 2/100 (2%) | loss 4.1000 | tok/s 600 | elapsed 0:00:0" in text
    assert text.endswith("\n")


def test_a_file_gets_logging_steps_and_a_line_at_least_every_log_seconds(monkeypatch):
    stream = io.StringIO()
    line = Progress(10, stream=stream)
    line.update(1, {"loss": "5.0"})
    line.update(2, {"loss": "4.0"}, log=True)
    assert stream.getvalue().splitlines()[0].startswith("step 2/10 (20%) | loss 4.0")
    monkeypatch.setattr(progress, "LOG_SECONDS", 0.0)
    line.update(3, {"loss": "3.0"})
    assert len(stream.getvalue().splitlines()) == 2


def test_eta_is_the_sooner_of_the_steps_and_the_budget():
    stream = io.StringIO()
    line = Progress(1000, stream=stream, elapsed=lambda: 100.0, budget_seconds=160.0)
    line._start = (time.monotonic() - 10.0, 1)  # 10 s for 10 steps: 990 s to go at that rate
    line.update(11, {}, log=True)
    assert stream.getvalue().rstrip().endswith("ETA 0:01:00 (budget)")
    unbounded = Progress(1000, stream=io.StringIO())
    unbounded._start = (time.monotonic() - 10.0, 1)
    unbounded.update(11, {}, log=True)
    shown = unbounded.stream.getvalue()
    assert "ETA 0:16:" in shown and "budget" not in shown


def test_a_prepare_pass_shows_pairs_rate_and_share_of_the_input(monkeypatch):
    stream = Terminal()
    line = PassProgress(stream)
    monkeypatch.setattr(PassProgress, "DRAW_SECONDS", 0.0)
    line.update("reading", 16_384, 0.25)
    time.sleep(0.01)
    line.update("reading", 32_768, 0.5)
    line.update("writing", 16_384, None)  # a new pass: its own rate; input size unknown
    line.message("learning the vocabulary")
    text = stream.getvalue()
    draws = text.split("\r")[1:]
    assert draws[0].startswith("reading | 16,384 pairs | 25% of the input | elapsed 0:00:00")
    assert draws[1].startswith("reading | 32,768 pairs | ") and " pairs/s | 50% of the input" in \
        draws[1]
    assert draws[2].startswith("writing | 16,384 pairs | elapsed")
    assert text.endswith("\x1b[K\nlearning the vocabulary\n")


def test_a_prepare_pass_writes_a_line_every_log_seconds_to_a_file(monkeypatch):
    stream = io.StringIO()
    line = PassProgress(stream)
    line.update("reading", 16_384, 0.1)
    assert stream.getvalue() == ""  # LOG_SECONDS (30 s) have not passed
    monkeypatch.setattr(progress, "LOG_SECONDS", 0.0)
    line.update("reading", 32_768, 0.2)
    line.update("reading", 49_152, 0.3)
    assert [row.split(" | ")[1] for row in stream.getvalue().splitlines()] == \
        ["32,768 pairs", "49,152 pairs"]
