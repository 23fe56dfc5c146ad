"""The moving average of the weights (train.ema_decay): its decay rule, its update, and a tiny
run that saves it in checkpoints and checkpoints/ema, resumes it and decodes with it."""
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from pipelines import InputError
from pipelines.config import load_config
from pipelines.paths import RunPaths
from pipelines.training.weight_average import WeightAverage
from tiny_run import make_tiny_run


class Weights:
    """Stands in for Keras variables: `.value` is the tf.Variable."""

    def __init__(self, *values: float) -> None:
        self.value = tf.Variable(np.array(values, np.float32))


@pytest.mark.parametrize("compression, updates, expected", [
    (1.0, 0, 1 / 10),    # tf.train.ExponentialMovingAverage's warm-up: (1 + n) / (10 + n)
    (1.0, 1, 2 / 11),
    (1.0, 10_000, 0.9),  # then the configured decay
    (0.5, 10_000, 0.8),  # a recipe compressed to half: half the horizon 1 / (1 - decay)
])
def test_the_decay_warms_up_and_follows_the_compressed_recipe(
        compression: float, updates: int, expected: float) -> None:
    average = WeightAverage([Weights(0.0)], 0.9, lambda: tf.constant(compression))
    assert float(average.current_decay(tf.constant(updates))) == pytest.approx(expected)


def test_an_update_moves_the_shadow_unless_it_was_skipped() -> None:
    weights = Weights(1.0, 2.0)
    average = WeightAverage([weights], 0.9)
    weights.value.assign([3.0, 6.0])
    average.update([weights], tf.constant(10_000), tf.constant(True))
    np.testing.assert_allclose(average.shadows[0].numpy(), [0.9 * 1 + 0.1 * 3, 0.9 * 2 + 0.1 * 6])
    before = average.shadows[0].numpy()
    weights.value.assign([100.0, 100.0])
    average.update([weights], tf.constant(10_001), tf.constant(False))  # loss scaling skipped it
    np.testing.assert_array_equal(average.shadows[0].numpy(), before)
    average.reset([weights])
    np.testing.assert_array_equal(average.shadows[0].numpy(), [100.0, 100.0])


@pytest.mark.slow
def test_a_run_saves_resumes_and_decodes_with_its_moving_average(tmp_path: Path) -> None:
    from pipelines.models import load_model_for_inference
    from pipelines.training.train import TrainingRun

    config = load_config(make_tiny_run(tmp_path, train={
        "steps": 4, "checkpoint_every_steps": 2, "ema_decay": 0.5}))
    paths = RunPaths(config.run_path)
    with pytest.raises(InputError, match="no moving average of the weights; train with "
                                         "train.ema_decay"):
        load_model_for_inference(dataclasses.replace(config, evaluate=dataclasses.replace(
            config.evaluate, weights="ema")))
    run = TrainingRun(config)
    run.run()
    shadows = [shadow.numpy() for shadow in run.trainer.weight_average.shadows]
    weights = [variable.numpy() for variable in run.trainer.model.trainable_variables]
    assert not all(np.array_equal(s, w) for s, w in zip(shadows, weights))
    assert json.loads((paths.ema.parent / "ema.json").read_text()) == {"step": 4, "decay": 0.5}
    assert json.loads((paths.ema.parent / "model.json").read_text())["d_model"] == 64
    # evaluate.weights: ema decodes with the shadows; the default with the latest weights.
    ema_config = dataclasses.replace(config, evaluate=dataclasses.replace(config.evaluate,
                                                                          weights="ema"))
    model, checkpoint = load_model_for_inference(ema_config)
    assert checkpoint == str(paths.ema)
    for restored, shadow in zip(model.trainable_variables, shadows):
        np.testing.assert_array_equal(restored.numpy(), shadow)
    model, checkpoint = load_model_for_inference(config)
    assert checkpoint.endswith("ckpt-4")
    np.testing.assert_array_equal(model.trainable_variables[0].numpy(), weights[0])
    # A resumed run restores the average from the training checkpoint, not from its weights.
    longer = dataclasses.replace(config, train=dataclasses.replace(config.train, steps=5))
    resumed = TrainingRun(longer)
    for restored, shadow in zip(resumed.trainer.weight_average.shadows, shadows):
        np.testing.assert_array_equal(restored.numpy(), shadow)
