"""Fine-tuning (`train.init_from`) through the CLI: the child copies its parent's vocabulary,
starts from its weights with a fresh optimizer, records it, and bad parents are refused before
any work."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import yaml

from pipelines.checkpoints.files import training_checkpoints
from pipelines.cli import main
from pipelines.paths import RunPaths
from tiny_run import ONE_LAYER_A_SIDE, WORDS, copy_run


@pytest.fixture
def parent(trained_tiny_run: Path) -> Path:
    """A tiny run trained 20 steps: its run directory (conftest's, shared: only read here)."""
    return trained_tiny_run / "run"


def child_config(directory: Path, init_from: Path | str | None, *, model: dict | None = None,
                 train: dict | None = None) -> Path:
    """A config fine-tuning on 60 new pairs of the parent's task (10 held out for dev, 10 for
    test), 1 step at a learning rate too small to move the weights by 1e-5; the parent's
    architecture (the tiny preset, one layer a side)."""
    rng = random.Random(1)
    pairs = [rng.choices(WORDS, k=rng.randint(2, 12)) for _ in range(60)]
    (directory / "domain.src").write_text("".join(" ".join(words) + "\n" for words in pairs))
    (directory / "domain.tgt").write_text(
        "".join(" ".join(reversed(words)).upper() + "\n" for words in pairs))
    config = {
        "name": "child", "run_dir": str(directory / "child"),
        "data": {"source": "files", "train": {"src": "domain.src", "tgt": "domain.tgt"},
                 "holdout": 10, "vocab_size": 300, "max_length": 40},
        "model": {"preset": "tiny", **ONE_LAYER_A_SIDE, "dropout": 0.0, "dtype": "float32",
                  **(model or {})},
        "train": {"batch_tokens": 320, "steps": 1, "warmup_steps": 1, "learning_rate_scale": 1e-6,
                  "checkpoint_every_steps": 1, "validate_every_steps": 0, "bleu_every_steps": 0,
                  "average_last": 1, **({"init_from": str(init_from)} if init_from else {}),
                  **(train or {})},
    }
    path = directory / "child.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def weights(prefix: str) -> dict[str, np.ndarray]:
    """The model variables of a checkpoint, by name."""
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.startswith("model/")}


def test_a_child_copies_the_vocabulary_starts_from_the_weights_and_records_its_parent(
        parent: Path, tmp_path: Path, capsys) -> None:
    config = child_config(tmp_path, parent)
    assert main(["prepare", str(config)]) == 0
    assert f"copied from the parent's {parent / 'vocab' / 'spm.model'}" in capsys.readouterr().out
    child = RunPaths(tmp_path / "child")
    assert child.spm_model.read_bytes() == RunPaths(parent).spm_model.read_bytes()

    assert main(["run", str(config), "--only", "train"]) == 0
    parent_checkpoint = training_checkpoints(RunPaths(parent))[-1]  # no averaged one
    assert f"parent    {Path(parent_checkpoint).resolve()}" in capsys.readouterr().out
    summary = json.loads(child.train_summary.read_text())
    assert (summary["init_from"], summary["start_step"], summary["step"]) == (
        str(Path(parent_checkpoint).resolve()), 0, 1)  # a fresh optimizer: step 1, not 21
    start, tuned = weights(parent_checkpoint), weights(training_checkpoints(child)[-1])
    assert start.keys() == tuned.keys()
    for name, value in start.items():
        np.testing.assert_allclose(tuned[name], value, atol=1e-5, err_msg=name)

    config.write_text(config.read_text().replace("steps: 1\n", "steps: 2\n"))
    assert main(["train", str(config)]) == 0
    out = capsys.readouterr().out
    assert "resumed at step 1" in out and f"parent    {Path(parent_checkpoint).resolve()}" in out


def test_bad_parents_are_refused_before_any_work(parent: Path, tmp_path: Path, capsys) -> None:
    checkpoint = training_checkpoints(RunPaths(parent))[-1]
    cases = [
        (tmp_path / "nowhere", "prepare",
         f"train.init_from: {tmp_path / 'nowhere'}: no such run directory or checkpoint"),
        (tmp_path, "prepare", f"train.init_from: {tmp_path}: not a run directory"),
        (parent, "prepare", f"train.init_from: {checkpoint} was trained with d_model 64; the "
                            f"config says d_model 32: a fine-tuning run keeps its parent's "
                            f"architecture"),
        (checkpoint, "prepare", f"train.init_from: {checkpoint} was trained with d_model 64; the "
                                f"config says d_model 32"),
    ]
    for init_from, command, message in cases:
        config = child_config(tmp_path, init_from, model={"d_model": 32}
                              if "d_model" in message else None)
        assert main([command, str(config)]) == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / "child").exists()


def test_data_prepared_with_another_vocabulary_or_a_run_from_scratch_is_refused(
        parent: Path, trained_tiny_run: Path, tmp_path: Path, capsys) -> None:
    assert main(["prepare", str(child_config(tmp_path, None))]) == 0  # its own vocabulary
    assert main(["train", str(child_config(tmp_path, parent))]) == 2
    assert (f"train.init_from: {tmp_path / 'child' / 'vocab' / 'spm.model'} is not the parent's "
            f"vocabulary ({parent / 'vocab' / 'spm.model'})") in capsys.readouterr().err
    assert not (tmp_path / "child" / "checkpoints" / "checkpoint").exists()

    # A run trained from scratch: a copy of the parent's own 20 steps, fine-tuned from it.
    config, scratch = copy_run(trained_tiny_run, tmp_path / "scratch")
    text = yaml.safe_load(config.read_text())
    text["train"]["init_from"] = str(parent)
    config.write_text(yaml.safe_dump(text))
    assert main(["train", str(config)]) == 2
    assert (f"train.init_from: {parent}: {scratch.checkpoints} holds a run trained from scratch "
            f"(step 20)") in capsys.readouterr().err
