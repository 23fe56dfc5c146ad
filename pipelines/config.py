"""The pipeline config: YAML -> validated frozen dataclasses (see pipelines.yaml_dataclasses),
with errors naming file, line and key.

A config is a YAML mapping: `name` (the run name), optional `run_dir` (default `runs/NAME`,
relative to the working directory) and one section per stage. Each section is a frozen
dataclass and one field of `PipelineConfig`: adding a section is one dataclass plus one field.
A relative `Path` resolves against the directory of the config file. The whole config is
checked when it loads, the model's hyperparameters by keras_transformer.config.ModelConfig.

Example:
    >>> config = load_config("demo")
    >>> config.data.source, config.run_path
    ('bible:en-fr', PosixPath('runs/demo'))
"""
from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path
from typing import Any, Literal

from keras_transformer.config import ModelConfig, ModelConfigError
from keras_transformer.precision import resolve_dtype
from pipelines.files import file_in_the_way
from pipelines.shards import MAX_SHARDS
from pipelines.source_spec import check_source_spec
from pipelines.yaml_dataclasses import ConfigError, FieldError, key_error, load_yaml

BUILTIN_CONFIGS = Path(__file__).with_name("configs")  # package data: pipelines/configs/*.yaml
EXPORT_FORMATS = ("saved_model", "onnx", "ctranslate2")
VOCABULARY_FIELDS = ("vocab_size", "pad_id")  # ModelConfig fields set by the run's tokenizer


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
    batch_tokens: int = 4096  # per side and batch, padding included, over all replicas
    shuffle_buffer: int = 100_000
    shards: int | None = None  # train shard files (default: one per 500,000 pairs, at most 256)
    seed: int = 1234  # shuffling, held-out sampling, vocabulary sampling

    def __post_init__(self) -> None:
        message = check_source_spec(self.source)
        if message:
            raise FieldError("source", f"{message}, got {self.source!r}")
        for key, low in (("holdout", 1), ("vocab_size", 300), ("vocab_max_sentences", 1000),
                         ("max_length", 3), ("batch_tokens", 1), ("shuffle_buffer", 1)):
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
        if self.batch_tokens < self.max_length:
            raise FieldError("batch_tokens", f"must be at least max_length ({self.max_length}) "
                             f"so that the longest pair fits a batch, got {self.batch_tokens!r}")
        kind = self.source.split(":")[0]
        if kind == "files" and self.train is None:
            raise FieldError("source", "source 'files' needs a train split (data.train)")
        for key in ("train", "dev", "test"):
            if kind != "files" and getattr(self, key) is not None:
                raise FieldError(key, f"only source 'files' takes split files, not {self.source!r}")
        for key in ("src_lang", "tgt_lang"):
            if kind == "bible" and getattr(self, key) is not None:
                raise FieldError(key, "the languages of bible:SRC-TGT come from the source")


def _optional_model_fields() -> list[tuple[str, Any, None]]:
    """ModelConfig's fields but the vocabulary's, each optional: (name, type | None, None)."""
    hints = typing.get_type_hints(ModelConfig)
    return [(field.name, hints[field.name] | None, None)
            for field in dataclasses.fields(ModelConfig) if field.name not in VOCABULARY_FIELDS]


ModelOverrides = dataclasses.make_dataclass("ModelOverrides", _optional_model_fields(),
                                            frozen=True, namespace={"__module__": __name__})


@dataclasses.dataclass(frozen=True)
class ModelSection(ModelOverrides):
    """The `model` section: a preset of keras_transformer.config (tiny, small, base, big), any
    ModelConfig field overridden (None keeps the preset's value; ModelConfig checks the merged
    fields) and the Keras dtype policy (`auto`: chosen for the machine each stage runs on, see
    `resolved_dtype`). The vocabulary comes from the run's tokenizer, made by `prepare`: until
    then the checks use ModelConfig's default vocab_size, which only pad_id's depends on.
    """

    preset: Literal["tiny", "small", "base", "big"] = "base"
    dtype: Literal["auto", "float32", "mixed_bfloat16", "mixed_float16"] = "auto"

    def __post_init__(self) -> None:
        try:
            self.model_config()
        except ModelConfigError as error:
            set_here = [name for name in error.fields if name in self.overrides()]
            if not set_here:
                raise
            raise FieldError(set_here[0], str(error)) from None

    def overrides(self) -> dict[str, Any]:
        """The ModelConfig fields set in this section."""
        return {field.name: getattr(self, field.name)
                for field in dataclasses.fields(ModelOverrides)
                if getattr(self, field.name) is not None}

    def model_config(self, **vocabulary: int) -> ModelConfig:
        """The preset with this section's overrides and `vocabulary` (vocab_size, pad_id: the
        run's tokenizer's; default ModelConfig's)."""
        return ModelConfig.from_preset(self.preset, **vocabulary, **self.overrides())

    def resolved_dtype(self) -> tuple[str, str]:
        """(the Keras dtype policy on this machine, why): `auto` resolved and an explicit policy
        checked by keras_transformer.precision.resolve_dtype.

        Raises:
            ConfigError: mixed_bfloat16 where ONEDNN_MAX_CPU_ISA would make oneDNN abort.
        """
        return _resolved_dtype("model.dtype", self.dtype)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The `train` section: the paper's recipe (section 5.3) and the run's bookkeeping.

    An update sums `accumulate_steps` batches of `data.batch_tokens`; the loss is divided by
    the real target tokens of all of them. Intervals set to 0 are off. Training ends at `steps`
    or at `max_minutes`, whichever comes first.

    `init_from` (fine-tuning, domain adaptation) starts the run from the weights of another:
    a run directory (its averaged checkpoint, else its latest) or a checkpoint prefix, relative
    to the working directory like `run_dir`. The run keeps the parent's vocabulary (`prepare`
    copies its spm.model) and architecture (the `model` section must describe it); the
    optimizer and the schedule start afresh, from `warmup_steps` and `learning_rate_scale`.
    See pipelines/parent.py.
    """

    steps: int = 100_000  # updates; the paper trains the base model 100k steps, big 300k
    # A wall-clock budget for the stage (0: none); it compresses the recipe to fit (see
    # pipelines/budget.py) and ends training with a checkpoint when time is up.
    max_minutes: float = 0.0
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0  # multiplies the learning rate of eq. 3
    accumulate_steps: int = 1
    checkpoint_every_steps: int = 1000
    checkpoint_every_minutes: float = 10.0  # the paper's interval
    keep_checkpoints: int = 5
    average_last: int = 5  # the paper averages the last 5 checkpoints (base), 20 (big)
    validate_every_steps: int = 1000  # dev loss
    bleu_every_steps: int = 5000  # greedy dev BLEU
    bleu_max_sentences: int = 500  # the first dev pairs scored for BLEU
    log_every_steps: int = 100
    jit_compile: bool = False  # XLA: one compilation per batch shape
    seed: int = 1234  # initialisation and dropout
    init_from: str | None = None  # the parent run directory or checkpoint of a fine-tuning

    def __post_init__(self) -> None:
        if self.init_from is not None and not self.init_from.strip():
            raise FieldError("init_from", "must name a run directory or a checkpoint, got ''")
        for key, low in (("steps", 1), ("warmup_steps", 1), ("accumulate_steps", 1),
                         ("checkpoint_every_steps", 0), ("keep_checkpoints", 1),
                         ("average_last", 1), ("validate_every_steps", 0),
                         ("bleu_every_steps", 0), ("bleu_max_sentences", 1),
                         ("log_every_steps", 1)):
            if getattr(self, key) < low:
                raise FieldError(key, f"must be at least {low}, got {getattr(self, key)!r}")
        if self.learning_rate_scale <= 0:
            raise FieldError("learning_rate_scale",
                             f"must be positive, got {self.learning_rate_scale!r}")
        if self.max_minutes < 0:
            raise FieldError("max_minutes", f"must be at least 0 (0: no budget), "
                             f"got {self.max_minutes!r}")
        if self.checkpoint_every_minutes < 0:
            raise FieldError("checkpoint_every_minutes",
                             f"must be at least 0, got {self.checkpoint_every_minutes!r}")
        if self.average_last > self.keep_checkpoints:
            raise FieldError("average_last", f"must be at most keep_checkpoints "
                             f"({self.keep_checkpoints}), got {self.average_last!r}")


@dataclasses.dataclass(frozen=True)
class EvaluateConfig:
    """The `evaluate` section: beam search as in the paper (section 6.1: beam 4, alpha 0.6,
    at most source length + 50 output tokens), scored with sacrebleu."""

    beam_size: int = 4
    alpha: float = 0.6
    # When a sentence's search ends: "full" (fairseq's) once beam_size hypotheses have finished;
    # "bound" (tensor2tensor's) only once no alive one can beat them (1.3-1.6x slower on the demo).
    stop: Literal["full", "bound"] = "full"  # keras_transformer.decoding.STOP_RULES
    extra_length: int = 50
    batch_size: int = 32  # sentences per decoding batch
    splits: tuple[str, ...] = ("test",)  # what `run` evaluates

    def __post_init__(self) -> None:
        for key, low in (("beam_size", 1), ("extra_length", 0), ("batch_size", 1)):
            if getattr(self, key) < low:
                raise FieldError(key, f"must be at least {low}, got {getattr(self, key)!r}")
        if self.alpha < 0:
            raise FieldError("alpha", f"must be at least 0, got {self.alpha!r}")
        unknown = sorted(set(self.splits) - {"dev", "test"})
        if unknown or not self.splits:
            raise FieldError("splits", f"must name dev and/or test, got {list(self.splits)!r}")


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """The `export` section: the formats written (decoding settings come from `evaluate`) and
    the SavedModel's Keras dtype policy. `float32` (the default) runs on every CPU and GPU;
    `auto` is bfloat16 where the exporting machine runs it natively (`model.dtype`'s rule), for
    a SavedModel served on that kind of machine: on a CPU without native bfloat16 it runs
    emulated, slower than float32. The ONNX and CTranslate2 exports are float32 (and int8).
    """

    formats: tuple[str, ...] = EXPORT_FORMATS
    saved_model_dtype: Literal["float32", "auto", "mixed_bfloat16", "mixed_float16"] = "float32"

    def __post_init__(self) -> None:
        unknown = sorted(set(self.formats) - set(EXPORT_FORMATS))
        if unknown or not self.formats:
            raise FieldError("formats", f"must name {' and/or '.join(EXPORT_FORMATS)}, "
                             f"got {list(self.formats)!r}")

    def resolved_saved_model_dtype(self) -> tuple[str, str]:
        """(the SavedModel's Keras dtype policy on this machine, why), as `model.dtype`'s.

        Raises:
            ConfigError: mixed_bfloat16 where ONEDNN_MAX_CPU_ISA would make oneDNN abort.
        """
        return _resolved_dtype("export.saved_model_dtype", self.saved_model_dtype)


def _resolved_dtype(key: str, requested: str) -> tuple[str, str]:
    """keras_transformer.precision.resolve_dtype, its refusal a ConfigError naming `key`."""
    try:
        return resolve_dtype(requested)
    except ValueError as error:
        raise ConfigError(f"{key}: {error}") from None


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
    return load_yaml(resolve_config_path(path_or_name), PipelineConfig)



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
