"""The serving contract, in one table: each signature of the SavedModel by name, the Translator
function it runs, its inputs (name, dtype, axes), its outputs (name, dtype, rank) and the
inputs of its TF Serving warm-up requests.

The Translator's functions take their input signatures from it (`input_specs`),
`export.saved_model` saves and warms up the signatures it lists, and the tests check the
exported SavedModel (tests/test_saved_model.py, tests/test_serving.py) and the docs' tables
(tests/test_signature_docs.py: README.md and ARCHITECTURE.md, "Serving signatures") against it.
Input and output names never coincide.

Example:
    >>> SIGNATURES["serving_default"].method
    'translate'
    >>> [spec.name for spec in SIGNATURES["score"].inputs]
    ['text', 'target']
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import tensorflow as tf


class Input(NamedTuple):
    name: str
    dtype: tf.DType
    axes: tuple[str, ...]  # ("batch",) or ("batch", "time" | "terms")

    @property
    def spec(self) -> tf.TensorSpec:
        """The input signature's TensorSpec: any size along each axis."""
        return tf.TensorSpec([None] * len(self.axes), self.dtype, name=self.name)


TEXT = Input("text", tf.string, ("batch",))
PREFIX = Input("prefix", tf.string, ("batch",))
TARGET = Input("target", tf.string, ("batch",))
TERMS = Input("terms", tf.string, ("batch", "terms"))  # "" as padding
SAMPLING = (Input("top_k", tf.int32, ("batch",)), Input("top_p", tf.float32, ("batch",)),
            Input("temperature", tf.float32, ("batch",)), Input("seed", tf.int64, ("batch",)))
SOURCE_IDS = Input("source_ids", tf.int32, ("batch", "time"))
TARGET_PIECES = Input("target_pieces", tf.int32, ("batch", "time"))  # score.onnx


class Output(NamedTuple):
    name: str
    dtype: tf.DType
    rank: int  # [batch] or [batch, beam | time | terms]


TRANSLATION = Output("translation", tf.string, 1)
SCORE = Output("score", tf.float32, 1)
ALIGNMENT = Output("alignment", tf.string, 1)  # `I-J ...` per line
TARGET_IDS = Output("target_ids", tf.int32, 2)

# A warm-up request's inputs from a batch of lines (object [batch]) and their source ids
# (int32 [batch, time], as `translate` encodes them).
WarmupInputs = Callable[[np.ndarray, np.ndarray], dict[str, np.ndarray]]


class Signature(NamedTuple):
    method: str                        # the Translator's tf.function that serves it
    inputs: tuple[Input, ...]          # in the function's argument order
    outputs: tuple[Output, ...]
    warmup: WarmupInputs


def _text(lines: np.ndarray, source_ids: np.ndarray) -> dict[str, np.ndarray]:
    return {"text": lines}


SIGNATURES: dict[str, Signature] = {
    "serving_default": Signature("translate", (TEXT,), (TRANSLATION, SCORE), _text),
    "translate_ids": Signature(
        "translate_ids", (SOURCE_IDS,), (TARGET_IDS, SCORE),
        lambda lines, source_ids: {"source_ids": source_ids}),
    "translate_nbest": Signature(
        "translate_nbest", (TEXT,),
        (Output("translations", tf.string, 2), Output("scores", tf.float32, 2)), _text),
    "translate_prefix": Signature(
        "translate_prefix", (TEXT, PREFIX), (TRANSLATION, SCORE),
        lambda lines, source_ids: {"text": lines, "prefix": np.full_like(lines, "")}),
    "translate_sample": Signature(
        "translate_sample", (TEXT, *SAMPLING), (TRANSLATION, SCORE),
        lambda lines, source_ids: {
            "text": lines, "top_k": np.zeros(len(lines), np.int32),
            "top_p": np.ones(len(lines), np.float32),
            "temperature": np.ones(len(lines), np.float32),
            "seed": np.arange(len(lines), dtype=np.int64)}),
    "score": Signature(
        "score", (TEXT, TARGET),
        (SCORE, Output("log_prob", tf.float32, 1), TARGET_IDS,
         Output("token_log_probs", tf.float32, 2)),
        lambda lines, source_ids: {"text": lines, "target": lines}),
    "align": Signature("align", (TEXT, TARGET), (ALIGNMENT,),
                       lambda lines, source_ids: {"text": lines, "target": lines}),
    "translate_aligned": Signature("translate_aligned", (TEXT,),
                                   (TRANSLATION, SCORE, ALIGNMENT), _text),
    "translate_terms": Signature(
        "translate_terms", (TEXT, TERMS),
        (TRANSLATION, SCORE, Output("terms_fit", tf.bool, 1), Output("term_found", tf.bool, 2),
         ALIGNMENT),
        lambda lines, source_ids: {"text": lines, "terms": lines[:, None]}),
}


def input_specs(name: str) -> list[tf.TensorSpec]:
    """The input signature of the Translator function that serves signature `name`."""
    return [expected.spec for expected in SIGNATURES[name].inputs]
