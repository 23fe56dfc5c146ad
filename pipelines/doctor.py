"""`keras-transformer doctor`: what a bug report needs, one item a line, and whether this
install can run the pipeline.

It is usable (status 0) when TensorFlow imports and a small matmul runs on its default device;
a missing optional runtime (ONNX Runtime, CTranslate2, tf2onnx) or an NVIDIA driver that
TensorFlow cannot use is a warning line with the fix. Otherwise status 1 names the problem.
Each probe of an optional runtime that fails becomes a warning, so the report always ends.

Example:
    report = diagnose()
    print(report.format())  # python  3.11.13 ..., then tensorflow, keras, ...
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import itertools
import os
import platform
from pathlib import Path
from typing import Callable

from keras_transformer.precision import cpu_flags, resolve_dtype
from pipelines import gpu
from pipelines.startup import import_tensorflow_quietly

# Item -> the distributions that provide it (onnxruntime-gpu installs the same module).
REQUIRED = {"tensorflow": ("tensorflow",), "keras": ("keras",),
            "tensorflow-text": ("tensorflow-text",), "sentencepiece": ("sentencepiece",)}
OPTIONAL = {"onnxruntime": ("onnxruntime", "onnxruntime-gpu"), "ctranslate2": ("ctranslate2",),
            "tf2onnx": ("tf2onnx",)}
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx_ne_convert", "fma")
MATMUL_SIZE = 64


@dataclasses.dataclass
class Report:
    """The items found (name, text), the warnings and the problems that make it unusable."""

    items: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)

    def add(self, name: str, text: str) -> None:
        self.items.append((name, text))

    def warn(self, text: str) -> None:
        self.items.append(("warning", text))
        self.warnings.append(text)

    def fail(self, text: str) -> None:
        self.items.append(("error", text))
        self.problems.append(text)

    @property
    def status(self) -> int:
        return 1 if self.problems else 0

    def format(self) -> str:
        """The report as `doctor` prints it, its verdict last."""
        verdict = (f"unusable: {self.problems[0]}" if self.problems else
                   f"usable ({len(self.warnings)} warning(s))")
        return "\n".join(f"{name:<16} {text}" for name, text in [*self.items,
                                                                   ("status", verdict)])


def diagnose() -> Report:
    """Probes this install and machine (a few seconds, mostly TensorFlow's import)."""
    report = Report()
    report.add("python", f"{platform.python_version()} ({platform.platform()})")
    _versions(report)
    try:
        import_tensorflow_quietly()
    except Exception as error:  # a broken install is what doctor is for
        report.fail(f"TensorFlow does not import: {type(error).__name__}: {error}")
        return report
    _tensorflow_build(report)
    _probe(report, "gpus", _gpus)
    _cpu(report)
    report.add("model.dtype", f"auto -> {resolve_dtype('auto')[1]}")
    _probe(report, "ort providers", _onnxruntime)
    _probe(report, "ct2 devices", _ctranslate2)
    _probe(report, "strategy", _strategy)
    _matmul(report)
    return report


def _versions(report: Report) -> None:
    for table, missing in ((REQUIRED, report.fail), (OPTIONAL, report.warn)):
        for name, distributions in table.items():
            versions = {dist: _version(dist) for dist in distributions}
            found = [version if dist == name else f"{dist} {version}"
                     for dist, version in versions.items() if version]
            if not found:
                missing(f"{name} is not installed: run `make setup`")
                continue
            report.add(name, " and ".join(found))
            if len(found) > 1:
                report.warn(f"{' and '.join(distributions)} are both installed and overwrite "
                            f"each other's files: uninstall both, then install one")


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _probe(report: Report, name: str, probe: Callable[[Report], None]) -> None:
    """Runs a probe of something optional; its failure is a warning naming it."""
    try:
        probe(report)
    except Exception as error:  # whatever an optional runtime raises, the report goes on
        report.warn(f"{name}: {type(error).__name__}: {error}")


def _tensorflow_build(report: Report) -> None:
    import tensorflow as tf

    build = tf.sysconfig.get_build_info()
    if not build.get("is_cuda_build"):
        report.add("tf build", "not a CUDA build (no NVIDIA GPU support)")
        return
    report.add("tf build", f"CUDA build: CUDA {build.get('cuda_version', '?')}, cuDNN "
                           f"{build.get('cudnn_version', '?')}, kernels for "
                           f"{' '.join(build.get('cuda_compute_capabilities', []))}")


def _gpus(report: Report) -> None:
    """The GPUs TensorFlow lists (name, compute capability, memory) and the NVIDIA driver."""
    gpus, memory = gpu.visible_gpus(), gpu.nvidia_smi_memory()
    for index, found in enumerate(gpus):
        capability = ("compute capability unknown" if found.capability is None else
                      f"compute capability {found.capability[0]}.{found.capability[1]}")
        report.add(f"gpu {index}", f"{found.name}, {capability}, "
                                   f"{memory.get(found.name, 'memory unknown')}")
    if not gpus:
        report.add("gpus", "none listed by TensorFlow")
    report.add("nvidia driver", _driver_version() if gpu.nvidia_driver_present() else "absent")
    warning = gpu.unused_driver_warning()
    if warning:
        report.warn(f"{warning}; `train` would run on the CPU")


def _driver_version() -> str:
    """The kernel module's version line, e.g. "NVRM version: NVIDIA UNIX x86_64 Kernel
    Module  550.54.15 ..."; "present" when it cannot be read."""
    try:
        return " ".join(gpu.NVIDIA_DRIVER_FILES[0].read_text().split()[:8]) or "present"
    except OSError:
        return "present"


def _cpu(report: Report) -> None:
    """The CPU model and the flags the dtype choice and oneDNN depend on; oneDNN's state."""
    from tensorflow.python.util import _pywrap_util_port  # TensorFlow's own oneDNN switch

    flags = cpu_flags()
    has = " ".join(flag for flag in ISA_FLAGS if flag in flags) or "-"
    lacks = " ".join(flag for flag in ISA_FLAGS if flag not in flags) or "-"
    report.add("cpu", f"{_cpu_model()}, {os.cpu_count()} logical cores; has {has}; lacks {lacks}")
    cap = next((f"{name}={os.environ[name]}" for name in ("ONEDNN_MAX_CPU_ISA",
                                                          "DNNL_MAX_CPU_ISA")
                if os.environ.get(name)), "no ONEDNN_MAX_CPU_ISA cap")
    switch = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    switch = (f"TF_ENABLE_ONEDNN_OPTS={switch}" if switch is not None else
              "TF_ENABLE_ONEDNN_OPTS unset: TensorFlow's default")
    state = "on" if _pywrap_util_port.IsMklEnabled() else "off"
    report.add("onednn", f"{state} ({switch}), {cap}")


def _cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The first CPU's model name, family and model (Linux); the platform's name elsewhere."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo, encoding="utf-8") as file:
            for line in itertools.takewhile(str.strip, file):  # the first CPU's block
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    if "model name" not in fields:
        return platform.processor() or "unknown CPU"
    return (f"{fields['model name']} (family {fields.get('cpu family', '?')}, model "
            f"{fields.get('model', '?')})")


def _onnxruntime(report: Report) -> None:
    import onnxruntime

    providers = onnxruntime.get_available_providers()
    note = ""
    if gpu.visible_gpus() and "CUDAExecutionProvider" not in providers:
        note = " (no CUDA: the CPU package; constraints-gpu.txt says how to use onnxruntime-gpu)"
    report.add("ort providers", f"{', '.join(providers)}{note}")


def _ctranslate2(report: Report) -> None:
    import ctranslate2

    devices = ctranslate2.get_cuda_device_count()
    types = [f"cpu: {', '.join(sorted(ctranslate2.get_supported_compute_types('cpu')))}"]
    if devices:
        types.append(f"cuda: {', '.join(sorted(ctranslate2.get_supported_compute_types('cuda')))}")
    report.add("ct2 devices", f"{devices} CUDA device(s); compute types {'; '.join(types)}")


def _strategy(report: Report) -> None:
    """What `train` would use; a TF_CONFIG cluster is described, not joined (that would wait
    for every other worker)."""
    import tensorflow as tf

    from pipelines.training.strategy import cluster_spec, make_strategy, strategy_name

    cluster = cluster_spec()
    if cluster:
        workers = len(cluster.get("chief", [])) + len(cluster.get("worker", []))
        local = len(tf.config.list_physical_devices("GPU")) or 1
        report.add("strategy", f"MultiWorkerMirroredStrategy (TF_CONFIG): {workers} worker(s), "
                               f"{local} replica(s) on this one")
        return
    strategy = make_strategy()
    devices = ", ".join(device.rsplit("/", 1)[-1].removeprefix("device:")
                        for device in strategy.extended.worker_devices)
    report.add("strategy", f"{strategy_name(strategy)}, {strategy.num_replicas_in_sync} "
                           f"replica(s): {devices}")


def _matmul(report: Report) -> None:
    """A small matmul on TensorFlow's default device: the install computes."""
    import tensorflow as tf

    try:
        ones = tf.ones([MATMUL_SIZE, MATMUL_SIZE])
        product = tf.linalg.matmul(ones, ones)
        correct = float(tf.reduce_max(tf.abs(product - MATMUL_SIZE))) == 0.0
    except Exception as error:  # a broken CUDA set-up fails here
        report.fail(f"a {MATMUL_SIZE}x{MATMUL_SIZE} matmul failed: {type(error).__name__}: "
                    f"{error}")
        return
    if not correct:
        report.fail(f"a {MATMUL_SIZE}x{MATMUL_SIZE} matmul of ones on {product.device} is wrong")
        return
    report.add("matmul", f"ok on {product.device}")
