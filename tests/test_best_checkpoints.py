"""The best validations' checkpoints (train.keep_best) and early stopping
(train.early_stopping): bookkeeping on scripted metric sequences, and a tiny run that stops."""
import dataclasses
import json
from pathlib import Path

import pytest

from keras_transformer.config import ModelConfig
from keras_transformer.model import Transformer
from pipelines import InputError
from pipelines.checkpoints.best import kept_checkpoints
from pipelines.checkpoints.weights import restore_model, weights_checkpoint
from pipelines.config import EarlyStopping, load_config
from pipelines.paths import RunPaths
from pipelines.training.best_checkpoints import BestCheckpoints
from tiny_run import make_tiny_run


@pytest.fixture(scope="module")
def model() -> Transformer:
    model = Transformer(ModelConfig.from_preset("tiny", vocab_size=100))
    model.build()
    return model


def replay(paths: RunPaths, model: Transformer, values: list[float], **stopping) -> list:
    """Adds values at steps 1, 2, ...; returns each step's stop reason."""
    best = BestCheckpoints(paths, 2, EarlyStopping(**stopping))
    return [best.add(step, value, model) for step, value in enumerate(values, start=1)]


def test_the_best_are_kept_and_patience_counts_validations_without_improvement(
        tmp_path: Path, model: Transformer) -> None:
    paths = RunPaths(tmp_path)
    reasons = replay(paths, model, [5.0, 4.0, 4.5, 3.9, 3.95, 3.92], metric="dev_loss",
                     patience=2, min_delta=0.05)
    # 3.92 is within min_delta of 3.9: the second validation without improvement.
    assert reasons[:5] == [None] * 5
    assert reasons[5] == ("early stopping: dev loss has not improved on 3.9000 (step 4) by "
                          "more than 0.05 in 2 validations")
    record = json.loads(paths.best_record.read_text())
    assert record["kept"] == [4, 6] and record["history"][2] == [3, 4.5]
    assert sorted(path.name for path in paths.best.iterdir()) == ["best.json", "ckpt-4",
                                                                  "ckpt-6"]
    assert kept_checkpoints(paths) == [str(paths.best / "ckpt-4" / "ckpt"),
                                       str(paths.best / "ckpt-6" / "ckpt")]
    assert json.loads((paths.best / "ckpt-4" / "ckpt-4.json").read_text()) == {
        "step": 4, "metric": "dev_loss", "value": 3.9}
    assert weights_checkpoint(paths, "best") == str(paths.best / "ckpt-4" / "ckpt")
    restore_model(model, weights_checkpoint(paths, "best"))  # a complete model checkpoint


def test_bleu_ranks_higher_first_and_a_resumed_run_keeps_the_history(
        tmp_path: Path, model: Transformer) -> None:
    paths = RunPaths(tmp_path)
    replay(paths, model, [10.0, 12.0, 11.0], metric="dev_bleu", patience=3)
    assert json.loads(paths.best_record.read_text())["kept"] == [2, 3]
    # Resumed from step 2's checkpoint: step 3 is validated again, with another value (kept
    # once, whatever the number kept).
    assert BestCheckpoints(paths, 3, EarlyStopping(metric="dev_bleu")).add(3, 11.0, model) is None
    assert json.loads(paths.best_record.read_text())["kept"] == [2, 3]
    best = BestCheckpoints(paths, 2, EarlyStopping(metric="dev_bleu", patience=2))
    assert best.add(3, 9.0, model) is None
    assert best.add(4, 11.5, model) == ("early stopping: dev bleu has not improved on 12.0000 "
                                        "(step 2) by more than 0 in 2 validations")
    record = json.loads(paths.best_record.read_text())
    assert record["history"] == [[1, 10.0], [2, 12.0], [3, 9.0], [4, 11.5]]
    assert record["kept"] == [2, 4] and not (paths.best / "ckpt-3").exists()


def test_without_kept_checkpoints_best_weights_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no best checkpoint kept; train with train.keep_best"):
        weights_checkpoint(RunPaths(tmp_path), "best")


@pytest.mark.slow
def test_a_run_stops_early_keeps_its_best_and_averages_them(tmp_path: Path) -> None:
    from pipelines.average import average
    from pipelines.models import load_model_for_inference
    from pipelines.training.train import TrainingRun

    # No dev loss can improve by 100: validations at steps 2, 4 and 6, the third stops.
    config = load_config(make_tiny_run(tmp_path, train={
        "steps": 20, "validate_every_steps": 2, "keep_best": 2,
        "early_stopping": {"metric": "dev_loss", "patience": 2, "min_delta": 100}}))
    summary = TrainingRun(config).run()
    assert summary.step == 6 and summary.ended_by == "early_stopping"
    assert summary.stop_reason.startswith("early stopping: dev loss has not improved on ")
    assert summary.stop_reason.endswith("(step 2) by more than 100 in 2 validations")
    assert summary.checkpoint.endswith("ckpt-6") and "stopped   early stopping" in \
        summary.format()
    paths = RunPaths(config.run_path)
    assert len(kept_checkpoints(paths)) == 2
    best = dataclasses.replace(config, evaluate=dataclasses.replace(config.evaluate,
                                                                    weights="best"))
    _, checkpoint = load_model_for_inference(best)
    assert checkpoint == kept_checkpoints(paths)[0]
    from_best = dataclasses.replace(config, train=dataclasses.replace(
        config.train, average_from="best", average_last=2))
    averaged = average(from_best)
    assert sorted(averaged.checkpoints) == sorted(kept_checkpoints(paths))
