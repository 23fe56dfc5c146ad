"""The shared subword vocabulary: SentencePiece training, and the in-graph tokenizer.

One SentencePiece model file drives training, evaluation and the exported graphs. It is
trained with identity normalization (but for one rule, see NORMALIZATION_RULES) and byte
fallback, so `detokenize(tokenize(text))` gives back any text whose whitespace is single spaces,
with none leading or trailing (every corpus is cleaned so; `tokenize` reads any run of
whitespace and NUL characters as one space), character for character: no Unicode
normalization, no unknown token.
Token ids: PAD_ID 0, UNK_ID 1, BOS_ID 2, EOS_ID 3. User symbols (corpus tags such as `<bt>`) are
pieces that are never split: wherever one occurs in a text, it is one id.

Example:
    model_proto = train_sentencepiece(["train.src", "train.tgt"], vocab_size=8000)
    tokenizer = Tokenizer(model_proto)  # or Tokenizer.from_file("spm.model")
    ids = tokenizer.tokenize(tf.constant(["Hello  world."]), add_eos=True)  # int32 [1, (time)]
    tokenizer.detokenize(ids.to_tensor(PAD_ID))  # [b"Hello world."]
"""
from __future__ import annotations

import dataclasses
import io
import os
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as model_pb2
import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer.words import SPACE_BYTE_PIECES, WORD_BOUNDARY

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPACES = r"[\s\x00]+"  # RE2: what `tokenize` reads as one space
VOCAB_TYPES = ("bpe", "unigram")
# Identity normalization but for one rule, the noncharacter U+FFFF -> U+FFFD: a model without
# any rule (normalization_rule_name "identity") has an empty charsmap, for which the
# SentencePiece of tensorflow-text logs "precompiled_charsmap is empty" each time it loads.
NORMALIZATION_RULES = "FFFF\tFFFD\n"


def train_sentencepiece(files: Sequence[str | Path], *, vocab_size: int,
                        model_type: str = "bpe", character_coverage: float = 1.0,
                        max_sentences: int = 2_000_000, seed: int = 0,
                        user_symbols: Sequence[str] = ()) -> bytes:
    """Learns one vocabulary from text files (a sentence a line); returns the model's bytes.

    At most `max_sentences` lines, sampled with `seed`, are read. `vocab_size` is an upper
    bound: a small corpus can yield fewer pieces (read `Tokenizer.vocab_size`). `user_symbols`
    become pieces of their own, never split (ids 4, 5, ...). The model keeps no trace of the
    machine (input paths, threads), so equal inputs give equal bytes.
    """
    if model_type not in VOCAB_TYPES:
        raise ValueError(f"model_type must be one of {VOCAB_TYPES}, got {model_type!r}")
    spm.set_random_generator_seed(seed)
    writer = io.BytesIO()
    with tempfile.NamedTemporaryFile("w", suffix=".tsv") as rules:
        rules.write(NORMALIZATION_RULES)
        rules.flush()
        spm.SentencePieceTrainer.train(
            input=[str(f) for f in files], model_writer=writer, vocab_size=vocab_size,
            model_type=model_type, character_coverage=character_coverage,
            input_sentence_size=max_sentences, shuffle_input_sentence=True,
            hard_vocab_limit=False, byte_fallback=True, normalization_rule_tsv=rules.name,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            user_defined_symbols=list(user_symbols), num_threads=os.cpu_count() or 1,
            minloglevel=2)
    model = model_pb2.ModelProto.FromString(writer.getvalue())
    model.normalizer_spec.ClearField("normalization_rule_tsv")
    model.trainer_spec.ClearField("input")
    model.trainer_spec.ClearField("model_prefix")
    model.trainer_spec.ClearField("num_threads")
    return model.SerializeToString()


def vocabulary(model_proto: bytes) -> list[tuple[str, float]]:
    """(piece, score) by id, as SentencePiece's .vocab file lists them."""
    model = model_pb2.ModelProto.FromString(model_proto)
    return [(piece.piece, piece.score) for piece in model.pieces]


def user_symbols(model_proto: bytes) -> list[str]:
    """The model's user symbols: the pieces never split (`train_sentencepiece`)."""
    model = model_pb2.ModelProto.FromString(model_proto)
    return [piece.piece for piece in model.pieces
            if piece.type == model_pb2.ModelProto.SentencePiece.USER_DEFINED]


def model_type(model_proto: bytes) -> str:
    """The kind of SentencePiece model: bpe, unigram, word or char."""
    spec = model_pb2.ModelProto.FromString(model_proto).trainer_spec
    return model_pb2.TrainerSpec.ModelType.Name(spec.model_type).lower()


class Tokenizer(tf.Module):
    """In-graph SentencePiece (tensorflow-text) from the model's bytes, shared by training,
    validation and the exported graphs.

    Built only from ops that TF Serving ships (SentencepieceOp, SentencepieceTokenizeOp,
    SentencepieceDetokenizeOp and core TF ops) and that tf2onnx converts: tokenization to
    onnxruntime-extensions' SentencepieceTokenizer, detokenization (with the handler in
    `export.onnx`) to its SentencepieceDecoder, which decodes one sequence only. So `detokenize`
    decodes the batch as one sequence, each row after a line break, and splits it at the line
    breaks; a line break or carriage return that the model generates becomes a space (a
    translation is one line). A Tokenizer holds no TensorFlow state: it can be made inside a
    traced function, which then holds the SentencePiece model.

    Example:
        >>> tokenizer = Tokenizer.from_file("runs/demo/vocab/spm.model")
        >>> ids = tokenizer.tokenize(tf.constant(["Hello."]), add_eos=True)  # [1, (time)]
        >>> tokenizer.detokenize(ids)  # [b"Hello."]
    """

    def __init__(self, model_proto: bytes, name: str | None = None):
        super().__init__(name=name)
        self.model_proto = model_proto
        processor = spm.SentencePieceProcessor(model_proto=model_proto)
        self.vocab_size = processor.get_piece_size()
        self.tables = DecodingTables.of(processor)

    def _sentencepiece(self) -> tf_text.SentencepieceTokenizer:
        """The tensorflow-text op, made at each call (once per trace in a tf.function): an eager
        instance kept across calls loses its resource when tf.random.set_seed clears the
        kernel cache, and one made inside the traced function is what tf2onnx converts."""
        return tf_text.SentencepieceTokenizer(model=self.model_proto, out_type=tf.int32)

    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer:
        """The tokenizer of a .model file written by `train_sentencepiece`."""
        return cls(Path(path).read_bytes())

    def tokenize(self, text: tf.Tensor, *, add_bos: bool = False, add_eos: bool = False,
                 max_length: int | None = None) -> tf.RaggedTensor:
        """Strings [batch] -> int32 ids [batch, (time)]: the pieces of each line, runs of
        whitespace (tabs, line breaks) and NUL read as one space, optionally framed by BOS /
        EOS and cut to `max_length` ids, BOS and EOS kept (the pieces cut)."""
        # NUL too: onnxruntime-extensions' SentencePiece reads a line as a C string, to its NUL.
        text = tf.strings.regex_replace(text, SPACES, " ")  # [batch]
        pieces = self._sentencepiece().tokenize(text)  # [batch, (pieces)]
        frame = int(add_bos) + int(add_eos)
        if not frame and max_length is None:
            return pieces
        # Framed densely, padded with EOS (a row's first pad is its EOS): a ragged concat on
        # axis 1 transposes int64 row indices, which oneDNN's graph rewrite logs as an error.
        padded = pieces.to_tensor(EOS_ID)  # [batch, pieces]
        lengths = pieces.row_lengths()  # [batch]
        if max_length is not None:
            padded = padded[:, :max_length - frame]  # [batch, <= max_length - frame]
            lengths = tf.minimum(lengths, max_length - frame)
        batch = tf.shape(text)[0]
        parts = ([tf.fill([batch, 1], BOS_ID)] if add_bos else []) + [padded] + (
            [tf.fill([batch, 1], EOS_ID)] if add_eos else [])  # [batch, 1 | pieces]
        return tf.RaggedTensor.from_tensor(tf.concat(parts, axis=1), lengths=lengths + frame)

    def detokenize(self, ids: tf.Tensor | tf.RaggedTensor) -> tf.Tensor:
        """Ids [batch, time] -> strings [batch], as SentencePiece decodes each row read up to
        its first EOS (control pieces such as PAD and BOS give nothing; byte pieces that form no
        valid UTF-8 give U+FFFD), so padded or beam-search output decodes as is."""
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=PAD_ID)
        tables = self.tables
        ids = tf.cast(ids, tf.int32)  # [batch, time]
        before_eos = tf.cumsum(tf.cast(ids == EOS_ID, tf.int32), axis=1, exclusive=True) == 0
        ids = tf.where(before_eos, ids, PAD_ID)  # [batch, time]: PAD (decoded as "") after EOS
        ids = tf.where((ids == tables.line_break) | (ids == tables.carriage_return),
                       tables.space, ids)
        framed = tf.concat([tf.fill([tf.shape(ids)[0], 1], tables.line_break), ids], axis=1)
        flat = tf.reshape(framed, [-1])  # [batch * (1 + time)]
        one_row = tf.RaggedTensor.from_row_splits(flat, tf.stack([0, tf.size(flat)]),
                                                  validate=False)  # [1, (batch * (1 + time))]
        text = self._sentencepiece().detokenize(one_row)  # [1]: "\n" row "\n" row ...
        # The split's values alone: tf.strings.split would build a ragged partition that
        # nothing reads (a graph's unread nodes cost TF Serving's first run, see
        # keras_transformer.model's `cross_attention_weights`).
        lines = tf.raw_ops.StringSplitV2(input=text, sep="\n").values[1:]  # [batch]
        # SentencePiece drops the word-boundary space of a row's first visible piece.
        visible = ~tf.gather(tf.constant(tables.control), ids)  # [batch, time]
        first = visible & (tf.cumsum(tf.cast(visible, tf.int32), axis=1, exclusive=True) == 0)
        strip = tf.reduce_any(first & tf.gather(tf.constant(tables.word_start), ids), axis=1)
        return tf.where(strip, tf.strings.regex_replace(lines, "^ ", ""), lines)  # [batch]


@dataclasses.dataclass(frozen=True)
class DecodingTables:
    """What `Tokenizer.detokenize` reads of a SentencePiece model with byte fallback: the ids
    of the line break, carriage return and space byte pieces, and by id whether a piece is a
    control piece (decoded as "") and whether it starts with the word-boundary mark."""

    line_break: int
    carriage_return: int
    space: int
    control: np.ndarray  # bool [vocab]
    word_start: np.ndarray  # bool [vocab]

    @classmethod
    def of(cls, processor: spm.SentencePieceProcessor) -> DecodingTables:
        ids = [processor.piece_to_id(piece) for piece in SPACE_BYTE_PIECES]
        if [processor.id_to_piece(i) for i in ids] != list(SPACE_BYTE_PIECES):
            raise ValueError("the SentencePiece model has no byte-fallback pieces")
        vocab = range(processor.get_piece_size())
        return cls(*ids, control=np.array([processor.is_control(i) for i in vocab]),
                   word_start=np.array([processor.id_to_piece(i).startswith(WORD_BOUNDARY)
                                        for i in vocab]))
