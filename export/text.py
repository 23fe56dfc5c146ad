"""Text <-> token ids inside the exported graphs, with ops that TF Serving and tf2onnx both take.

Both directions build tensorflow-text's SentencepieceTokenizer inside the traced function from
the model bytes: ops SentencepieceOp, SentencepieceTokenizeOp and SentencepieceDetokenizeOp,
all in TF Serving's TF Text op set. tf2onnx converts tokenization to onnxruntime-extensions'
SentencepieceTokenizer and, with the handler in `export.onnx`, detokenization to its
SentencepieceDecoder, which decodes one sequence only. So the batch is detokenized as one
sequence, each row after a line break, and split at the line breaks; a line break or carriage
return that the model generates becomes a space (a translation is one line).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer.tokenizer import EOS_ID, PAD_ID

LINE_BREAK, CARRIAGE_RETURN, SPACE = "<0x0A>", "<0x0D>", "<0x20>"  # byte-fallback pieces


def encode_text(text: tf.Tensor, model_proto: bytes, max_length: int) -> tf.Tensor:
    """Strings [batch] -> source ids int32 [batch, time]: the pieces of each line, whitespace
    runs (tabs, newlines) read as one space, cut to `max_length - 1` pieces, then EOS, then PAD."""
    text = tf.strings.regex_replace(text, r"\s+", " ")  # [batch]
    tokenizer = tf_text.SentencepieceTokenizer(model=model_proto, out_type=tf.int32)
    pieces = tokenizer.tokenize(text).to_tensor(PAD_ID)[:, :max_length - 1]  # [b, <= max - 1]
    lengths = tf.reduce_sum(tf.cast(pieces != PAD_ID, tf.int32), axis=1)  # [batch]
    padded = tf.pad(pieces, [[0, 0], [0, 1]], constant_values=PAD_ID)  # [batch, time + 1]
    positions = tf.range(tf.shape(padded)[1])  # [time + 1]
    return tf.where(positions[None, :] == lengths[:, None], EOS_ID, padded)


def decode_ids(ids: tf.Tensor, model_proto: bytes) -> tf.Tensor:
    """Ids int32 [batch, time] (read up to the first EOS) -> strings [batch], as SentencePiece
    decodes each row (byte pieces that form no valid UTF-8 give U+FFFD)."""
    tables = DecodingTables.of(model_proto)
    ids = tf.cast(ids, tf.int32)
    before_eos = tf.cumsum(tf.cast(ids == EOS_ID, tf.int32), axis=1, exclusive=True) == 0
    ids = tf.where(before_eos, ids, PAD_ID)  # [batch, time]: PAD (decoded as "") after EOS
    ids = tf.where((ids == tables.line_break) | (ids == tables.carriage_return), tables.space,
                   ids)
    framed = tf.concat([tf.fill([tf.shape(ids)[0], 1], tables.line_break), ids], axis=1)
    flat = tf.reshape(framed, [-1])  # [batch * (1 + time)]
    one_row = tf.RaggedTensor.from_row_splits(flat, tf.stack([0, tf.size(flat)]), validate=False)
    tokenizer = tf_text.SentencepieceTokenizer(model=model_proto, out_type=tf.int32)
    text = tokenizer.detokenize(one_row)  # [1]: "\n" row "\n" row ...
    lines = tf.strings.split(text, sep="\n").flat_values[1:]  # [batch]
    # SentencePiece drops the word-boundary space of a row's first visible piece.
    visible = ~tf.gather(tf.constant(tables.control), ids)  # [batch, time]
    first = visible & (tf.cumsum(tf.cast(visible, tf.int32), axis=1, exclusive=True) == 0)
    strip = tf.reduce_any(first & tf.gather(tf.constant(tables.word_start), ids), axis=1)
    return tf.where(strip, tf.strings.regex_replace(lines, "^ ", ""), lines)  # [batch]


@dataclasses.dataclass(frozen=True)
class DecodingTables:
    """What decoding reads of a SentencePiece model with byte fallback: the ids of the line
    break, carriage return and space byte pieces, and by id whether a piece is a control
    piece (decoded as "") and whether it starts with the word-boundary mark."""

    line_break: int
    carriage_return: int
    space: int
    control: np.ndarray  # bool [vocab]
    word_start: np.ndarray  # bool [vocab]

    @classmethod
    def of(cls, model_proto: bytes) -> DecodingTables:
        processor = spm.SentencePieceProcessor(model_proto=model_proto)
        pieces = (LINE_BREAK, CARRIAGE_RETURN, SPACE)
        ids = [processor.piece_to_id(piece) for piece in pieces]
        if [processor.id_to_piece(i) for i in ids] != list(pieces):
            raise ValueError("the SentencePiece model has no byte-fallback pieces")
        vocab = range(processor.get_piece_size())
        return cls(*ids, control=np.array([processor.is_control(i) for i in vocab]),
                   word_start=np.array([processor.id_to_piece(i).startswith("\u2581")
                                        for i in vocab]))
