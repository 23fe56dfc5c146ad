"""pipelines/doctor.py: `keras-transformer doctor` on this machine and on faked GPUs."""
import importlib.metadata

import pytest

import pipelines.doctor
from gpu_helpers import fake_driver, fake_gpus
from pipelines import gpu
from pipelines.cli import main
from pipelines.doctor import ISA_FLAGS, diagnose

ITEMS = ("python", "tensorflow", "keras", "tensorflow-text", "sentencepiece", "onnxruntime",
         "ctranslate2", "tf2onnx", "tf build", "nvidia driver", "cpu", "onednn", "model.dtype",
         "ort providers", "ct2 devices", "strategy", "matmul", "status")


def _items(text: str) -> dict[str, str]:
    """Report lines as {item: text} (the first line of each item)."""
    items: dict[str, str] = {}
    for line in text.splitlines():
        items.setdefault(line[:16].strip(), line[17:])
    return items


def test_the_report_on_this_machine_has_every_item(capsys):
    assert main(["doctor"]) == 0
    items = _items(capsys.readouterr().out)
    assert set(ITEMS) <= set(items) and ("gpus" in items or "gpu 0" in items)
    assert items["tensorflow"] == importlib.metadata.version("tensorflow")
    assert all(flag in items["cpu"] for flag in ISA_FLAGS)
    assert items["tf build"].startswith(("CUDA build: CUDA 12", "not a CUDA build"))
    assert items["status"].startswith("usable")


@pytest.mark.parametrize("name, capability, memory, dtype", [
    ("Tesla T4", (7, 5), "15360 MiB", "mixed_float16: the GPU has compute capability 7.5"),
    ("NVIDIA A100-SXM4-40GB", (8, 0), "40960 MiB",
     "mixed_bfloat16: the GPU has compute capability 8.0"),
    ("NVIDIA A100-SXM4-40GB", (8, 0), None, "mixed_bfloat16"),
])
def test_gpus_with_capability_memory_and_auto_dtype(name, capability, memory, dtype,
                                                    monkeypatch, tmp_path):
    fake_driver(monkeypatch, tmp_path, present=True)
    fake_gpus(monkeypatch, [{"device_name": name, "compute_capability": capability}])
    monkeypatch.setattr(gpu, "nvidia_smi_memory", lambda: {name: memory} if memory else {})
    report = diagnose()
    items = _items(report.format())
    assert items["gpu 0"] == (f"{name}, compute capability {capability[0]}.{capability[1]}, "
                              f"{memory or 'memory unknown'}")
    assert items["model.dtype"].startswith(f"auto -> {dtype}")
    assert items["nvidia driver"] == "NVRM version: NVIDIA UNIX x86_64 Kernel Module 550.54.15"
    assert "no CUDA: the CPU package" in items["ort providers"]
    assert (report.status, report.warnings) == (0, [])


def test_a_driver_without_a_gpu_is_a_warning_with_the_fix(monkeypatch, tmp_path):
    fake_driver(monkeypatch, tmp_path, present=True)
    fake_gpus(monkeypatch, [])
    report = diagnose()
    assert report.status == 0 and len(report.warnings) == 1
    assert "run `make setup GPU=1`" in report.warnings[0]
    assert report.format().endswith("status           usable (1 warning(s))")


def test_runtime_problems_warn_and_a_failed_matmul_fails(monkeypatch, tmp_path):
    import tensorflow as tf

    fake_driver(monkeypatch, tmp_path, present=False)
    version = importlib.metadata.version

    def installed(distribution: str) -> str:  # no ctranslate2, both ONNX Runtimes
        if distribution == "ctranslate2":
            raise importlib.metadata.PackageNotFoundError(distribution)
        return "1.26.0" if distribution == "onnxruntime-gpu" else version(distribution)

    def broken(*args, **kwargs):
        raise tf.errors.InternalError(None, None, "CUDA_ERROR_NO_DEVICE")

    monkeypatch.setattr(importlib.metadata, "version", installed)
    monkeypatch.setattr(tf.linalg, "matmul", broken)
    report = diagnose()
    assert _items(report.format())["onnxruntime"] == (f"{version('onnxruntime')} and "
                                                      f"onnxruntime-gpu 1.26.0")
    assert report.warnings == [
        "onnxruntime and onnxruntime-gpu are both installed and overwrite each other's files: "
        "uninstall both, then install one", "ctranslate2 is not installed: run `make setup`"]
    assert report.status == 1
    assert report.format().splitlines()[-1] == (
        "status           unusable: a 64x64 matmul failed: InternalError: CUDA_ERROR_NO_DEVICE")


def test_tensorflow_that_does_not_import_is_named(monkeypatch, capsys):
    def no_tensorflow():
        raise ImportError("libcudart.so.12: cannot open shared object file")

    monkeypatch.setattr(pipelines.doctor, "import_tensorflow_quietly", no_tensorflow)
    assert main(["doctor"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        "status           unusable: TensorFlow does not import: ImportError: libcudart.so.12: "
        "cannot open shared object file")
