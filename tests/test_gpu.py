"""pipelines/gpu.py and the CLI's warning: a driver without a GPU in TensorFlow is never silent."""
import sys
import types

import pytest

from gpu_helpers import fake_driver, fake_gpus
from pipelines import gpu
from pipelines.cli import main

T4 = {"device_name": "Tesla T4", "compute_capability": (7, 5)}


@pytest.fixture
def driver_without_gpu(monkeypatch, tmp_path):
    fake_driver(monkeypatch, tmp_path, present=True)
    fake_gpus(monkeypatch, [])


def test_a_driver_file_or_nvidia_smi_counts_as_a_driver(monkeypatch, tmp_path):
    fake_driver(monkeypatch, tmp_path, present=False)
    assert not gpu.nvidia_driver_present()
    (tmp_path / "bin" / "nvidia-smi").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "nvidia-smi").chmod(0o755)
    assert gpu.nvidia_driver_present()
    fake_driver(monkeypatch, tmp_path, present=True)
    assert gpu.nvidia_driver_present()


def test_the_warning_needs_a_driver_and_no_gpu(monkeypatch, tmp_path):
    fake_driver(monkeypatch, tmp_path, present=False)
    fake_gpus(monkeypatch, [])
    assert gpu.unused_driver_warning() is None
    fake_driver(monkeypatch, tmp_path, present=True)
    assert "run `make setup GPU=1`" in gpu.unused_driver_warning()
    fake_gpus(monkeypatch, [T4])
    assert gpu.unused_driver_warning() is None
    assert gpu.visible_gpus() == [gpu.Gpu("/physical_device:GPU:0", "Tesla T4", (7, 5))]


@pytest.mark.slow
def test_nvidia_smi_memory_by_name_leaves_out_names_that_differ(monkeypatch, tmp_path):
    fake_driver(monkeypatch, tmp_path, present=True)
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf 'Tesla T4, 15360 MiB\\nNVIDIA A100-SXM4-40GB, 40960 MiB\\n"
                   "NVIDIA A100-SXM4-40GB, 40960 MiB\\nNVIDIA L4, 23034 MiB\\n"
                   "NVIDIA L4, 22000 MiB\\n'\n")
    smi.chmod(0o755)
    assert gpu.nvidia_smi_memory() == {"Tesla T4": "15360 MiB",
                                       "NVIDIA A100-SXM4-40GB": "40960 MiB"}
    smi.write_text("#!/bin/sh\nexit 9\n")
    assert gpu.nvidia_smi_memory() == {}


def _warning(command: str, doing: str) -> str:
    return (f"keras-transformer {command}: warning: {gpu.unused_driver_warning()}; {doing} on "
            f"the CPU\n")


@pytest.fixture
def stages_faked(monkeypatch, tmp_path):
    """`keras-transformer run demo` in tmp_path, its stages and report faked."""
    import pipelines.run

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(pipelines.run, "run", lambda config, **stages: [])
    monkeypatch.setattr(pipelines.run, "report", lambda config: "report")


def test_run_warns_in_one_line(driver_without_gpu, stages_faked, capsys):
    assert main(["run", "demo"]) == 0
    assert capsys.readouterr() == ("report\n", _warning("run", "running"))


def test_train_warns_in_one_line(driver_without_gpu, monkeypatch, capsys):
    summary = types.SimpleNamespace(format=lambda: "trained")
    fake = types.SimpleNamespace(train=lambda config: summary, TrainingDiverged=RuntimeError,
                                 NothingToTrain=LookupError)
    monkeypatch.setitem(sys.modules, "pipelines.training.train", fake)
    assert main(["train", "demo"]) == 0
    assert capsys.readouterr() == ("trained\n", _warning("train", "training"))


def test_translate_warns_in_one_line(driver_without_gpu, monkeypatch, tmp_path, capsysbinary):
    import export.loading
    from pipelines import translate_command
    from pipelines.translate_stream import LineNotes

    (tmp_path / "saved_model.pb").write_bytes(b"")
    (tmp_path / "lines.txt").write_text("bird\n")
    translator = types.SimpleNamespace(
        translate_lines=lambda lines, batch_size, target_lang: [s.upper() for s in lines])
    monkeypatch.setattr(export.loading, "open_translator", lambda *args: translator)
    # These read the export's files.
    monkeypatch.setattr(translate_command, "_noting_cut_lines",
                        lambda translate, *args: (LineNotes(""), translate))
    monkeypatch.setattr(translate_command, "check_target_lang", lambda *args: None)
    assert main(["translate", str(tmp_path), str(tmp_path / "lines.txt")]) == 0
    output = capsysbinary.readouterr()
    assert (output.out, output.err.decode()) == (b"BIRD\n", _warning("translate", "translating"))


def test_no_driver_no_warning(stages_faked, monkeypatch, tmp_path, capsys):
    fake_driver(monkeypatch, tmp_path, present=False)
    assert main(["run", "demo"]) == 0
    assert capsys.readouterr().err == ""
