"""The budget's plan: the configured recipe compressed to the steps that fit."""
import numpy as np

from keras_transformer.schedules import TransformerSchedule
from pipelines.training.budget import PLANNED_SHARE, Recipe, TrainingClock, steps_that_fit
from pipelines.config.train import TrainConfig


def test_compress_scales_every_length_and_keeps_off_intervals_off():
    train = TrainConfig(steps=2000, warmup_steps=1000, checkpoint_every_steps=200,
                        validate_every_steps=400, bleu_every_steps=0)
    recipe = Recipe.compress(train, 500)
    assert recipe == Recipe(steps=500, warmup_steps=250, learning_rate_scale=0.5,
                            checkpoint_every_steps=50, validate_every_steps=100,
                            bleu_every_steps=0)
    # Warm-up ends at the configured fraction of the run, and the run is never left in it.
    assert recipe.warmup_steps / recipe.steps == train.warmup_steps / train.steps


def test_the_compressed_schedule_is_the_configured_curve_in_fewer_steps():
    train = TrainConfig(steps=2000, warmup_steps=1000, learning_rate_scale=2.0)
    recipe = Recipe.compress(train, 250)  # r = 1/8
    configured = TransformerSchedule(256, train.warmup_steps, train.learning_rate_scale)
    compressed = TransformerSchedule(256, recipe.warmup_steps, recipe.learning_rate_scale)
    for step in (10, 125, 200, 249):  # iteration i applies step_num i + 1
        np.testing.assert_allclose(float(compressed(step - 1)), float(configured(8 * step - 1)),
                                   rtol=1e-5)


def test_compress_never_lengthens_the_recipe_nor_reaches_zero():
    train = TrainConfig(steps=2000, warmup_steps=1000, checkpoint_every_steps=200)
    assert Recipe.compress(train, 5000) == Recipe.compress(train, 2000)
    assert Recipe.compress(train, 2000).steps == 2000
    tiny = Recipe.compress(train, 3)
    assert tiny.steps == 3 and tiny.warmup_steps == 2 and tiny.checkpoint_every_steps == 1


def test_steps_that_fit_spend_the_planned_share_of_the_time_left():
    assert steps_that_fit(10, seconds_left=1000.0, seconds_per_update=2.0) == \
        10 + int(PLANNED_SHARE * 500)
    assert steps_that_fit(10, seconds_left=1.0, seconds_per_update=2.0) == 11  # at least one


def test_a_resumed_run_starts_only_when_its_first_update_fits_the_budget_left():
    clock = TrainingClock(TrainConfig(max_minutes=1.0))
    clock.seconds.assign(40.0)  # spent up to the checkpoint
    clock.first_update_seconds.assign(30.0)  # the last invocation's, compilation included
    clock.restored()
    assert clock.first_update_problem() == (
        "the 20 s left of the 1-minute budget cannot fit the first update, which compiles "
        "(30 s last time)")
    clock.first_update_seconds.assign(15.0)
    assert clock.first_update_problem() is None
    clock.seconds.assign(60.0)
    clock.restored()
    assert clock.first_update_problem() == "the 1-minute budget is spent"
    # Without a budget, or before any update was timed, nothing stops the first update.
    assert TrainingClock(TrainConfig(max_minutes=0)).first_update_problem() is None
    assert TrainingClock(TrainConfig(max_minutes=1.0)).first_update_problem() is None
