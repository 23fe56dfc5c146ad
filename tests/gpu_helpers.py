"""Test helpers for the GPU paths on any machine: an NVIDIA driver faked present or absent
(`pipelines.gpu.NVIDIA_DRIVER_FILES`, PATH), and the GPUs TensorFlow lists faked."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipelines import gpu

DRIVER_VERSION = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 "
                  "22:23:56 UTC 2024\n")


def fake_driver(monkeypatch: pytest.MonkeyPatch, directory: Path, present: bool) -> None:
    """A driver file in `directory` (or none) and a PATH without nvidia-smi."""
    version = directory / "nvidia-version"
    if present:
        version.write_text(DRIVER_VERSION)
    monkeypatch.setattr(gpu, "NVIDIA_DRIVER_FILES", (version,))
    (directory / "bin").mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", str(directory / "bin"))


def fake_gpus(monkeypatch: pytest.MonkeyPatch, details: list[dict[str, Any]]) -> None:
    """TensorFlow lists one GPU per entry of `details` (get_device_details' answer)."""
    import tensorflow as tf

    devices = [tf.config.PhysicalDevice(f"/physical_device:GPU:{index}", "GPU")
               for index in range(len(details))]
    listing = tf.config.list_physical_devices
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda device_type=None: devices if device_type == "GPU"
                        else listing(device_type))
    monkeypatch.setattr(tf.config.experimental, "get_device_details",
                        lambda device: details[devices.index(device)])
