"""Checkpoint averaging: the element-wise mean of the last N checkpoints, written whole."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pipelines import InputError
from pipelines.average import average
from pipelines.checkpoints.weights import model_checkpoint, restore_model
from pipelines.config import load_config
from pipelines.models import build_model
from pipelines.paths import RunPaths
from pipelines.training.checkpoints import make_manager
from tiny_run import make_tiny_run


@pytest.fixture()
def config(tmp_path: Path):
    return load_config(make_tiny_run(tmp_path))


def _float_weights(model) -> list[np.ndarray]:
    return [v.numpy() for v in model.weights if "float" in str(v.dtype)]


def _save_random_checkpoints(config, steps: list[int]) -> list[list[np.ndarray]]:
    """Saves checkpoints of random weights (and an optimizer, as training does) at `steps`."""
    from keras_transformer.schedules import paper_optimizer

    model = build_model(config, _vocab_size(config))
    optimizer = paper_optimizer(model.model_config.d_model)
    optimizer.build(model.trainable_variables)
    manager = make_manager(model_checkpoint(model, optimizer=optimizer),
                           RunPaths(config.run_path).checkpoints, keep=5)
    rng = np.random.default_rng(0)
    saved = []
    for step in steps:
        for variable in model.weights:
            variable.assign(rng.normal(size=variable.shape).astype(np.float32))
        optimizer.iterations.assign(step)
        manager.save(checkpoint_number=step)
        saved.append(_float_weights(model))
    return saved


def _vocab_size(config) -> int:
    from keras_transformer.tokenizer import Tokenizer

    return Tokenizer.from_file(config.run_path / "vocab" / "spm.model").vocab_size


def test_average_is_the_elementwise_mean_of_the_last_n(config) -> None:
    saved = _save_random_checkpoints(config, [10, 20, 30, 40])
    summary = average(config, last=3)
    assert [Path(p).name for p in summary.checkpoints] == ["ckpt-20", "ckpt-30", "ckpt-40"]
    assert summary.path == RunPaths(config.run_path).averaged
    model = build_model(config, _vocab_size(config))
    restore_model(model, summary.path)
    for restored, *values in zip(_float_weights(model), *saved[1:]):
        np.testing.assert_allclose(restored, np.mean(values, axis=0), rtol=1e-6, atol=1e-6)
    assert not np.allclose(_float_weights(model)[0], saved[-1][0])
    listing = json.loads((summary.path.parent / "averaged.json").read_text())
    assert listing["steps"] == [20, 30, 40]

    # A rerun replaces the averaged checkpoint whole, leaving no temporary directory.
    average(config, last=2)
    restore_model(model, summary.path)
    np.testing.assert_allclose(_float_weights(model)[0], (saved[2][0] + saved[3][0]) / 2,
                               rtol=1e-6, atol=1e-6)
    assert sorted(p.name for p in RunPaths(config.run_path).checkpoints.iterdir() if p.is_dir()) \
        == ["averaged"]


def test_average_takes_what_is_kept_and_needs_a_checkpoint(config) -> None:
    with pytest.raises(InputError, match="no checkpoints"):
        average(config)
    _save_random_checkpoints(config, [5])
    summary = average(config, last=3)
    assert len(summary.checkpoints) == 1 and "of 3 requested" in summary.format()
