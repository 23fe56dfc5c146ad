"""bench/suite_profile.py's report from scripted per-test records."""
from bench_scripts import bench_script


def test_the_report_gives_each_workers_span_and_ranks_files_and_tests_by_cpu():
    records = [{"test": test, "cpu": cpu, "wall": wall, "start": start, "worker": worker}
               for test, cpu, wall, start, worker in (
                   ("tests/test_a.py::one", 2.0, 3.0, 100.0, "gw0"),
                   ("tests/test_a.py::two", 1.0, 1.0, 103.0, "gw0"),
                   ("tests/test_b.py::one", 5.0, 5.5, 100.5, "gw1"))]
    lines = bench_script("suite_profile").report(records, top=2)
    assert lines[:2] == [
        "worker gw0: 2 tests, last ends at 4.0 s; in tests 4.0 s wall, 3.0 CPU-s, 1.0 s off "
        "the CPU",
        "worker gw1: 1 tests, last ends at 6.0 s; in tests 5.5 s wall, 5.0 CPU-s, 0.5 s off "
        "the CPU"]
    files = lines[3:5]
    assert [line.split()[-1] for line in files] == ["tests/test_b.py", "tests/test_a.py"]
    assert files[1].split()[:3] == ["3.0", "4.0", "2"]
    tests = lines[6:]
    assert [line.split()[-1] for line in tests] == ["tests/test_b.py::one", "tests/test_a.py::one"]
