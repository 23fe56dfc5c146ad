"""The NVIDIA GPUs of this machine: whether a driver is present, what TensorFlow lists, their
memory (nvidia-smi), and the one warning line for a driver that TensorFlow cannot use.

A driver without a GPU in TensorFlow means a CPU-only install (the `gpu` extra's CUDA wheels
missing) or CUDA libraries TensorFlow cannot load: the work would silently run on the CPU, so
`train`, `run` and `translate` say so in one line with the fix.

Example:
    warning = unused_driver_warning()  # None, or "an NVIDIA driver is present but ..."
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

NVIDIA_DRIVER_FILES = (Path("/proc/driver/nvidia/version"), Path("/dev/nvidia0"))
GPU_SETUP = "make setup GPU=1"


class Gpu(NamedTuple):
    """A GPU as TensorFlow lists it."""

    device: str  # e.g. "/physical_device:GPU:0"
    name: str  # e.g. "NVIDIA A100-SXM4-40GB"; "unknown" when TensorFlow does not say
    capability: tuple[int, int] | None  # CUDA compute capability


def nvidia_driver_present() -> bool:
    """Whether an NVIDIA kernel driver or its nvidia-smi tool is installed."""
    return any(path.exists() for path in NVIDIA_DRIVER_FILES) or bool(shutil.which("nvidia-smi"))


def visible_gpus() -> list[Gpu]:
    """The GPUs TensorFlow lists, with their names and compute capabilities."""
    import tensorflow as tf

    gpus = []
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        capability = details.get("compute_capability")
        gpus.append(Gpu(device.name, details.get("device_name", "unknown"),
                        tuple(capability) if capability else None))
    return gpus


def nvidia_smi_memory() -> dict[str, str]:
    """GPU name -> total memory (e.g. "40960 MiB") from nvidia-smi; a name whose GPUs differ
    in memory is left out, so is everything when nvidia-smi is missing or fails."""
    if not shutil.which("nvidia-smi"):
        return {}
    try:
        listing = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    memory: dict[str, set[str]] = {}
    for line in listing.splitlines():
        name, _, total = line.rpartition(",")
        memory.setdefault(name.strip(), set()).add(total.strip())
    return {name: totals.pop() for name, totals in memory.items() if len(totals) == 1}


def unused_driver_warning() -> str | None:
    """What to do when an NVIDIA driver is present but TensorFlow lists no GPU, else None."""
    if not nvidia_driver_present() or visible_gpus():
        return None
    return (f"an NVIDIA driver is present but TensorFlow sees no GPU (this install is CPU-only "
            f"TensorFlow, or CUDA libraries are missing): run `{GPU_SETUP}` (or pip install "
            f"-c constraints.txt -c constraints-gpu.txt -e '.[gpu]'), then `keras-transformer "
            f"doctor`")


def warn_unused_gpu_driver(command: str, doing: str) -> None:
    """One stderr line from `keras-transformer COMMAND` when an NVIDIA driver is present but
    TensorFlow lists no GPU (`unused_driver_warning`)."""
    warning = unused_driver_warning()
    if warning:
        print(f"keras-transformer {command}: warning: {warning}; {doing} on the CPU",
              file=sys.stderr)
