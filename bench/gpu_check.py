"""Whether the GPU paths work on this host, check by check (PASS / FAIL / SKIP).

    .venv/bin/python bench/gpu_check.py [--steps 300] [--sentences 200] [--work DIR]

(`make gpu-check`.) Where TensorFlow lists no GPU and there is no NVIDIA driver it says so and
exits 0; a driver that TensorFlow cannot use is a FAIL. On a GPU host:

1. doctor: `keras-transformer doctor`'s report, printed; the install computes.
2. train GPU:N: the tiny preset on the embedded corpus (bible:en-fr, prepared once with a
   1,000-piece vocabulary), `model.dtype: auto`, on that GPU alone (MirroredStrategy over it):
   the loss of the last LOSS_WINDOW updates of --steps is below that of the first ones. With
   several GPUs, once more over all of them (the strategy `train` picks by default).
3. export: SavedModel and ONNX of the first GPU's run.
4. saved_model: beam search of the first --sentences of the test split through the SavedModel:
   every line translated, with GPU memory allocated during the search.
5. onnx cuda: the same sources through model.onnx on ONNX Runtime's CUDAExecutionProvider
   (SKIP where this onnxruntime has none: the CPU package, see constraints-gpu.txt).

Exits 1 when a check failed. Runs in a temporary directory unless --work names one.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import yaml

from pipelines import gpu
from pipelines.config import PipelineConfig, load_config
from pipelines.doctor import Report, diagnose
from pipelines.paths import RunPaths
from pipelines.startup import import_tensorflow_quietly

LOSS_WINDOW = 20  # updates whose mean loss is compared, first and last
PREPARED = "prepared"


class CheckFailed(Exception):
    """A check ran and its result is wrong."""


class Skipped(Exception):
    """A check that cannot run on this install."""


class Checks:
    """Runs checks, printing PASS / FAIL / SKIP with a detail each, and counts the failures."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def run(self, name: str, check: Callable[[], str]) -> bool:
        """Whether `check` passed; any exception it raises is its FAIL (Skipped: a SKIP)."""
        try:
            detail = check()
        except Skipped as reason:
            print(f"SKIP {name}: {reason}", flush=True)
            return False
        except Exception as error:  # a GPU path that breaks in any way is what we look for
            print(f"FAIL {name}: {type(error).__name__}: {error}", flush=True)
            self.failed.append(name)
            return False
        print(f"PASS {name}: {detail}", flush=True)
        return True


def check_config(work: Path, name: str, steps: int) -> PipelineConfig:
    """The config of run `name` under `work`: the tiny preset in `auto` on bible:en-fr."""
    config = {
        "name": name, "run_dir": str(work / name),
        "data": {"source": "bible:en-fr", "vocab_size": 1000, "max_length": 64},
        "model": {"preset": "tiny", "dtype": "auto"},
        "train": {"batch_tokens": 4096, "steps": steps, "max_minutes": 0, "warmup_steps": 100,
                  "log_every_steps": LOSS_WINDOW, "checkpoint_every_steps": 0,
                  "checkpoint_every_minutes": 0, "keep_checkpoints": 1, "average_last": 1,
                  "validate_every_steps": 0, "bleu_every_steps": 0},
        "export": {"formats": ["saved_model", "onnx"]},
    }
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return load_config(path)


def train_check(work: Path, name: str, devices: list[str], steps: int) -> str:
    """Trains run `name` (a copy of the prepared data) on `devices`; the loss must fall."""
    import tensorflow as tf

    from pipelines.training.train import train

    for part in ("data", "vocab"):
        shutil.copytree(work / PREPARED / part, work / name / part)
    strategy = tf.distribute.MirroredStrategy(devices)
    first = train(check_config(work, name, LOSS_WINDOW), strategy=strategy)
    last = train(check_config(work, name, steps), strategy=strategy)
    losses = (f"loss {first.loss:.3f} over updates 1-{first.step} -> {last.loss:.3f} over "
              f"{last.step - LOSS_WINDOW + 1}-{last.step}")
    if not last.loss < first.loss:
        raise CheckFailed(f"{losses}: it did not fall")
    return (f"{last.replicas} replica(s), {last.dtype_reason}; {losses}; "
            f"{last.tokens_per_second:,.0f} target tokens/s")


def export_check(config: PipelineConfig) -> str:
    from pipelines.export import export_run

    summary = export_run(config, ["saved_model", "onnx"])
    return f"{summary.saved_model} and {summary.onnx} in {summary.seconds:.0f} s"


def saved_model_check(config: PipelineConfig, lines: list[str], device: str) -> str:
    """Beam search through the SavedModel loaded on `device` (e.g. "GPU:0"), whose memory
    must grow while it runs."""
    import tensorflow as tf

    from export.loading import open_translator

    with tf.device(device):  # its variables and the search's ops (strings stay on the CPU)
        translator = open_translator(RunPaths(config.run_path).export, "tf")
        tf.config.experimental.reset_memory_stats(device)
        before = tf.config.experimental.get_memory_info(device)["current"]
        start = time.perf_counter()
        translations = translator.translate_lines(lines)
        seconds = time.perf_counter() - start
    grown = tf.config.experimental.get_memory_info(device)["peak"] - before
    if len(translations) != len(lines) or not any(translations):
        raise CheckFailed(f"{len(translations)} translations of {len(lines)} lines, "
                          f"{sum(map(bool, translations))} not empty")
    if grown <= 0:
        raise CheckFailed(f"no memory of {device} was allocated during the search: it ran on "
                          f"the CPU")
    beam = translator.metadata.settings.beam_size
    return (f"{len(lines)} sentences in {seconds:.1f} s (beam {beam}), {grown / 2**20:,.1f} MiB "
            f"more on {device} at the peak")


def onnx_cuda_check(config: PipelineConfig, lines: list[str]) -> str:
    """model.onnx on the CUDAExecutionProvider, compared with the CPU provider's output."""
    import onnxruntime
    import tensorflow as tf

    from export.metadata import MODEL_FILE
    from export.onnx_runtime import OnnxTranslator, session_options
    from export.text import encode_text

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        raise Skipped("this onnxruntime has no CUDAExecutionProvider (the CPU package; "
                      "constraints-gpu.txt says how to swap in onnxruntime-gpu)")
    onnxruntime.preload_dlls()  # CUDA and cuDNN from the nvidia-* wheels
    paths = RunPaths(config.run_path)
    session = onnxruntime.InferenceSession(
        str(paths.onnx / MODEL_FILE), session_options(),
        providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    if session.get_providers()[0] != "CUDAExecutionProvider":
        raise CheckFailed(f"CUDAExecutionProvider did not load (providers: "
                          f"{session.get_providers()}): CUDA or cuDNN libraries of another "
                          f"major version than this onnxruntime-gpu's, or none")
    source = encode_text(tf.constant(lines), paths.spm_model.read_bytes(),
                         config.data.max_length).numpy()  # [batch, time]
    start = time.perf_counter()
    (target,) = session.run(["target_ids"], {"source_ids": source})
    seconds = time.perf_counter() - start
    on_cpu = OnnxTranslator(paths.onnx).translate_ids(source)["target_ids"]
    same = sum(a == b for a, b in zip(_sentences(target), _sentences(on_cpu), strict=True))
    return (f"{len(lines)} sentences in {seconds:.1f} s (one batch); {same} of {len(lines)} "
            f"identical to the CPU provider's")


def _sentences(target_ids: np.ndarray) -> list[tuple[int, ...]]:
    """Each row of target ids [batch, time] without its trailing padding (id 0)."""
    return [tuple(np.trim_zeros(row, "b").tolist()) for row in target_ids]


def run_checks(work: Path, devices: list[str], steps: int, sentences: int) -> list[str]:
    """The checks after doctor's, on TensorFlow's logical GPU devices; the failed ones."""
    from pipelines.corpus.prepare import prepare

    checks = Checks()
    if not checks.run("prepare", lambda: prepare(check_config(work, PREPARED, 1)).format()):
        return checks.failed
    trained = [index for index, device in enumerate(devices)
               if checks.run(f"train GPU:{index}",
                             lambda: train_check(work, f"gpu{index}", [device], steps))]
    if len(devices) > 1:
        checks.run(f"train on all {len(devices)} GPUs",
                   lambda: train_check(work, "all-gpus", devices, steps))
    if not trained:
        return checks.failed
    config = check_config(work, f"gpu{trained[0]}", steps)
    if not checks.run("export", lambda: export_check(config)):
        return checks.failed
    test_sources = RunPaths(config.run_path).split("test")[0]
    lines = test_sources.read_text(encoding="utf-8").splitlines()[:sentences]
    checks.run("saved_model", lambda: saved_model_check(config, lines, f"GPU:{trained[0]}"))
    checks.run("onnx cuda", lambda: onnx_cuda_check(config, lines))
    return checks.failed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="updates per training run")
    parser.add_argument("--sentences", type=int, default=200,
                        help="test sentences beam-searched through each export")
    parser.add_argument("--work", type=Path,
                        help="a new directory to keep the runs in (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.steps < 2 * LOSS_WINDOW:
        parser.error(f"--steps {args.steps}: at least {2 * LOSS_WINDOW}, to compare the loss of "
                     f"the first and last {LOSS_WINDOW} updates")
    if args.work and args.work.exists():
        parser.error(f"--work {args.work}: exists; name a new directory")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")  # leaves memory to ONNX Runtime
    import_tensorflow_quietly()
    import tensorflow as tf

    if not gpu.visible_gpus():
        warning = gpu.unused_driver_warning()
        print(f"FAIL gpus: {warning}" if warning else
              "gpu-check: TensorFlow lists no GPU and there is no NVIDIA driver: nothing to check")
        return 1 if warning else 0
    report = diagnose()
    print(report.format(), flush=True)
    if not Checks().run("doctor", lambda: _usable(report)):
        return 1
    devices = [device.name for device in tf.config.list_logical_devices("GPU")]
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        work = args.work or Path(scratch) / "runs"
        work.mkdir(parents=True)
        failed = run_checks(work, devices, args.steps, args.sentences)
    print(f"gpu-check: {len(failed)} check(s) failed: {', '.join(failed)}" if failed else
          "gpu-check: every check passed or was skipped")
    return 1 if failed else 0


def _usable(report: Report) -> str:
    if report.status:
        raise CheckFailed(report.problems[0])
    return f"usable, {len(report.warnings)} warning(s)"


if __name__ == "__main__":
    sys.exit(main())
