"""`translate` on large inputs: peak resident memory and lines/s of `keras-transformer
translate` over inputs of different sizes built from a run's test split (its lines repeated),
each run for the same number of seconds, so that memory that grew with the input would show.

    .venv/bin/python bench/translate_memory.py [CONFIG] [--lines 100000,1000000]
                                               [--seconds 120] [--runtime tf|onnx|ct2]

The process is stopped after --seconds (an interrupted job, as `--output` resumes them); its
resident set size (VmRSS of /proc, children included) is sampled every 0.2 s; lines/s counts
the whole run, start-up included.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def tree_rss_kib(pid: int) -> int:
    """VmRSS of `pid` and its descendants, in KiB (0 for a process that has ended)."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += next((int(line.split()[1]) for line in status.splitlines()
                       if line.startswith("VmRSS:")), 0)
        pending += [int(child) for child in children]
    return total


def measure(command: list[str], output: Path, seconds: float) -> tuple[int, int, float]:
    """(peak RSS KiB, lines written, seconds run) of `command`, stopped after `seconds`."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    peak = 0
    while process.poll() is None and time.perf_counter() - start < seconds:
        peak = max(peak, tree_rss_kib(process.pid))
        time.sleep(0.2)
    elapsed = time.perf_counter() - start
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        process.wait()
    lines = output.read_bytes().count(b"\n") if output.exists() else 0
    return peak, lines, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", default="demo")
    parser.add_argument("--lines", default="100000,1000000")
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--runtime", default="tf", choices=("tf", "onnx", "ct2"))
    args = parser.parse_args()
    from pipelines.config import load_config
    from pipelines.paths import RunPaths

    paths = RunPaths(load_config(args.config).run_path)
    test = paths.split("test")[0].read_bytes().splitlines(keepends=True)
    cli = str(Path(sys.executable).with_name("keras-transformer"))
    print(f"{args.runtime}, {args.seconds:.0f} s per input, lines of {paths.split('test')[0]}"
          f"\n{'input lines':>12}{'input MiB':>11}{'peak RSS MiB':>14}{'lines done':>12}"
          f"{'lines/s':>9}")
    with tempfile.TemporaryDirectory() as scratch:
        for count in (int(value) for value in args.lines.split(",")):
            source, output = Path(scratch) / f"in-{count}.txt", Path(scratch) / f"out-{count}"
            with open(source, "wb") as file:
                for index in range(count):
                    file.write(test[index % len(test)])
            peak, done, elapsed = measure(
                [cli, "translate", str(paths.export), str(source), "--runtime", args.runtime,
                 "--output", str(output)], output, args.seconds)
            print(f"{count:>12,}{source.stat().st_size / 2**20:>11.1f}{peak / 1024:>14.0f}"
                  f"{done:>12,}{done / elapsed:>9.1f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
