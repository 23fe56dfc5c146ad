"""The `translate_sample` signature's graph code: a random translation of each line
(`keras_transformer.sampling`; back-translation), with each line's own sampling parameters.

    translate_sample(text string [batch], top_k int32 [batch], top_p float32 [batch],
        temperature float32 [batch], seed int64 [batch]) -> {"translation": string [batch],
        "score": float32 [batch]}

A parameter out of range (top_k < 0, top_p outside (0, 1], temperature <= 0) or not one per
line fails the request (InvalidArgumentError).

Example:
    sampling = Sampling(top_k, top_p, temperature, seed)  # each [batch]
    with tf.control_dependencies(sampling_checks(sampling)):
        outputs = sampled_translation(model, spm_model_proto, settings, source_ids, sampling)
"""
from __future__ import annotations

import tensorflow as tf

from export.translator.translate import translation_outputs
from keras_transformer.decoding_settings import DecodingSettings
from keras_transformer.model import Transformer
from keras_transformer.sampling import Sampling
from keras_transformer.translate import sample_sources


def sampling_checks(sampling: Sampling) -> list[tf.Operation]:
    """Graph code: assertions that fail a `translate_sample` request (InvalidArgumentError)
    whose parameters [batch] are out of range."""
    return [
        tf.debugging.assert_non_negative(sampling.top_k, message="top_k must be >= 0"),
        tf.debugging.assert_positive(sampling.top_p, message="top_p must be in (0, 1]"),
        tf.debugging.assert_less_equal(sampling.top_p, 1.0, message="top_p must be in (0, 1]"),
        tf.debugging.assert_positive(sampling.temperature, message="temperature must be > 0")]


def sampled_translation(model: Transformer, spm_model_proto: bytes, settings: DecodingSettings,
                        source_ids: tf.Tensor, sampling: Sampling) -> dict[str, tf.Tensor]:
    """Graph code: `translate_sample`'s outputs of source ids [batch, source] and each
    line's sampling parameters [batch], with the limits of `settings`."""
    return translation_outputs(spm_model_proto,
                               *sample_sources(model, source_ids, settings, sampling))
