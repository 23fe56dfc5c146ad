"""Where `make test`'s time goes: the suite run as the Makefile runs it, each test's CPU (its
process's and its subprocesses', fixtures it sets up included) and wall time recorded by a
pytest plugin (this module, loaded with `-p suite_profile`), then the run's wall and CPU, each
xdist worker's span and its time off the CPU inside tests (sleeps, waits on a subprocess or on
a fixture another worker builds), the files by CPU and the costliest tests.

    .venv/bin/python bench/suite_profile.py [--workers 2] [--marks "not slow"] [--top 20]
                                            [--log FILE] [--core-share F] [PYTEST_ARGS ...]

`--core-share F` runs the suite as on a slower 2-core AVX2 machine: oneDNN and CTranslate2
capped at AVX2, and each xdist worker (with its subprocesses) held to F of one core by a cgroup
of its own, so that no worker runs faster than the slower CPU's core even while the other
waits (needs root and the cgroup v1 cpu controller at /sys/fs/cgroup/cpu). The suite is
tracing, Python and scalar C++, not matrix products: take F from a scalar program timed on
both machines (docs/figures.md: eflomal's binary).

A test's CPU counts the fixtures it is the first to use (the shared exports, trained runs):
read a file's total, not its first test, as the file's cost. Speed figures name the CPU
(docs/figures.md); the same code's wall time drifts between runs on a virtual machine, so
compare runs in turns, or by their CPU.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
LOG_VARIABLE = "SUITE_PROFILE_LOG"
CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
CGROUP_PERIOD_US = 100_000
SLOW_CPU_ISA = {"ONEDNN_MAX_CPU_ISA": "AVX2", "CT2_FORCE_CPU_ISA": "AVX2"}


def _cpu_seconds() -> float:
    """This process's and its waited-for children's user + system seconds."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                         resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """The plugin: one JSON line per test (setup, call and teardown) into $SUITE_PROFILE_LOG."""
    cpu, start = _cpu_seconds(), time.time()
    yield
    record = {"test": item.nodeid, "cpu": _cpu_seconds() - cpu, "wall": time.time() - start,
              "start": start, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}
    with open(os.environ[LOG_VARIABLE], "a") as log:
        log.write(json.dumps(record) + "\n")


def report(records: list[dict], top: int) -> list[str]:
    """The workers' spans, then the `top` files and the `top` tests by CPU, as text lines."""
    lines = []
    first = min(record["start"] for record in records)
    by_worker = collections.defaultdict(list)
    for record in records:
        by_worker[record["worker"]].append(record)
    for worker, tests in sorted(by_worker.items()):
        end = max(record["start"] + record["wall"] for record in tests) - first
        wall, cpu = (sum(record[key] for record in tests) for key in ("wall", "cpu"))
        lines.append(f"worker {worker}: {len(tests)} tests, last ends at {end:.1f} s; in tests "
                     f"{wall:.1f} s wall, {cpu:.1f} CPU-s, {max(wall - cpu, 0):.1f} s off the "
                     f"CPU")
    files = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for record in records:
        totals = files[record["test"].split("::")[0]]
        totals[0] += record["cpu"]
        totals[1] += record["wall"]
        totals[2] += 1
    lines.append(f"{'CPU-s':>8} {'wall s':>8} {'tests':>6}  file")
    for name, (cpu, wall, count) in sorted(files.items(), key=lambda item: -item[1][0])[:top]:
        lines.append(f"{cpu:8.1f} {wall:8.1f} {count:6d}  {name}")
    lines.append(f"{'CPU-s':>8} {'wall s':>8}  test (its fixtures' first use included)")
    for record in sorted(records, key=lambda record: -record["cpu"])[:top]:
        lines.append(f"{record['cpu']:8.2f} {record['wall']:8.2f}  {record['test']}")
    return lines


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children


def held_workers(process: subprocess.Popen, workers: int, share: float) -> list[Path]:
    """Each of pytest's `workers` xdist processes moved, as it starts, into a cgroup of its own
    limited to `share` of one core (its subprocesses follow it); returns the groups."""
    if not os.access(CGROUP_CPU, os.W_OK):
        process.kill()
        sys.exit(f"suite_profile: --core-share needs root and the cgroup v1 cpu controller at "
                 f"{CGROUP_CPU}")
    groups, held = [], set()
    while len(groups) < workers and process.poll() is None:
        for pid in set(_children(process.pid)) - held:
            held.add(pid)
            group = CGROUP_CPU / f"suite-profile-{process.pid}-{len(groups)}"
            group.mkdir()
            (group / "cpu.cfs_period_us").write_text(str(CGROUP_PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(int(share * CGROUP_PERIOD_US)))
            (group / "cgroup.procs").write_text(str(pid))
            groups.append(group)
        time.sleep(0.02)
    return groups


def _remove(groups: list[Path]) -> None:
    for group in groups:
        for pid in (group / "cgroup.procs").read_text().split():
            (CGROUP_CPU / "cgroup.procs").write_text(pid)
        group.rmdir()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="xdist processes (make test's)")
    parser.add_argument("--marks", help='a -m expression, e.g. "not slow" (make test-fast)')
    parser.add_argument("--top", type=int, default=20, help="files and tests listed by CPU")
    parser.add_argument("--log", type=Path, help="keep the per-test JSON lines here")
    parser.add_argument("--core-share", type=float,
                        help="each worker held to this share of one core, AVX2 kernels")
    args, pytest_args = parser.parse_known_args()
    log = args.log or Path(tempfile.mkstemp(prefix="suite_profile.", suffix=".jsonl")[1])
    log.write_text("")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "suite_profile", "-n",
               str(args.workers), "--dist", "loadfile", "--no-loadscope-reorder",
               *(["-m", args.marks] if args.marks else []), *pytest_args]
    if not any((ROOT / arg.split("::")[0]).exists() for arg in pytest_args):
        command.append("tests")  # the whole suite unless test paths are given
    environment = {**os.environ, LOG_VARIABLE: str(log),
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCH),
                                                               os.environ.get("PYTHONPATH")]))}
    if args.core_share:
        environment |= SLOW_CPU_ISA
    start, cpu = time.monotonic(), _cpu_seconds()
    process = subprocess.Popen(command, cwd=ROOT, env=environment)
    groups = held_workers(process, args.workers, args.core_share) if args.core_share else []
    try:
        process.wait()
    finally:
        _remove(groups)
    wall, cpu = time.monotonic() - start, _cpu_seconds() - cpu
    records = [json.loads(line) for line in log.read_text().splitlines()]
    if not args.log:
        log.unlink()
    held = f", each worker held to {args.core_share} of a core" if args.core_share else ""
    print(f"pytest exited {process.returncode}: {wall:.1f} s wall, {cpu:.1f} CPU-s "
          f"({len(records)} tests{held})")
    if records:
        print("\n".join(report(records, args.top)))
    sys.exit(process.returncode)


if __name__ == "__main__":
    main()
