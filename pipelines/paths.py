"""The map of a run directory, runs/NAME/: every stage finds its files through `RunPaths`, and
`keras-transformer run` derives each stage's inputs and outputs from it. `run_root` finds the
run a path names (a fine-tuning run's parent, `train.init_from`) without TensorFlow, so that
`run` tells whether `prepare` is up to date before TensorFlow's quiet start-up.

    data/train-K-of-N.{src,tgt}   train shards, listed by data/train.json
                                  (pipelines/corpus/shards.py)
    data/{dev,test}.{src,tgt}     held-out splits, one sentence a line
    vocab/spm.model, spm.vocab    the shared SentencePiece model and its pieces
    vocab/shortlist.npz           the lexical shortlist's table (keras_transformer/shortlist.py)
    checkpoints/ckpt-STEP.*       training checkpoints, indexed by checkpoints/checkpoint;
                                  vocabulary.sha256: the spm.model they were trained with,
                                  model.json: the model config they hold,
                                  parent.json: the checkpoint a fine-tuning started from,
                                  model_size.json: the size `model.preset: auto` chose
    checkpoints/averaged/ckpt.*   the averaged model (averaged/model.json: its config)
    checkpoints/ema/ckpt.*        the moving average of the weights (train.ema_decay)
    checkpoints/best/             the best validations' checkpoints (train.keep_best),
                                  ckpt-STEP/ckpt.*, indexed by best.json
    logs/                         TensorBoard events, train_summary.json
    eval/SPLIT.{hyp,json}         translations and scores of a split
    export/saved_model/VERSION/   SavedModel versions; export/models.config and
                                  export/batching_parameters.txt for TF Serving
    export/onnx/                  model.onnx, model_int8.onnx, translator.onnx
    export/ctranslate2/           float32/, int8/ (CTranslate2 models), spm.model
    stages/STAGE.json             `run`'s record of each completed stage

Example:
    >>> RunPaths(Path("runs/demo")).spm_model
    PosixPath('runs/demo/vocab/spm.model')
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.corpus.shards import MANIFEST, Shard, train_shards

CHECKPOINT_NAME = "ckpt"
MODEL_RECORD = "model.json"  # beside checkpoints: the ModelConfig they hold

if TYPE_CHECKING:
    from pipelines.config import PipelineConfig


@dataclasses.dataclass(frozen=True)
class RunPaths:
    """The files of the run rooted at `root` (a config's `run_path`)."""

    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def train_manifest(self) -> Path:
        return self.data / MANIFEST

    def train_shards(self) -> list[Shard]:
        """The train split's (source, target) shard files, as its manifest lists them."""
        return train_shards(self.data)

    def split(self, name: str) -> Shard:
        """(source, target) files of the held-out split `name` (dev or test)."""
        return self.data / f"{name}.src", self.data / f"{name}.tgt"

    @property
    def vocab(self) -> Path:
        return self.root / "vocab"

    @property
    def spm_model(self) -> Path:
        return self.vocab / "spm.model"

    @property
    def spm_vocab(self) -> Path:
        return self.vocab / "spm.vocab"

    @property
    def shortlist(self) -> Path:
        return self.vocab / "shortlist.npz"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def checkpoint_index(self) -> Path:
        """tf.train.CheckpointManager's index of the training checkpoints."""
        return self.checkpoints / "checkpoint"

    @property
    def checkpoint_vocabulary(self) -> Path:
        """The SHA-256 of the SentencePiece model the checkpoints were trained with."""
        return self.checkpoints / "vocabulary.sha256"

    @property
    def checkpoint_model(self) -> Path:
        """The model config the training checkpoints hold."""
        return self.checkpoints / MODEL_RECORD

    @property
    def checkpoint_parent(self) -> Path:
        """The checkpoint a fine-tuning run started from (`train.init_from`)."""
        return self.checkpoints / "parent.json"

    @property
    def averaged(self) -> Path:
        """The averaged model's checkpoint prefix."""
        return self.checkpoints / "averaged" / CHECKPOINT_NAME

    @property
    def averaged_index(self) -> Path:
        return self.averaged.with_name(f"{CHECKPOINT_NAME}.index")

    @property
    def ema(self) -> Path:
        """The moving average's checkpoint prefix (train.ema_decay)."""
        return self.checkpoints / "ema" / CHECKPOINT_NAME

    @property
    def ema_index(self) -> Path:
        return self.ema.with_name(f"{CHECKPOINT_NAME}.index")

    @property
    def best(self) -> Path:
        """The best validations' checkpoints (train.keep_best), indexed by best.json."""
        return self.checkpoints / "best"

    @property
    def best_record(self) -> Path:
        return self.best / "best.json"

    def weights_record(self, weights: str) -> Path:
        """The file whose change means new `weights` (`evaluate.weights`): a stage input of
        `keras-transformer run`."""
        return {"averaged": self.averaged_index, "ema": self.ema_index,
                "best": self.best_record, "latest": self.checkpoint_index}[weights]

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def train_summary(self) -> Path:
        return self.logs / "train_summary.json"

    def hypotheses(self, split: str) -> Path:
        return self.root / "eval" / f"{split}.hyp"

    def scores(self, split: str) -> Path:
        return self.root / "eval" / f"{split}.json"

    @property
    def export(self) -> Path:
        return self.root / "export"

    @property
    def saved_model(self) -> Path:
        """The SavedModel base path (TF Serving's), holding a directory per version."""
        return self.export / "saved_model"

    @property
    def models_config(self) -> Path:
        return self.export / "models.config"

    @property
    def onnx(self) -> Path:
        return self.export / "onnx"

    @property
    def ctranslate2(self) -> Path:
        return self.export / "ctranslate2"

    @property
    def batching_parameters(self) -> Path:
        return self.export / "batching_parameters.txt"

    def stamp(self, stage: str) -> Path:
        return self.root / "stages" / f"{stage}.json"


def run_root(path: Path) -> Path | None:
    """The run directory `path` names: itself, or the nearest directory above a checkpoint
    prefix that holds a vocabulary; None if there is none."""
    if path.is_dir():
        candidates = [path]
    elif Path(f"{path}.index").is_file():
        candidates = list(path.parents)
    else:
        return None
    return next((directory for directory in candidates
                 if RunPaths(directory).spm_model.is_file()), None)


def parent_vocabulary(config: PipelineConfig) -> Path | None:
    """The parent's SentencePiece model that `prepare` copies, if `train.init_from` names a
    run or a checkpoint in one (None otherwise: `pipelines.training.parent.find_parent` says
    why)."""
    root = run_root(Path(config.train.init_from)) if config.train.init_from else None
    return RunPaths(root).spm_model if root else None
