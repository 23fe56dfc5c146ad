"""pipelines/training/trainer.py in one process: the XLA update equals the plain one."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.tokenizer import Tokenizer
from pipelines.config import load_config
from pipelines.training.trainer import Trainer
from tiny_run import make_tiny_run, synthetic_halves


@pytest.mark.slow
def test_the_xla_update_gives_the_loss_and_gradients_of_the_plain_one(tmp_path: Path) -> None:
    config = load_config(make_tiny_run(tmp_path))
    vocab_size = Tokenizer((config.run_path / "vocab" / "spm.model").read_bytes()).vocab_size
    strategy = tf.distribute.get_strategy()
    trainers = {}
    for xla in (False, True):
        keras.utils.set_random_seed(0)
        trainers[xla] = Trainer(dataclasses.replace(
            config, train=dataclasses.replace(config.train, jit_compile=xla)), vocab_size, strategy)
    for plain, compiled in zip(trainers[False].model.variables, trainers[True].model.variables):
        np.testing.assert_array_equal(plain.numpy(), compiled.numpy())
    for batch in synthetic_halves(1, vocab_size)[1:]:  # padded rows included
        source, target = (tf.constant(batch[key]) for key in ("source_ids", "target_ids"))
        tokens = tf.reduce_sum(tf.cast(target[:, 1:] != 0, tf.float32))
        (plain_loss, plain_grads), (xla_loss, xla_grads) = (
            trainers[xla]._gradients(source, target, tokens) for xla in (False, True))
        np.testing.assert_allclose(float(xla_loss), float(plain_loss), rtol=1e-5)
        for plain, compiled in zip(plain_grads, xla_grads):
            np.testing.assert_allclose(tf.convert_to_tensor(compiled),
                                       tf.convert_to_tensor(plain), rtol=1e-4, atol=1e-6)
