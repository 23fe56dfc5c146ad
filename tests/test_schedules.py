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


@pytest.mark.parametrize("sparse", [False, True])
def test_the_fused_adam_update_is_keras_adams(sparse):
    """Three updates of two variables under a MirroredStrategy, in a tf.function (as the train
    step applies them): FusedAdam's fused kernel, or Keras's update for a sparse gradient,
    moves them as Keras's Adam does."""
    import keras
    import tensorflow as tf

    from keras_transformer.schedules import FusedAdam

    rng = np.random.default_rng(0)
    initial = [rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=3).astype(np.float32)]
    grads = [[rng.normal(size=w.shape).astype(np.float32) for w in initial] for _ in range(3)]
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    results = []
    for kind in (FusedAdam, keras.optimizers.Adam):
        with strategy.scope():
            variables = [keras.Variable(w) for w in initial]
            optimizer = kind(1e-2, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
            optimizer.build(variables)

        @tf.function(autograph=False)
        def apply(step_grads):
            def replica(step_grads):
                first, second = (tf.identity(g) for g in step_grads)  # on the replica's device
                if sparse:
                    first = tf.IndexedSlices(first, tf.range(4), tf.constant([4, 3]))
                optimizer.apply_gradients(zip([first, second], variables))
            strategy.run(replica, args=(step_grads,))

        for step_grads in grads:
            apply([tf.constant(g) for g in step_grads])
        graph = apply.get_concrete_function([tf.constant(g) for g in grads[0]]).graph
        fused = {op.type for op in graph.get_operations()} & {"ResourceApplyAdam"}
        assert bool(fused) == (kind is FusedAdam)  # the second variable's gradient is dense
        results.append([v.numpy() for v in variables])
    for fused, reference, start in zip(*results, initial):
        assert not np.allclose(fused, start)
        np.testing.assert_allclose(fused, reference, rtol=1e-6, atol=1e-7)
