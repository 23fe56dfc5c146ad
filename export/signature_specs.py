"""The input specs of the Translator's serving signatures (`export.translator`), the run-time
checks of the sampling parameters, and the holder that keeps a Python object out of a
tf.Module's saved state."""
from __future__ import annotations

import tensorflow as tf

from keras_transformer.sampling import Sampling

TEXT_SPEC = tf.TensorSpec([None], tf.string, name="text")
PREFIX_SPEC = tf.TensorSpec([None], tf.string, name="prefix")
TARGET_SPEC = tf.TensorSpec([None], tf.string, name="target")
SAMPLING_SPECS = [tf.TensorSpec([None], tf.int32, name="top_k"),
                  tf.TensorSpec([None], tf.float32, name="top_p"),
                  tf.TensorSpec([None], tf.float32, name="temperature"),
                  tf.TensorSpec([None], tf.int64, name="seed")]
IDS_SPEC = tf.TensorSpec([None, None], tf.int32, name="source_ids")
TARGET_IDS_SPEC = tf.TensorSpec([None, None], tf.int32, name="target_pieces")


class Untracked:
    """Holds an object out of reach of tf.Module's dependency tracking."""

    def __init__(self, value: object) -> None:
        self.value = value


def sampling_checks(text: tf.Tensor, sampling: Sampling) -> list[tf.Operation]:
    """Graph code: assertions that fail a `translate_sample` request (InvalidArgumentError)
    whose parameters [batch] are out of range or not one per line of `text` [batch]."""
    checks = [tf.debugging.assert_equal(tf.shape(text), tf.shape(value), message=
                                        "text and the sampling parameters need the same "
                                        "batch size") for value in sampling]
    return checks + [
        tf.debugging.assert_non_negative(sampling.top_k, message="top_k must be >= 0"),
        tf.debugging.assert_positive(sampling.top_p, message="top_p must be in (0, 1]"),
        tf.debugging.assert_less_equal(sampling.top_p, 1.0, message="top_p must be in (0, 1]"),
        tf.debugging.assert_positive(sampling.temperature, message="temperature must be > 0")]
