"""The input specs of the Translator's serving signatures (`export.translator`), and the
holder that keeps a Python object out of a tf.Module's saved state."""
from __future__ import annotations

import tensorflow as tf

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
