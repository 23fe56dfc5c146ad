"""Test helpers for the exports: a small SentencePiece model and a `tiny` Transformer trained
a few steps to copy its input, so that decoded outputs vary in length, mostly end with EOS,
and differ between sentences (an untrained model repeats one token up to the length limit).
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Sequence

import keras
import numpy as np
import tensorflow as tf
from keras_transformer.decoding_settings import DecodingSettings
import yaml

from export.translator import Translator
from keras_transformer import ModelConfig, Transformer
from keras_transformer.losses import label_smoothed_cross_entropy
from keras_transformer.schedules import FusedAdam
from keras_transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer, train_sentencepiece
from keras_transformer.translate import decode_sources
from pipelines.checkpoints.weights import model_checkpoint
from pipelines.paths import RunPaths

WORDS = ("sun moon star tree river stone bird fish cloud rain wind fire snow leaf root seed "
         "hill lake road door été château naïve").split()
# Test sentences: short, long, accents, characters never seen in training (byte fallback).
SENTENCES = ["sun moon star", "the river and the stone", "bird", "fish fish fish fish",
             "a château by the lake, été 2024", "snow leaf root seed hill lake road door tree",
             "漢字 and emoji 😀", "Wind! Rain? Fire.", "naïve cloud", "x"]
MAX_LENGTH = 64  # the model's positions


def corpus(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 10))) for _ in range(count)]


def train_spm(directory: Path, user_symbols: Sequence[str] = ()) -> bytes:
    """A 300-piece BPE model of the corpus (with `user_symbols`, e.g. language tokens)."""
    path = directory / "corpus.txt"
    path.write_text("\n".join(corpus(400)) + "\n", encoding="utf-8")
    return train_sentencepiece([path], vocab_size=300, seed=0, user_symbols=user_symbols)


def make_model(model_proto: bytes, steps: int = 0, seed: int = 0,
               **overrides: object) -> Transformer:
    """The tiny preset (no dropout; ModelConfig `overrides`), trained `steps` Adam steps on
    copying corpus lines."""
    keras.utils.set_random_seed(seed)
    tokenizer = Tokenizer(model_proto)
    config = ModelConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size, dropout=0.0,
                                     max_length=MAX_LENGTH, **overrides)
    model = Transformer(config)
    model.build()
    if not steps:
        return model
    lines = tf.constant(corpus(32 * steps, seed=seed + 1))
    source = tokenizer.tokenize(lines, add_eos=True).to_tensor(PAD_ID)  # [n, s]
    target = tokenizer.tokenize(lines, add_bos=True, add_eos=True).to_tensor(PAD_ID)  # [n, t]
    optimizer = FusedAdam(3e-3)  # training's Adam (one op per variable's update)
    optimizer.build(model.trainable_variables)  # its slots made now: the step traces once

    @tf.function(autograph=False)
    def step(source_ids: tf.Tensor, target_ids: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model({"source_ids": source_ids, "target_ids": target_ids[:, :-1]},
                           training=True)
            loss, tokens = label_smoothed_cross_entropy(target_ids[:, 1:], logits, 0.0)
            loss /= tokens
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))
        return loss

    for start in range(0, 32 * steps, 32):
        step(source[start:start + 32], target[start:start + 32])
    return model


def write_run(directory: Path, translator: Translator) -> Path:
    """A run of `translator` (from `make_model`: the tiny preset, its depth in the config)
    under directory/run: vocab/spm.model, checkpoints/averaged/ckpt, data/dev.src (the
    warm-up sentences); returns its config."""
    run = directory / "run"
    (run / "vocab").mkdir(parents=True)
    (run / "vocab" / "spm.model").write_bytes(translator.spm_model_proto)
    (run / "data").mkdir()
    for name in ("train.src", "train.tgt"):
        (run / "data" / name).write_text("\n".join(corpus(20)) + "\n", encoding="utf-8")
    (run / "data" / "dev.src").write_text("\n".join(SENTENCES[:3]) + "\n", encoding="utf-8")
    model_checkpoint(translator.model).write(str(RunPaths(run).averaged))
    train_split = {"src": str(run / "data" / "train.src"), "tgt": str(run / "data" / "train.tgt")}
    config = {"name": "tiny", "run_dir": str(run),
              "data": {"source": "files", "train": train_split, "max_length": 40},
              "model": {"preset": "tiny", "dropout": 0.0, "max_length": MAX_LENGTH,
                        "dtype": "float32",
                        "num_encoder_layers": translator.model.model_config.num_encoder_layers,
                        "num_decoder_layers": translator.model.model_config.num_decoder_layers},
              "train": {"batch_tokens": 320}}
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def source_ids(model_proto: bytes, sentences: list[str]) -> np.ndarray:
    """int32 [batch, time]: pieces, EOS, PAD, as training and `translate_ids` read them."""
    ids = Tokenizer(model_proto).tokenize(tf.constant(sentences), add_eos=True)
    return ids.to_tensor(PAD_ID).numpy()


def keras_beam_search(model: Transformer, source: np.ndarray,
                      beam_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Eager (Keras-level) `decode_sources`: best target ids [batch, time], score [batch].
    Computed on the CPU on every host: ONNX Runtime and CTranslate2 run there in the tests, and
    TensorFlow on a GPU (TF32 off) stays within the SavedModel tests' tolerances of it."""
    with tf.device("/CPU:0"):
        ids, scores = decode_sources(model, tf.constant(source),
                                     DecodingSettings(beam_size=beam_size))
    return ids.numpy(), scores.numpy()


def output_lengths(target_ids: np.ndarray) -> list[int]:
    """Tokens per row up to and including EOS (all non-PAD tokens where there is no EOS)."""
    lengths = []
    for row in target_ids:
        eos = np.flatnonzero(row == EOS_ID)
        lengths.append(int(eos[0]) + 1 if eos.size else int(np.sum(row != PAD_ID)))
    return lengths


__all__ = ["BOS_ID", "EOS_ID", "PAD_ID", "SENTENCES", "corpus", "keras_beam_search", "make_model",
           "output_lengths", "source_ids", "train_spm", "write_run"]
