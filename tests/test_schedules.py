import math

import numpy as np
import pytest

from keras_transformer.schedules import TransformerSchedule, paper_optimizer


def paper_rate(step_num, d_model=512, warmup=4000):
    return d_model ** -0.5 * min(step_num ** -0.5, step_num * warmup ** -1.5)


@pytest.mark.parametrize("iteration", [0, 1, 99, 3999, 4000, 100_000])
def test_schedule_is_eq_3(iteration):
    schedule = TransformerSchedule(512, warmup_steps=4000)
    np.testing.assert_allclose(float(schedule(iteration)), paper_rate(iteration + 1), rtol=1e-6)


def test_schedule_peaks_at_warmup():
    schedule = TransformerSchedule(512)
    peak = float(schedule(3999))  # step_num 4000
    assert math.isclose(peak, 512 ** -0.5 * 4000 ** -0.5, rel_tol=1e-6)  # about 7.0e-4
    assert float(schedule(3000)) < peak and float(schedule(8000)) < peak


def test_schedule_round_trips_and_rejects_bad_warmup():
    schedule = TransformerSchedule(256, warmup_steps=100, scale=2.0)
    assert TransformerSchedule(**schedule.get_config()).get_config() == schedule.get_config()
    with pytest.raises(ValueError, match="warmup_steps"):
        TransformerSchedule(256, warmup_steps=0)


def test_paper_optimizer_uses_adam_settings():
    optimizer = paper_optimizer(512)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    np.testing.assert_allclose(float(optimizer.learning_rate), paper_rate(1), rtol=1e-6)
