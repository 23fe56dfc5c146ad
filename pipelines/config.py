"""YAML pipeline config -> validated frozen dataclasses, with errors naming file, line and key.

A config is a YAML mapping: `name` (the run name), optional `run_dir` (default `runs/NAME`,
relative to the working directory) and one section per stage. Each section is a frozen
dataclass and one field of `PipelineConfig`: adding a section is one dataclass plus one field.
Validation is generic over dataclass fields (str, int, float, bool, Path, Literal, Optional,
tuple[X, ...], nested dataclasses); a `Path` field that is relative resolves against the
directory of the config file. Semantic checks live in each dataclass's `__post_init__`: a
`FieldError` names its key, any other `ValueError` is reported against the section.

Example:
    >>> config = load_config("demo")
    >>> config.data.source, config.run_path
    ('bible:en-fr', PosixPath('runs/demo'))
"""
from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from keras_transformer.precision import resolve_dtype
from pipelines import InputError
from pipelines.shards import MAX_SHARDS
from pipelines.sources import check_source_spec

BUILTIN_CONFIGS = Path(__file__).with_name("configs")  # package data: pipelines/configs/*.yaml
T = TypeVar("T")
EXPORT_FORMATS = ("saved_model", "onnx")


class ConfigError(InputError):
    """An invalid pipeline config; the message starts with `FILE:LINE: KEY:`."""


class FieldError(ValueError):
    """Raised by a dataclass `__post_init__` to blame one of its fields."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


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


@dataclasses.dataclass(frozen=True)
class ModelSection:
    """The `model` section: a preset of keras_transformer.config (tiny, small, base, big), any of
    its fields overridden (None keeps the preset's value), and the Keras dtype policy (`auto`:
    chosen for the machine each stage runs on, see `resolved_dtype`).

    The vocabulary size comes from the run's SentencePiece model. The full check of the
    merged fields (e.g. d_model divisible by num_heads) runs when the model is built.
    """

    preset: Literal["tiny", "small", "base", "big"] = "base"
    dtype: Literal["auto", "float32", "mixed_bfloat16", "mixed_float16"] = "auto"
    num_encoder_layers: int | None = None
    num_decoder_layers: int | None = None
    d_model: int | None = None
    d_ff: int | None = None
    num_heads: int | None = None
    key_dim: int | None = None
    value_dim: int | None = None
    dropout: float | None = None
    attention_dropout: float | None = None
    relu_dropout: float | None = None
    label_smoothing: float | None = None
    norm_first: bool | None = None
    positional_encoding: Literal["sinusoidal", "learned"] | None = None
    max_length: int | None = None  # positions the model supports, at least data.max_length
    layer_norm_epsilon: float | None = None

    def __post_init__(self) -> None:
        for key in ("num_encoder_layers", "num_decoder_layers", "d_model", "d_ff", "num_heads",
                    "key_dim", "value_dim", "max_length"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise FieldError(key, f"must be positive, got {getattr(self, key)!r}")
        for key in ("dropout", "attention_dropout", "relu_dropout", "label_smoothing"):
            if getattr(self, key) is not None and not 0 <= getattr(self, key) < 1:
                raise FieldError(key, f"must be in [0, 1), got {getattr(self, key)!r}")
        if self.layer_norm_epsilon is not None and self.layer_norm_epsilon <= 0:
            raise FieldError("layer_norm_epsilon",
                             f"must be positive, got {self.layer_norm_epsilon!r}")

    def overrides(self) -> dict[str, Any]:
        """The ModelConfig fields set in this section."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                if field.name not in ("preset", "dtype") and getattr(self, field.name) is not None}

    def resolved_dtype(self) -> tuple[str, str]:
        """(the Keras dtype policy on this machine, why): `auto` resolved and an explicit policy
        checked by keras_transformer.precision.resolve_dtype.

        Raises:
            ConfigError: mixed_bfloat16 where ONEDNN_MAX_CPU_ISA would make oneDNN abort.
        """
        try:
            return resolve_dtype(self.dtype)
        except ValueError as error:
            raise ConfigError(f"model.dtype: {error}") from None


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The `train` section: the paper's recipe (section 5.3) and the run's bookkeeping.

    An update sums `accumulate_steps` batches of `data.batch_tokens`; the loss is divided by
    the real target tokens of all of them. Intervals set to 0 are off. Training ends at `steps`
    or at `max_minutes`, whichever comes first.
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

    def __post_init__(self) -> None:
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
    """The `export` section: the formats written (decoding settings come from `evaluate`)."""

    formats: tuple[str, ...] = EXPORT_FORMATS

    def __post_init__(self) -> None:
        unknown = sorted(set(self.formats) - set(EXPORT_FORMATS))
        if unknown or not self.formats:
            raise FieldError("formats", f"must name {' and/or '.join(EXPORT_FORMATS)}, "
                             f"got {list(self.formats)!r}")


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


def load_yaml(path: Path, cls: type[T]) -> T:
    """Reads a YAML mapping into the dataclass `cls`, validating every key against its type."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise ConfigError(f"{path}:{line}: not valid UTF-8") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(error, 'problem', error)}") from None
    lines: dict[str, int] = {}
    if node is not None:
        _key_lines(node, "", lines)
    return _Builder(path, lines).build(cls, data, "")


def _key_lines(node: yaml.Node, prefix: str, lines: dict[str, int]) -> None:
    """Records the 1-based line of every key path (`data.vocab_size`, `a.b[2]`) under a node."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
            lines[key] = key_node.start_mark.line + 1
            _key_lines(value_node, key, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[f"{prefix}[{index}]"] = item.start_mark.line + 1
            _key_lines(item, f"{prefix}[{index}]", lines)


@dataclasses.dataclass
class _Builder:
    """Converts plain YAML data into dataclasses, checking every value against its type."""

    path: Path
    lines: dict[str, int]

    def error(self, key: str, message: str) -> ConfigError:
        probe = key
        while probe and probe not in self.lines:
            probe = probe.rpartition(".")[0]
        where = f"{self.path}:{self.lines[probe]}" if probe else f"{self.path}:1"
        return ConfigError(f"{where}: {key or '(top level)'}: {message}")

    def build(self, cls: type, data: Any, key: str) -> Any:
        if not isinstance(data, dict):
            raise self.error(key, f"expected a mapping of {cls.__name__} keys, got {data!r}")
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        hints = typing.get_type_hints(cls)
        join = (lambda name: f"{key}.{name}") if key else (lambda name: str(name))
        for name in data:
            if name not in fields:
                raise self.error(join(name), f"unknown key; expected one of {', '.join(fields)}")
        for name, field in fields.items():
            required = (field.default is dataclasses.MISSING
                        and field.default_factory is dataclasses.MISSING)
            if required and name not in data:
                raise self.error(join(name), "missing required key")
        values = {name: self.convert(hints[name], value, join(name))
                  for name, value in data.items()}
        try:
            return cls(**values)
        except FieldError as error:
            raise self.error(join(error.key), str(error)) from None
        except ValueError as error:
            raise self.error(key, str(error)) from None

    def convert(self, hint: Any, value: Any, key: str) -> Any:
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if dataclasses.is_dataclass(hint):
            return self.build(hint, value, key)
        if origin in (typing.Union, types.UnionType):
            if value is None and type(None) in args:
                return None
            options = [arg for arg in args if arg is not type(None)]
            if len(options) == 1:
                return self.convert(options[0], value, key)
            for option in options:
                try:
                    return self.convert(option, value, key)
                except ConfigError:
                    continue
            raise self.error(key, f"expected one of {options}, got {value!r}")
        if origin is Literal:
            if value not in args:
                raise self.error(key, f"expected one of {', '.join(map(str, args))}, got {value!r}")
            return value
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            if not isinstance(value, list):
                raise self.error(key, f"expected a list, got {value!r}")
            return tuple(self.convert(args[0], item, f"{key}[{i}]") for i, item in enumerate(value))
        if hint is Any:
            return value
        if hint is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if hint is Path and isinstance(value, str):
            return Path(value) if Path(value).is_absolute() else self.path.parent / value
        if hint in (str, int, float, bool) and type(value) is hint:
            return value
        if hint in (str, int, float, bool, Path):
            expected = "a path" if hint is Path else hint.__name__
            raise self.error(key, f"expected {expected}, got {value!r}")
        raise TypeError(f"{key}: unsupported config field type {hint!r}")
