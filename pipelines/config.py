"""The pipeline config: YAML -> validated frozen dataclasses (see pipelines.yaml_dataclasses),
with errors naming file, line and key.

A config is a YAML mapping: `name` (the run name), optional `run_dir` (default `runs/NAME`,
relative to the working directory) and one section per stage. Each section is a frozen
dataclass and one field of `PipelineConfig`: adding a section is one dataclass plus one field.
A relative `Path` resolves against the directory of the config file. The whole config is
checked when it loads, the model's hyperparameters by keras_transformer.config.ModelConfig.
Here: the config, its `data` section (prepare's) and the loading; the sections of the stages
after prepare (model, train, evaluate, export) are in pipelines.sections.

Example:
    >>> config = load_config("demo")
    >>> config.data.source, config.run_path
    ('bible:en-fr', PosixPath('runs/demo'))
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Literal

from pipelines.training.buckets import batch_tokens_problem
from pipelines.files import file_in_the_way
from pipelines.sections import EvaluateConfig, ExportConfig, ModelSection, TrainConfig
from pipelines.corpus.shards import MAX_SHARDS
from pipelines.corpus.source_spec import check_source_spec
from pipelines.yaml_dataclasses import ConfigError, FieldError, key_error, load_yaml

BUILTIN_CONFIGS = Path(__file__).with_name("configs")  # package data: pipelines/configs/*.yaml
# Keys of earlier versions -> where they live now (a config naming one fails saying so).
MOVED_KEYS = {"data.batch_tokens": "train.batch_tokens",
              "data.shuffle_buffer": "train.shuffle_buffer"}


@dataclasses.dataclass(frozen=True)
class SplitFiles:
    """One split of a user corpus: parallel files `src` and `tgt` (one sentence per line), or a
    `tsv` file with `source<TAB>target` lines. Relative paths resolve against the config file."""

    src: Path | None = None
    tgt: Path | None = None
    tsv: Path | None = None

    def __post_init__(self) -> None:
        if (self.src is None) != (self.tgt is None):
            raise FieldError("tgt" if self.src else "src", "src and tgt go together")
        if (self.tsv is None) == (self.src is None):
            raise ValueError("give either src and tgt, or tsv")


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """The `data` section: the corpus, its cleaning, the shared vocabulary and the batching.

    `source` is `bible:SRC-TGT` (builtin, e.g. `bible:en-fr`), `tfds:NAME/CONFIG` (e.g.
    `tfds:wmt14_translate/de-en`; `src_lang`/`tgt_lang` pick the feature keys, default the
    builder's supervised keys) or `files` (`train`, optional `dev`/`test`). A split the source
    lacks is held out from train: `holdout` pairs (whole chapters for the Bible).
    """

    source: str
    src_lang: str | None = None
    tgt_lang: str | None = None
    train: SplitFiles | None = None
    dev: SplitFiles | None = None
    test: SplitFiles | None = None
    tfds_data_dir: Path | None = None  # where TFDS keeps its data (default ~/tensorflow_datasets)
    holdout: int = 1000
    max_length_ratio: float = 2.0  # drop train pairs whose lengths in characters differ more
    vocab_size: int = 8000  # shared SentencePiece pieces (an upper bound on small corpora)
    vocab_type: Literal["bpe", "unigram"] = "bpe"
    character_coverage: float = 1.0  # rarer characters fall back to byte pieces
    vocab_max_sentences: int = 1_000_000  # train sentences per side sampled for the vocabulary
    max_length: int = 128  # tokens of a side, BOS / EOS included; longer pairs are skipped
    shards: int | None = None  # train shard files (default: one per 500,000 pairs, at most 256)
    seed: int = 1234  # shuffling, held-out sampling, vocabulary sampling
    # Word alignments of the train pairs written beside the shards (data/*.align) for
    # train.guided_alignment_weight: by eflomal (pipelines/corpus/alignments.py), or none.
    alignments: Literal["none", "eflomal"] = "none"

    def __post_init__(self) -> None:
        message = check_source_spec(self.source)
        if message:
            raise FieldError("source", f"{message}, got {self.source!r}")
        for key, low in (("holdout", 1), ("vocab_size", 300), ("vocab_max_sentences", 1000),
                         ("max_length", 3)):
            if getattr(self, key) < low:
                raise FieldError(key, f"must be at least {low}, got {getattr(self, key)!r}")
        if self.shards is not None and not 1 <= self.shards <= MAX_SHARDS:
            raise FieldError("shards", f"must be between 1 and {MAX_SHARDS}, got {self.shards!r}")
        if not 0 < self.character_coverage <= 1:
            raise FieldError("character_coverage",
                             f"must be in (0, 1], got {self.character_coverage!r}")
        if self.max_length_ratio and self.max_length_ratio < 1:
            raise FieldError("max_length_ratio",
                             f"must be 0 (off) or at least 1, got {self.max_length_ratio!r}")
        kind = self.source.split(":")[0]
        if kind == "files" and self.train is None:
            raise FieldError("source", "source 'files' needs a train split (data.train)")
        for key in ("train", "dev", "test"):
            if kind != "files" and getattr(self, key) is not None:
                raise FieldError(key, f"only source 'files' takes split files, not {self.source!r}")
        for key in ("src_lang", "tgt_lang"):
            if kind == "bible" and getattr(self, key) is not None:
                raise FieldError(key, "the languages of bible:SRC-TGT come from the source")


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """A whole pipeline: the run name and directory, and one section per stage."""

    name: str
    data: DataConfig
    run_dir: str | None = None
    model: ModelSection = dataclasses.field(default_factory=ModelSection)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = dataclasses.field(default_factory=EvaluateConfig)
    export: ExportConfig = dataclasses.field(default_factory=ExportConfig)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", self.name):
            raise FieldError("name", f"must be letters, digits, '.', '_' or '-', got {self.name!r}")
        problem = batch_tokens_problem(self.train.batch_tokens, self.data.max_length)
        if problem:
            raise FieldError("train.batch_tokens", problem)
        if self.model.preset == "auto" and not self.train.max_minutes:
            raise FieldError("model.preset", "auto chooses the size that train.max_minutes "
                             "trains best: set train.max_minutes, or name a preset")
        if self.model.preset == "auto" and self.train.init_from:
            raise FieldError("model.preset", "a fine-tuned run keeps its parent's size "
                             "(train.init_from): name the parent's preset, not auto")
        self._check_guided_alignment()
        model_length = self.model.model_config().max_length
        if model_length < self.data.max_length:
            key = "model.max_length" if self.model.max_length is not None else "data.max_length"
            raise FieldError(key, f"model.max_length ({model_length}) must be at least "
                             f"data.max_length ({self.data.max_length})")
        blocking = file_in_the_way(self.run_path)
        if blocking is not None:
            where = "" if blocking == self.run_path else f"{blocking} is "
            raise FieldError("run_dir" if self.run_dir else "name",
                             f"{self.run_path}: {where}a file, not a directory")

    def _check_guided_alignment(self) -> None:
        """train.guided_alignment_weight needs the gold alignments of data.alignments, and it
        trains head 0 alone, which model.alignment_heads must then read (unset: 1)."""
        weight = self.train.guided_alignment_weight
        if weight and self.data.alignments == "none":
            raise FieldError("train.guided_alignment_weight", (
                f"needs the train pairs' word alignments: set data.alignments (eflomal), "
                f"or the weight to 0, got {weight!r} with data.alignments none"))
        heads = self.model.alignment_heads
        if weight and heads not in (None, 1):
            raise FieldError("model.alignment_heads", (
                f"guided alignment (train.guided_alignment_weight {weight!r}) trains head 0 "
                f"alone, which alignments then read: leave it unset or 1, got {heads!r}"))

    @property
    def run_path(self) -> Path:
        """Where this run's outputs live: `run_dir`, else runs/NAME."""
        return Path(self.run_dir) if self.run_dir else Path("runs") / self.name


def builtin_configs() -> list[str]:
    """Names of the configs shipped in pipelines/configs (e.g. `demo`)."""
    return sorted(path.stem for path in BUILTIN_CONFIGS.glob("*.yaml"))


def resolve_config_path(path_or_name: str | Path) -> Path:
    """The YAML file for a path, or for a builtin name such as `demo`."""
    path = Path(path_or_name)
    if path.is_file():
        return path
    if str(path_or_name) in builtin_configs():
        return BUILTIN_CONFIGS / f"{path_or_name}.yaml"
    raise ConfigError(f"{path_or_name}: no such config file, nor a builtin config "
                      f"(builtins: {', '.join(builtin_configs())})")


def load_config(path_or_name: str | Path) -> PipelineConfig:
    """Reads and validates a pipeline config (a YAML path or a builtin name).

    Raises:
        ConfigError: `FILE:LINE: KEY: problem, got VALUE` for the first problem found.
    """
    return load_yaml(resolve_config_path(path_or_name), PipelineConfig, moved=MOVED_KEYS)



def check_corpus_files(path_or_name: str | Path, config: PipelineConfig) -> None:
    """Checks that the corpus files of a `files` source exist, before any work (`prepare` and
    `run` read them; later stages read the prepared copy).

    Raises:
        ConfigError: `FILE:LINE: data.train.src: PATH: no such file`, for the first missing.
    """
    for split in ("train", "dev", "test"):
        files = getattr(config.data, split)
        for side in ("src", "tgt", "tsv"):
            path = getattr(files, side) if files else None
            if path is not None and not path.is_file():
                problem = "a directory, not a file" if path.is_dir() else "no such file"
                raise key_error(resolve_config_path(path_or_name), f"data.{split}.{side}",
                                f"{path}: {problem}")
