"""Text -> the source ids the exported graphs read: `Translator.translate` and the TF Serving
warm-up requests of `translate_ids` encode lines so (`keras_transformer.tokenizer.Tokenizer`).

    encode_text(text string [batch], model_proto, max_source_length) -> int32 [batch, time]

Each line's pieces, whitespace runs read as one space, cut to `max_source_length` tokens with
the EOS, then PAD; a blank line is its EOS alone. A guard line is encoded with every batch and
dropped, so that a batch of only blank lines (or none) converts to ONNX.

Example:
    ids = encode_text(tf.constant(["Hello.", ""]), spm_model_proto, max_source_length=128)
    # int32 [2, time]: [[pieces of "Hello.", EOS (3)], [3, PAD (0), ...]]
"""
from __future__ import annotations

import tensorflow as tf

from keras_transformer.tokenizer import PAD_ID, Tokenizer

# Encoded with every batch and dropped: tf2onnx's ragged-to-dense conversion divides by the
# longest row's length, so a batch of only blank lines (or none) must not reach it alone.
GUARD_LINE = "."


def encode_text(text: tf.Tensor, model_proto: bytes, max_source_length: int) -> tf.Tensor:
    """Strings [batch] -> source ids int32 [batch, time]: the pieces of each line, whitespace
    runs read as one space, cut to `max_source_length` tokens with the EOS (the source cut of
    `DecodingSettings.max_source_pieces`), then PAD (a blank line: EOS alone)."""
    guarded = tf.concat([[GUARD_LINE], text], axis=0)  # [1 + batch]
    ids = Tokenizer(model_proto).tokenize(guarded, add_eos=True, max_length=max_source_length)
    return ids.to_tensor(PAD_ID)[1:]  # [batch, time]
