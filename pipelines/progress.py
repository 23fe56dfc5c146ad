"""Progress lines: training (step, loss, tokens/s, learning rate, elapsed time and ETA), and
`prepare` streaming a corpus (pairs read, rate, share of the input).

On a terminal a line is rewritten in place: training's after every update and, between updates
(a compiling first step, a slow CPU, validation), every `TICK_SECONDS` with the clock running.
Elsewhere (a log file) a line is written at each logging step and at least every
`LOG_SECONDS`.

Example:
    >>> progress = Progress(total=config.train.steps)
    >>> progress.update(step, {"loss": "4.21"}, log=True)
    >>> progress.close()
"""
from __future__ import annotations

import datetime
import sys
import threading
import time
from typing import Callable, TextIO

TICK_SECONDS = 5.0
LOG_SECONDS = 30.0


class Progress:
    """Shows `step N/total (P%) | name value ... | elapsed H:MM:SS | ETA H:MM:SS`.

    The ETA uses the rate since `begin` (call it after the first, compiling step); with a
    budget it is the sooner of the end of the steps and the end of the budget.

    Args:
        total: the last step.
        stream: default stdout.
        enabled: False prints nothing (non-chief workers).
        elapsed: seconds spent so far (default: since construction), e.g. a resumed run's clock.
        budget_seconds: the time budget, if any.

    Example:
        progress = Progress(total=1000)
        progress.begin(step=1)
        progress.update(100, {"loss": "4.123", "tok/s": "5,120"})
        progress.message("dev loss 3.9")
        progress.close()
    """

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool = True,
                 elapsed: Callable[[], float] | None = None,
                 budget_seconds: float | None = None) -> None:
        self.total = total
        self.stream = stream or sys.stdout
        self.enabled = enabled
        self.in_place = self.stream.isatty()
        started = time.monotonic()
        self.elapsed = elapsed or (lambda: time.monotonic() - started)
        self.budget_seconds = budget_seconds
        self._start: tuple[float, int] | None = None
        self._step = 0
        self._values: dict[str, str] = {}
        self._open_line = False
        self._last_line = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        if enabled and self.in_place:
            threading.Thread(target=self._tick, daemon=True).start()

    def begin(self, step: int) -> None:
        self._start = (time.monotonic(), step)

    def update(self, step: int, values: dict[str, str], log: bool = False) -> None:
        """Shows the state after `step`; `log` marks a logging step (always a line in files)."""
        if not self.enabled:
            return
        with self._lock:
            self._step, self._values = step, values
            if self.in_place:
                self._draw()
            elif log or time.monotonic() - self._last_line >= LOG_SECONDS:
                self.stream.write(self._line() + "\n")
                self.stream.flush()
                self._last_line = time.monotonic()

    def message(self, text: str) -> None:
        """A line of its own (validation results), below the progress line."""
        if not self.enabled:
            return
        with self._lock:
            if self._open_line:
                self.stream.write("\n")
                self._open_line = False
            self.stream.write(text + "\n")
            self.stream.flush()

    def close(self) -> None:
        """Stops the redrawing and ends the line."""
        self._stop.set()
        with self._lock:
            if self._open_line:
                self.stream.write("\n")
                self.stream.flush()
                self._open_line = False

    def _tick(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            with self._lock:
                if self._step:
                    self._draw()

    def _draw(self) -> None:
        self.stream.write(f"\r{self._line()}\x1b[K")
        self.stream.flush()
        self._open_line = True

    def _line(self) -> str:
        fields = [f"step {self._step:,}/{self.total:,} ({100 * self._step / self.total:.0f}%)"]
        fields += [f"{name} {value}" for name, value in self._values.items()]
        fields += [f"elapsed {_clock(self.elapsed())}", f"ETA {self._eta()}"]
        return " | ".join(fields)

    def _eta(self) -> str:
        budget_left = (None if self.budget_seconds is None
                       else max(0.0, self.budget_seconds - self.elapsed()))
        steps_left = None
        if self._start is not None and self._step > self._start[1]:
            started, first_step = self._start
            rate = (time.monotonic() - started) / (self._step - first_step)
            steps_left = rate * (self.total - self._step)
        if budget_left is not None and (steps_left is None or budget_left < steps_left):
            return f"{_clock(budget_left)} (budget)"
        return "?" if steps_left is None else _clock(steps_left)


def _clock(seconds: float) -> str:
    return str(datetime.timedelta(seconds=round(seconds)))


class PassProgress:
    """A stream of items passing through: `reading | 1,234,567 pairs | 98,765 pairs/s | 34% of
    the input | elapsed 0:00:12` (prepare), `translating | 12,000 lines | 85 lines/s | 41% of
    the input | elapsed 0:02:21 | ETA 0:03:23` (translate), redrawn in place on a terminal
    (every `DRAW_SECONDS` while items flow), a line every `LOG_SECONDS` elsewhere.

    Example:
        progress = PassProgress()
        progress.update("reading", 16_384, 0.02)  # cheap when nothing is due
        progress.message("learning the vocabulary")
        progress.close()
    """

    DRAW_SECONDS = 1.0

    def __init__(self, stream: TextIO | None = None, unit: str = "pairs",
                 eta: bool = False) -> None:
        self.stream = stream or sys.stdout
        self.unit, self.eta = unit, eta
        self.in_place = self.stream.isatty()
        self._started = self._last = time.monotonic()
        self._label = ""
        self._label_start = (self._started, 0)
        self._open_line = False

    def update(self, label: str, count: int, fraction: float | None, force: bool = False) -> None:
        """`count` items of the pass `label` done, `fraction` of its input (None: unknown);
        drawn when due, or now with `force`."""
        now = time.monotonic()
        if label != self._label:
            self._label, self._label_start = label, (now, count)
        if not force and now - self._last < (self.DRAW_SECONDS if self.in_place
                                             else LOG_SECONDS):
            return
        self._last = now
        started, first = self._label_start
        fields = [label, f"{count:,} {self.unit}"]
        if now > started and count > first:
            fields.append(f"{(count - first) / (now - started):,.0f} {self.unit}/s")
        if fraction is not None:
            fields.append(f"{100 * fraction:.0f}% of the input")
        fields.append(f"elapsed {_clock(now - self._started)}")
        if self.eta and fraction and fraction < 1:
            fields.append(f"ETA {_clock((now - self._started) * (1 - fraction) / fraction)}")
        line = " | ".join(fields)
        if self.in_place:
            self.stream.write(f"\r{line}\x1b[K")
            self._open_line = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def message(self, text: str) -> None:
        """A line of its own."""
        self.close()
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Ends an open progress line."""
        if self._open_line:
            self.stream.write("\n")
            self.stream.flush()
            self._open_line = False
