"""The budget's plan: the configured recipe compressed to the steps that fit; a budgeted run
on a scripted clock (every rule, exactly) and one short run on the real clock (the wiring)."""
from __future__ import annotations

import dataclasses
import time
import typing
from pathlib import Path

import numpy as np
import pytest

from keras_transformer.schedules import TransformerSchedule
from pipelines.config import PipelineConfig, load_config
from pipelines.training.budget import PLANNED_SHARE, Recipe, TrainingClock, steps_that_fit
from pipelines.checkpoints.files import checkpoint_step, training_checkpoints
from pipelines.config.train import TrainConfig
from pipelines.paths import RunPaths
from pipelines.training.train import TrainingRun
from tiny_run import make_tiny_run


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


class ScriptedTime:
    """`time` for the train stage's modules, whose `monotonic()` moves only with the updates:
    the first update of each invocation takes `compile_seconds` (it compiles), every later
    one `update_seconds`. Set-up, validation and saving take no time."""

    def __init__(self, compile_seconds: float = 10.0, update_seconds: float = 1.0) -> None:
        self.now = 1000.0
        self.compile_seconds, self.update_seconds = compile_seconds, update_seconds

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> typing.Any:  # the rest of the time module
        return getattr(time, name)

    def timed_run(self, config: PipelineConfig) -> TrainingRun:
        """A TrainingRun of `config` whose updates advance this clock."""
        run = TrainingRun(config)
        step, first = run.trainer.train_step, [True]

        def scripted_step(batches: tuple) -> tuple:
            self.now += self.compile_seconds if first[0] else self.update_seconds
            first[0] = False
            return step(batches)

        run.trainer.train_step = scripted_step
        return run


@pytest.fixture
def scripted_time(monkeypatch: pytest.MonkeyPatch) -> ScriptedTime:
    from pipelines.training import budget, checkpoints, train

    scripted = ScriptedTime()
    for module in (budget, checkpoints, train):
        monkeypatch.setattr(module, "time", scripted)
    return scripted


@pytest.mark.slow
def test_a_budget_ends_training_with_a_checkpoint_and_a_resumed_run_keeps_its_clock(
        tmp_path: Path, scripted_time: ScriptedTime, capsys: pytest.CaptureFixture) -> None:
    config = load_config(make_tiny_run(tmp_path, train={
        "steps": 100_000, "warmup_steps": 4000, "max_minutes": 1.0,
        "checkpoint_every_steps": 20_000}))  # every 10 steps once compressed
    summary = scripted_time.timed_run(config).run()
    # 10 s for the first update, then 1 s each: at update 3 (12 s) the calibration's 5% is
    # spent and the plan fits 95% of the 48 s left at 1 s/update: 48 steps. The recipe is
    # compressed by that first plan's r: warm-up x r, learning rate x sqrt(r).
    first_plan = 3 + int(PLANNED_SHARE * 48)
    assert f"budget: 1 min fit about {first_plan} of 100,000 steps at 1.00 s/update" in \
        capsys.readouterr().out
    assert summary.warmup_steps == round(4000 * first_plan / 100_000) < summary.step
    assert summary.learning_rate_scale == pytest.approx((first_plan / 100_000) ** 0.5)
    # Replanned at each checkpoint from the time per step (at step 40, 11 s left fit 10 more);
    # step 50 ends at 59 s, with 1 s left: too little for another update.
    assert (summary.ended_by, summary.planned_steps, summary.step) == ("budget", 50, 50)
    assert summary.seconds == 59.0
    assert checkpoint_step(training_checkpoints(RunPaths(config.run_path))[-1]) == summary.step
    # The run goes on from the budget's last checkpoint: average and evaluate (which restores
    # the averaged checkpoint as export does).
    from pipelines.average import average
    from pipelines.evaluate import evaluate

    averaged = average(config)
    assert checkpoint_step(averaged.checkpoints[-1]) == summary.step
    greedy = dataclasses.replace(config, evaluate=dataclasses.replace(
        config.evaluate, beam_size=1, extra_length=5))  # a short decode of every dev line
    assert evaluate(greedy, split="dev").sentences == 40
    # Resuming with the 1 s left, which cannot fit the first update (it compiles again: 10 s
    # last time), does no update and keeps the clock and the plan.
    again = scripted_time.timed_run(config).run()
    assert "the 1 s left of the 1-minute budget cannot fit the first update, which compiles " \
        "(10 s last time)" in capsys.readouterr().out
    assert again.start_step == again.step == summary.step and again.ended_by == "budget"
    assert again.seconds == summary.seconds and again.planned_steps == summary.planned_steps
    # Half a minute more: training goes on from the checkpoint, with the time spent counted,
    # and plans anew for the new budget.
    longer = dataclasses.replace(config, train=dataclasses.replace(config.train,
                                                                   max_minutes=1.5))
    resumed = scripted_time.timed_run(longer).run()
    # The first update ends at 69 s; at 71 s (update 53) the new plan fits 95% of the 19 s
    # left: 71 steps, the last ending at 89 s.
    assert resumed.start_step == summary.step and resumed.ended_by == "budget"
    assert (resumed.planned_steps, resumed.step, resumed.seconds) == (71, 71, 89.0)


@pytest.mark.slow
def test_a_budget_on_the_real_clock_ends_training_with_a_checkpoint(tmp_path: Path) -> None:
    config = load_config(make_tiny_run(tmp_path, train={
        "steps": 100_000, "warmup_steps": 4000, "max_minutes": 0.1,
        "checkpoint_every_steps": 1000}))
    # 6 s, short: the rules are the scripted clock's test; this is the wiring to the real
    # clock. The set-up counts (3 s on an AVX2 CPU running the suite) and the first update
    # compiles (10-20 s there), so the budget may end training after that update.
    summary = TrainingRun(config).run()
    assert summary.ended_by == "budget" and 0 < summary.step < 100_000
    assert summary.seconds <= 6 + 20  # the last update may overrun by its own length
    assert checkpoint_step(training_checkpoints(RunPaths(config.run_path))[-1]) == summary.step
