"""bench/gpu_check.py where TensorFlow lists no GPU (the GPU checks need a GPU host)."""
import pytest

from bench_scripts import bench_script
from gpu_helpers import fake_driver, fake_gpus


@pytest.fixture(scope="module")
def gpu_check():
    return bench_script("gpu_check")


def test_no_gpu_and_no_driver_is_nothing_to_check(gpu_check, monkeypatch, tmp_path, capsys):
    fake_driver(monkeypatch, tmp_path, present=False)
    fake_gpus(monkeypatch, [])
    assert gpu_check.main([]) == 0
    assert capsys.readouterr().out == ("gpu-check: TensorFlow lists no GPU and there is no "
                                       "NVIDIA driver: nothing to check\n")


def test_a_driver_without_a_gpu_fails(gpu_check, monkeypatch, tmp_path, capsys):
    fake_driver(monkeypatch, tmp_path, present=True)
    fake_gpus(monkeypatch, [])
    assert gpu_check.main([]) == 1
    output = capsys.readouterr().out
    assert output.startswith("FAIL gpus: an NVIDIA driver is present but TensorFlow sees no GPU")
    assert "`make setup GPU=1`" in output


def test_a_failing_check_is_counted_and_the_rest_goes_on(gpu_check, capsys):
    def no_cuda() -> str:
        raise gpu_check.Skipped("no CUDA")

    checks = gpu_check.Checks()
    assert not checks.run("broken", lambda: 1 / 0)
    assert not checks.run("absent", no_cuda)
    assert checks.run("fine", lambda: "ok")
    assert checks.failed == ["broken"]
    assert capsys.readouterr().out == ("FAIL broken: ZeroDivisionError: division by zero\n"
                                       "SKIP absent: no CUDA\nPASS fine: ok\n")
