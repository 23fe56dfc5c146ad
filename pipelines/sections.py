"""The config sections of the stages after prepare: `model` (the Transformer and its dtype
policy), `train` (the recipe), `evaluate` (the decoding settings of evaluate and every export)
and `export` (formats, the SavedModel's dtype). Each is a frozen dataclass whose
`__post_init__` checks its values (`FieldError` names the key); pipelines.config assembles them.
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

from keras_transformer.config import ModelConfig, ModelConfigError
from keras_transformer.decoding_settings import DecodingSettings, DecodingSettingsError
from keras_transformer.precision import resolve_dtype
from pipelines.training.model_size import AUTO_PRESET, SIZE_FIELDS, SIZE_LADDER, largest_size
from pipelines.yaml_dataclasses import ConfigError, FieldError

EXPORT_FORMATS = ("saved_model", "onnx", "ctranslate2")
VOCABULARY_FIELDS = ("vocab_size", "pad_id")  # ModelConfig fields set by the run's tokenizer
DECODING = DecodingSettings()  # the defaults of the `evaluate` section's decoding settings


def _optional_model_fields() -> list[tuple[str, Any, None]]:
    """ModelConfig's fields but the vocabulary's, each optional: (name, type | None, None)."""
    hints = typing.get_type_hints(ModelConfig)
    return [(field.name, hints[field.name] | None, None)
            for field in dataclasses.fields(ModelConfig) if field.name not in VOCABULARY_FIELDS]


ModelOverrides = dataclasses.make_dataclass("ModelOverrides", _optional_model_fields(),
                                            frozen=True, namespace={"__module__": __name__})


@dataclasses.dataclass(frozen=True)
class ModelSection(ModelOverrides):
    """The `model` section: a preset of keras_transformer.config (tiny, small, base, big), or
    `auto` (train chooses the size its train.max_minutes budget trains best on this machine:
    pipelines/training/size_choice.py); any ModelConfig field overridden (None keeps the
    preset's value; ModelConfig checks the merged fields, `auto` refuses the size fields it
    chooses); and the Keras dtype policy (`auto`: chosen for the machine each stage runs on,
    see `resolved_dtype`). The vocabulary comes from the run's tokenizer, made by `prepare`:
    until then the checks use ModelConfig's default vocab_size, which only pad_id's depends on.
    """

    preset: Literal["auto", "tiny", "small", "base", "big"] = "base"
    dtype: Literal["auto", "float32", "mixed_bfloat16", "mixed_float16"] = "auto"

    def __post_init__(self) -> None:
        chosen = [name for name in SIZE_FIELDS if name in self.overrides()]
        if self.preset == "auto" and chosen:
            raise FieldError(chosen[0], "is chosen by `preset: auto` (the size for the "
                             "train.max_minutes budget): remove it, or name a preset")
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
        run's tokenizer's; default ModelConfig's). For `auto`, until train chooses a size
        (`sized`), the largest size it may choose."""
        if self.preset == "auto":
            return self.sized(largest_size()).model_config(**vocabulary)
        return ModelConfig.from_preset(self.preset, **vocabulary, **self.overrides())

    def sized(self, size: str) -> ModelSection:
        """This section with `preset: auto` replaced by a size of the ladder
        (`pipelines.training.model_size.SIZE_LADDER`)."""
        return dataclasses.replace(self, preset=AUTO_PRESET, **SIZE_LADDER[size])

    def resolved_dtype(self) -> tuple[str, str]:
        """(the Keras dtype policy on this machine, why): `auto` resolved and an explicit policy
        checked by keras_transformer.precision.resolve_dtype.

        Raises:
            ConfigError: mixed_bfloat16 where ONEDNN_MAX_CPU_ISA would make oneDNN abort.
        """
        return _resolved_dtype("model.dtype", self.dtype)


@dataclasses.dataclass(frozen=True)
class EarlyStopping:
    """`train.early_stopping`: the validation metric that ranks checkpoints (`keep_best`) and
    ends training after `patience` validations without improving on its best by more than
    `min_delta` (patience 0: never)."""

    metric: Literal["dev_loss", "dev_bleu", "dev_chrf"] = "dev_loss"
    patience: int = 0
    min_delta: float = 0.0

    def __post_init__(self) -> None:
        if self.patience < 0:
            raise FieldError("patience", f"must be at least 0 (0: off), got {self.patience!r}")
        if self.min_delta < 0:
            raise FieldError("min_delta", f"must be at least 0, got {self.min_delta!r}")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The `train` section: the paper's recipe (section 5.3) and the run's bookkeeping.

    An update sums `accumulate_steps` batches of `batch_tokens` (split evenly over the
    replicas); the loss is divided by the real target tokens of all of them. Pairs are read in
    an order shuffled within `shuffle_buffer` pairs. Intervals set to 0 are off. Training ends
    at `steps` or at `max_minutes`, whichever comes first.

    `init_from` (fine-tuning, domain adaptation) starts the run from the weights of another:
    a run directory (its averaged checkpoint, else its latest) or a checkpoint prefix, relative
    to the working directory like `run_dir`. The run keeps the parent's vocabulary (`prepare`
    copies its spm.model) and architecture (the `model` section must describe it); the
    optimizer and the schedule start afresh, from `warmup_steps` and `learning_rate_scale`.
    See pipelines/training/parent.py.
    """

    steps: int = 100_000  # updates; the paper trains the base model 100k steps, big 300k
    batch_tokens: int = 4096  # per side and batch, padding included, over all replicas
    shuffle_buffer: int = 100_000  # pairs
    # A wall-clock budget for the stage (0: none); it compresses the recipe to fit (see
    # pipelines/training/budget.py) and ends training with a checkpoint when time is up.
    max_minutes: float = 0.0
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0  # multiplies the learning rate of eq. 3
    accumulate_steps: int = 1
    checkpoint_every_steps: int = 1000
    checkpoint_every_minutes: float = 10.0  # the paper's interval
    keep_checkpoints: int = 5
    average_last: int = 5  # the paper averages the last 5 checkpoints (base), 20 (big)
    average_from: Literal["last", "best"] = "last"  # the last checkpoints, or the best kept
    validate_every_steps: int = 1000  # dev loss
    bleu_every_steps: int = 5000  # dev BLEU and chrF
    bleu_max_sentences: int = 500  # the first dev pairs scored for BLEU
    bleu_beam_size: int = 1  # dev BLEU's decoding: 1 is greedy search
    # Model-only checkpoints of the keep_best best validations by early_stopping.metric
    # (checkpoints/best/; 0: none), for `evaluate.weights: best` and `average_from: best`.
    keep_best: int = 0
    early_stopping: EarlyStopping = dataclasses.field(default_factory=EarlyStopping)
    log_every_steps: int = 100
    jit_compile: bool = False  # XLA: one compilation per batch shape
    # An exponential moving average of the weights (0: off), written to checkpoints/ema for
    # evaluate and export (`evaluate.weights: ema`); see pipelines/training/weight_average.py.
    ema_decay: float = 0.0
    # Guided alignment (0: off): the weight of one head's alignment cross-entropy in the loss
    # (keras_transformer/guided_alignment.py; OpenNMT-tf's default 1, Garg et al. 0.05), with
    # data.alignments' gold links; word alignments then read that head (model.alignment_heads 1).
    guided_alignment_weight: float = 0.0
    seed: int = 1234  # initialisation and dropout
    init_from: str | None = None  # the parent run directory or checkpoint of a fine-tuning

    def __post_init__(self) -> None:
        if self.init_from is not None and not self.init_from.strip():
            raise FieldError("init_from", "must name a run directory or a checkpoint, got ''")
        for key, low in (("steps", 1), ("batch_tokens", 1), ("shuffle_buffer", 1),
                         ("warmup_steps", 1), ("accumulate_steps", 1),
                         ("checkpoint_every_steps", 0), ("keep_checkpoints", 1),
                         ("average_last", 1), ("validate_every_steps", 0),
                         ("bleu_every_steps", 0), ("bleu_max_sentences", 1),
                         ("bleu_beam_size", 1), ("keep_best", 0), ("log_every_steps", 1)):
            if getattr(self, key) < low:
                raise FieldError(key, f"must be at least {low}, got {getattr(self, key)!r}")
        if self.learning_rate_scale <= 0:
            raise FieldError("learning_rate_scale",
                             f"must be positive, got {self.learning_rate_scale!r}")
        if self.guided_alignment_weight < 0:
            raise FieldError("guided_alignment_weight", f"must be at least 0 (0: off), "
                             f"got {self.guided_alignment_weight!r}")
        if not 0 <= self.ema_decay < 1:
            raise FieldError("ema_decay", f"must be in [0, 1) (0: off; 0.999 averages about "
                             f"the last 1,000 updates), got {self.ema_decay!r}")
        if self.max_minutes < 0:
            raise FieldError("max_minutes", f"must be at least 0 (0: no budget), "
                             f"got {self.max_minutes!r}")
        if self.checkpoint_every_minutes < 0:
            raise FieldError("checkpoint_every_minutes",
                             f"must be at least 0, got {self.checkpoint_every_minutes!r}")
        metric = self.early_stopping.metric
        interval = "validate_every_steps" if metric == "dev_loss" else "bleu_every_steps"
        if (self.keep_best or self.early_stopping.patience) and not getattr(self, interval):
            raise FieldError("early_stopping.metric", f"{metric} is measured every "
                             f"train.{interval} steps, which is 0 (off): set it")
        if self.average_from == "best" and self.average_last > self.keep_best:
            raise FieldError("average_last", f"must be at most keep_best ({self.keep_best}) "
                             f"to average the best, got {self.average_last!r}")
        if self.average_last > self.keep_checkpoints:
            raise FieldError("average_last", f"must be at most keep_checkpoints "
                             f"({self.keep_checkpoints}), got {self.average_last!r}")


@dataclasses.dataclass(frozen=True)
class EvaluateConfig:
    """The `evaluate` section: the decoding settings of `evaluate` and of every export
    (`keras_transformer.decoding_settings.DecodingSettings`, whose defaults and checks these
    are: the paper's beam 4, alpha 0.6, at most source length + 50 output tokens), the batch
    size, and the splits `run` scores with sacrebleu."""

    beam_size: int = DECODING.beam_size
    alpha: float = DECODING.alpha
    # When a sentence's search ends: "full" (fairseq's) once beam_size hypotheses have finished;
    # "bound" (tensor2tensor's) only once no alive one can beat them (1.3-1.6x slower on the demo).
    stop: Literal["full", "bound"] = DECODING.stop
    extra_length: int = DECODING.extra_length
    batch_size: int = 32  # sentences per decoding batch
    splits: tuple[str, ...] = ("test",)  # what `run` evaluates
    # The weights evaluate and export use: the averaged checkpoint (the latest training one
    # until `average` has run), the moving average (train.ema_decay), the best validation's
    # (train.keep_best) or the latest checkpoint.
    weights: Literal["averaged", "ema", "best", "latest"] = "averaged"

    def __post_init__(self) -> None:
        try:
            self.decoding(max_source_length=None)
        except DecodingSettingsError as error:
            raise FieldError(error.field, str(error)) from None
        if self.batch_size < 1:
            raise FieldError("batch_size", f"must be at least 1, got {self.batch_size!r}")
        unknown = sorted(set(self.splits) - {"dev", "test"})
        if unknown or not self.splits:
            raise FieldError("splits", f"must name dev and/or test, got {list(self.splits)!r}")

    def decoding(self, max_source_length: int | None) -> DecodingSettings:
        """These settings for the Translator, sources cut to `max_source_length` tokens."""
        return DecodingSettings(beam_size=self.beam_size, alpha=self.alpha, stop=self.stop,
                                extra_length=self.extra_length,
                                max_source_length=max_source_length)


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """The `export` section: the formats written (decoding settings come from `evaluate`) and
    the SavedModel's Keras dtype policy. `float32` (the default) runs on every CPU and GPU;
    `auto` is bfloat16 where the exporting machine runs it natively (`model.dtype`'s rule), for
    a SavedModel served on that kind of machine: on a CPU without native bfloat16 it runs
    emulated, slower than float32. The ONNX and CTranslate2 exports are float32 (and int8).
    `saved_model_xla_max_batch` > 0: the SavedModel beam-searches batches of up to that many
    sources in one XLA-compiled program (`keras_transformer.compiled_search`), which TF
    Serving runs with --xla_cpu_compilation_enabled=true on CPUs (README.md, "Serving"); 0 (the
    default) serves on a stock tensorflow_model_server. `saved_model_parallel_searches` > 1:
    the SavedModel's graph beam search runs that many searches side by side over a batch's
    rows (`keras_transformer.parallel_search`), for CPU servers run with
    --tensorflow_intra_op_parallelism=1; 1 (the default) is one search, as GPUs want it.
    """

    formats: tuple[str, ...] = EXPORT_FORMATS
    saved_model_dtype: Literal["float32", "auto", "mixed_bfloat16", "mixed_float16"] = "float32"
    saved_model_xla_max_batch: int = 0
    saved_model_parallel_searches: int = 1

    def __post_init__(self) -> None:
        unknown = sorted(set(self.formats) - set(EXPORT_FORMATS))
        if unknown or not self.formats:
            raise FieldError("formats", f"must name {' and/or '.join(EXPORT_FORMATS)}, "
                             f"got {list(self.formats)!r}")
        limit = self.saved_model_xla_max_batch
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise FieldError("saved_model_xla_max_batch", f"must be an integer of at least 0 "
                             f"(0: no XLA), got {limit!r}")
        parts = self.saved_model_parallel_searches
        if isinstance(parts, bool) or not isinstance(parts, int) or not 1 <= parts <= 64:
            raise FieldError("saved_model_parallel_searches", f"must be an integer from 1 to "
                             f"64 (1: one search), got {parts!r}")

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
