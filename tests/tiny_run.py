"""Test helpers for the trainer: a tiny prepared run (synthetic corpus, its own small
SentencePiece model, a config with the `tiny` preset) and synthetic batches of varied shapes.

Shared by tests/test_train.py, tests/test_faults.py, tests/test_average.py,
tests/test_guided_alignment.py, tests/test_noise.py and the subprocess scripts beside them.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from pipelines.paths import RunPaths

WORDS = ("sun moon star tree river stone bird fish cloud rain wind fire snow leaf root seed "
         "hill lake road door").split()
# The tiny preset cut to one layer a side: a trace of the train step (each run pays one) takes
# a fifth less CPU than with its two, and no test here reads the depth.
ONE_LAYER_A_SIDE = {"num_encoder_layers": 1, "num_decoder_layers": 1}


def make_tiny_run(directory: Path, *, model: dict[str, Any] | None = None,
                  train: dict[str, Any] | None = None) -> Path:
    """Writes directory/run/{data,vocab} and directory/config.yaml; returns the config path.

    The corpus pairs random word sequences with their reversal in upper case (400 train and
    40 dev pairs); the defaults train 20 steps of the tiny preset, one layer a side
    (ONE_LAYER_A_SIDE, unless `model` names another preset), without dropout.
    """
    from keras_transformer.tokenizer import train_sentencepiece
    from pipelines.corpus.shards import DEFAULT_CORPUS, CorpusShards, shard_stem, write_manifest

    run_dir = directory / "run"
    data_dir = run_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "vocab").mkdir(exist_ok=True)
    rng = random.Random(0)
    for split, stem, count in (("train", shard_stem(0, 1), 400), ("dev", "dev", 40)):
        pairs = [rng.choices(WORDS, k=rng.randint(2, 12)) for _ in range(count)]
        (data_dir / f"{stem}.src").write_text("".join(" ".join(words) + "\n" for words in pairs))
        (data_dir / f"{stem}.tgt").write_text(
            "".join(" ".join(reversed(words)).upper() + "\n" for words in pairs))
    write_manifest(data_dir, [CorpusShards(DEFAULT_CORPUS, 1.0, None, (400,))])
    train_src, train_tgt = (data_dir / f"{shard_stem(0, 1)}.{side}" for side in ("src", "tgt"))
    (run_dir / "vocab" / "spm.model").write_bytes(train_sentencepiece([train_src, train_tgt],
                                                                      vocab_size=400))
    model = {"preset": "tiny", "dropout": 0.0, "dtype": "float32", **(model or {})}
    if model["preset"] == "tiny":
        model = {**ONE_LAYER_A_SIDE, **model}
    config = {
        "name": "tiny", "run_dir": str(run_dir),
        "data": {"source": "files", "train": {"src": str(train_src), "tgt": str(train_tgt)},
                 "max_length": 40},
        "model": model,
        "train": {"batch_tokens": 320, "shuffle_buffer": 500, "steps": 20, "warmup_steps": 10,
                  "log_every_steps": 5,
                  "checkpoint_every_steps": 10, "checkpoint_every_minutes": 0,
                  "keep_checkpoints": 5, "average_last": 3, "validate_every_steps": 0,
                  "bleu_every_steps": 0, **(train or {})},
    }
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def aligned_tiny_run(directory: Path, steps: int = 3) -> Path:
    """make_tiny_run's run (target: the source reversed, upper case) with each pair's word
    alignment (source word i - target word n - 1 - i) and guided alignment on."""
    from pipelines.corpus.shards import shard_stem

    config = make_tiny_run(directory, train={"steps": steps, "guided_alignment_weight": 1.0,
                                             "checkpoint_every_steps": steps})
    data = directory / "run" / "data"
    stem = shard_stem(0, 1)
    lines = (data / f"{stem}.src").read_text().splitlines()
    (data / f"{stem}.align").write_text("".join(
        " ".join(f"{i}-{len(line.split()) - 1 - i}" for i in range(len(line.split()))) + "\n"
        for line in lines))
    manifest = json.loads((data / "train.json").read_text())
    manifest["shards"][0]["align"] = f"{stem}.align"
    (data / "train.json").write_text(json.dumps(manifest))
    text = yaml.safe_load(config.read_text())
    text["data"]["alignments"] = "eflomal"
    config.write_text(yaml.safe_dump(text))
    return config


def word_pieces(target_ids: np.ndarray, run_path: Path) -> np.ndarray:
    """bool, target_ids' shape: the pieces of words (`keras_transformer.words`: not BOS, EOS,
    PAD or whitespace alone), those gold alignments link, of the run's vocabulary."""
    from keras_transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID
    from keras_transformer.words import WORD_SPACE, vocabulary_word_marks

    marks = vocabulary_word_marks(RunPaths(run_path).spm_model.read_bytes())  # [vocab]
    return ((target_ids != PAD_ID) & (target_ids != BOS_ID) & (target_ids != EOS_ID)
            & (marks[target_ids] != WORD_SPACE))


def copy_run(source: Path, destination: Path, **model: Any) -> tuple[Path, RunPaths]:
    """(config path, paths) of a copy of the run of `make_tiny_run(source)` made in
    `destination`; `model` overrides its model section."""
    shutil.copytree(source / "run", destination / "run")
    config = yaml.safe_load((source / "config.yaml").read_text())
    config["run_dir"] = str(destination / "run")
    config["model"].update(model)
    path = destination / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, RunPaths(destination / "run")


def synthetic_halves(steps: int, vocab_size: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """2 * steps batches, all of different shapes: {"source_ids" [b, s], "target_ids" [b, t]}
    (target BOS ... EOS, padded with 0); batches 2i and 2i + 1 make update i."""
    rng = np.random.default_rng(seed)
    batches = []
    for index in range(2 * steps):
        batch, src_len, tgt_len = 2 + index % 3, 5 + index, 4 + (index * 7) % 23
        source = rng.integers(4, vocab_size, (batch, src_len), dtype=np.int32)
        target = rng.integers(4, vocab_size, (batch, tgt_len), dtype=np.int32)
        target[:, 0], target[:, -1] = 2, 3
        for row in range(1, batch):  # ragged rows: padding after EOS
            cut = rng.integers(3, tgt_len + 1)
            target[row, cut - 1], target[row, cut:] = 3, 0
            source[row, rng.integers(2, src_len + 1):] = 0
        batches.append({"source_ids": source, "target_ids": target})
    return batches


def merged(halves: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """Batches 2i and 2i + 1 padded to one shape and concatenated: one batch per update."""
    out = []
    for first, second in zip(halves[::2], halves[1::2]):
        out.append({key: np.concatenate([_pad(first[key], second[key].shape[1]),
                                         _pad(second[key], first[key].shape[1])])
                    for key in first})
    return out


def dataset_fn(batches: list[dict[str, np.ndarray]]):
    """A `distribute_datasets_from_function` argument yielding `batches` in order, endlessly."""
    import tensorflow as tf

    spec = tf.TensorSpec([None, None], tf.int32)

    def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return tf.data.Dataset.from_generator(
            lambda: iter(batches), output_signature={"source_ids": spec, "target_ids": spec}
        ).repeat()

    return make


def _pad(ids: np.ndarray, length: int) -> np.ndarray:
    return np.pad(ids, [(0, 0), (0, max(0, length - ids.shape[1]))])


def use_two_logical_cpus() -> None:
    """Hides any GPU and splits the CPU into 2 logical devices (before TensorFlow starts), so
    that `make_strategy()` gives 2 replicas on every host, GPU or not."""
    import tensorflow as tf

    tf.config.set_visible_devices([], "GPU")
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0],
        [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])


def overflow_replica_1_at(update: int) -> None:
    """Makes replica 1's gradients (worker 1's under MultiWorkerMirroredStrategy) infinite at
    the first try of update `update` (counted from 1), as float16 overflow would: patches
    `Trainer._batch_gradients` in this process. A skipped try halves the loss scale, so the
    next try of that update is left alone."""
    import tensorflow as tf

    from pipelines.training.trainer import Trainer

    original = Trainer._batch_gradients

    def overflowing(self, source_ids, target_ids, global_tokens, alignment=None):
        loss, grads = original(self, source_ids, target_ids, global_tokens, alignment)
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        first_try = self.optimizer.dynamic_scale == self.optimizer.initial_scale
        overflow = (self.optimizer.iterations == update - 1) & first_try & (replica == 1)
        factor = tf.where(overflow, float("inf"), 1.0)
        return loss, [tf.convert_to_tensor(g) * tf.cast(factor, g.dtype) for g in grads]

    Trainer._batch_gradients = overflowing


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of a test's subprocess: tests/ importable, TensorFlow's INFO lines off."""
    path = os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "TF_CPP_MIN_LOG_LEVEL": "2", **extra}
