"""TensorFlow's start-up for the CLI, without the log lines TF_CPP_MIN_LOG_LEVEL fails to hide.

TensorFlow logs through absl, which writes whatever is logged before absl::InitializeLog() to
stderr regardless of TF_CPP_MIN_LOG_LEVEL: importing TensorFlow prints INFO lines ("oneDNN
custom operations are on", "Could not find cuda drivers"), and listing the devices on a machine
without an NVIDIA GPU an ERROR "failed call to cuInit" (CUDA_VISIBLE_DEVICES="" or -1 does not
prevent it). `import_tensorflow_quietly` does both with stderr captured, then writes back all
but those lines: absl lines below TF_CPP_MIN_LOG_LEVEL, absl's notice about them, and the cuInit
error where the machine has no NVIDIA driver. Later warnings and errors are untouched. Keras's
import of matplotlib is held back meanwhile (`matplotlib_held_back`), and Python's garbage
collector is then set for building graphs (`tune_garbage_collector`).

Example:
    >>> default_log_level("train")  # TF_CPP_MIN_LOG_LEVEL 2, or 3 for a worker of several
    >>> import_tensorflow_quietly()  # then `import tensorflow` costs nothing and prints nothing
"""
from __future__ import annotations

import contextlib
import functools
import gc
import os
import re
import sys
import tempfile
from typing import Callable, Iterator

from pipelines.gpu import nvidia_driver_present

ABSL_LINE = re.compile(rb"([IWEF])\d{4} [\d:.]+ +\d+ [^\]]*\] ")  # I0000 00:00:17.5  42 a.cc:1]
SEVERITIES = b"IWEF"  # INFO, WARNING, ERROR, FATAL: TF_CPP_MIN_LOG_LEVEL 0 to 3
ABSL_NOTICE = b"WARNING: All log messages before absl::InitializeLog() is called"
CUINIT_FAILED = re.compile(rb"\] failed call to cuInit")
YOUNG_COLLECTION_EVERY = 20_000  # net allocations between young collections (Python's: 700)


def default_log_level(command: str) -> None:
    """TF_CPP_MIN_LOG_LEVEL unless the user set it: TensorFlow's native INFO and WARNING lines
    off (2); a `train` worker of several (TF_CONFIG) also leaves out the ERROR lines of
    collectives aborted by a lost worker (3), which the train command names in its own line."""
    multi_worker_train = command == "train" and os.environ.get("TF_CONFIG")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3" if multi_worker_train else "2")


def import_tensorflow_quietly() -> None:
    """Imports TensorFlow and lists its devices with the start-up noise above filtered out."""
    try:
        min_level = int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        min_level = 0
    nvidia = nvidia_driver_present()
    with filtered_stderr(lambda line: is_noise(line, min_level, nvidia)), matplotlib_held_back():
        import tensorflow as tf

        tf.config.list_physical_devices()
    tune_garbage_collector()


@functools.cache
def tune_garbage_collector() -> None:
    """Python's cycle collector set for building graphs, once per process: the objects alive
    now (TensorFlow's and Keras's modules, after their import) are moved out of its reach
    (`gc.freeze`), and a young collection runs every YOUNG_COLLECTION_EVERY net allocations
    instead of 700. Tracing a search or converting it to ONNX allocates millions of objects,
    which the default thresholds walk over and over (its cost: docs/figures.md). Cycles are
    still collected, in fewer passes."""
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, *gc.get_threshold()[1:])


@contextlib.contextmanager
def matplotlib_held_back() -> Iterator[None]:
    """Within the block, `import matplotlib` fails (ImportError) unless it was imported before;
    afterwards it imports as usual. Keras, which TensorFlow imports, imports matplotlib.pyplot
    for plotting helpers the CLI never calls, and goes without them when it cannot: that import
    was a fifth of TensorFlow's start-up (docs/figures.md). `pipelines.visualize` imports
    matplotlib when it draws."""
    held = "matplotlib" not in sys.modules
    if held:
        sys.modules["matplotlib"] = None  # type: ignore[assignment]  # Python's import block
    try:
        yield
    finally:
        if held and sys.modules.get("matplotlib", ...) is None:
            del sys.modules["matplotlib"]


def is_noise(line: bytes, min_level: int, nvidia_gpu: bool) -> bool:
    """Whether a stderr line of TensorFlow's start-up is to be dropped (see the docstring)."""
    if line.startswith(ABSL_NOTICE):
        return min_level > 0
    match = ABSL_LINE.match(line)
    if match is None:
        return False
    if SEVERITIES.index(match[1]) < min_level:
        return True
    return not nvidia_gpu and CUINIT_FAILED.search(line) is not None


@contextlib.contextmanager
def filtered_stderr(drop: Callable[[bytes], bool]) -> Iterator[None]:
    """Captures file descriptor 2 (native code's and Python's stderr) during the block, then
    writes back the captured lines but those `drop` returns True for."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            with open(2, "wb", closefd=False) as stderr:
                stderr.writelines(line for line in capture if not drop(line))
