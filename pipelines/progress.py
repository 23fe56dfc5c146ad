"""A training progress line: step, loss, tokens/s, learning rate and the ETA.

On a terminal the line is rewritten in place; elsewhere (a log file) each update is a line.
"""
from __future__ import annotations

import datetime
import sys
import time
from typing import TextIO


class Progress:
    """Shows `step N/total (P%) | name value ... | ETA H:MM:SS`.

    The ETA uses the rate since `begin` (call it after the first, compiling step).

    Example:
        progress = Progress(total=1000)
        progress.begin(step=1)
        progress.update(100, {"loss": "4.123", "tok/s": "5,120"})
        progress.message("dev loss 3.9")
    """

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total = total
        self.stream = stream or sys.stdout
        self.enabled = enabled
        self.in_place = self.stream.isatty()
        self._start: tuple[float, int] | None = None
        self._open_line = False

    def begin(self, step: int) -> None:
        self._start = (time.monotonic(), step)

    def update(self, step: int, values: dict[str, str]) -> None:
        if not self.enabled:
            return
        fields = [f"step {step:,}/{self.total:,} ({100 * step / self.total:.0f}%)"]
        fields += [f"{name} {value}" for name, value in values.items()]
        fields.append(f"ETA {self._eta(step)}")
        line = " | ".join(fields)
        if self.in_place:
            self.stream.write(f"\r{line}\x1b[K")
            self._open_line = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def message(self, text: str) -> None:
        """A line of its own (validation results), below the progress line."""
        if not self.enabled:
            return
        if self._open_line:
            self.stream.write("\n")
            self._open_line = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def _eta(self, step: int) -> str:
        if self._start is None or step <= self._start[1]:
            return "?"
        started, first_step = self._start
        seconds = (time.monotonic() - started) / (step - first_step) * (self.total - step)
        return str(datetime.timedelta(seconds=round(seconds)))
