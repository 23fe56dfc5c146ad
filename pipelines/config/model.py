"""The `model` section: a preset of keras_transformer.config or `auto`, any ModelConfig field
overridden, and the Keras dtype policy; and the ladder of sizes `auto` chooses from.

`auto` (pipelines/training/size_choice.py chooses for the train.max_minutes budget) picks a
size of SIZE_LADDER, each named LAYERSxD_MODEL: encoder and decoder layers and model width,
with d_ff = 4 d_model and 4 heads (the `small` preset's proportions), so that a smaller size
trains more tokens in the same time. The size chosen is recorded beside the checkpoints
(pipelines.checkpoints.size_record).

Example:
    >>> ModelSection(preset="tiny", dropout=0.2).model_config(vocab_size=8000).dropout
    0.2
    >>> ModelSection(preset="auto").sized("2x128").model_config().d_model
    128
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

from keras_transformer.config import ModelConfig, ModelConfigError
from keras_transformer.precision import resolve_dtype
from pipelines.yaml_dataclasses import ConfigError, FieldError

VOCABULARY_FIELDS = ("vocab_size", "pad_id")  # ModelConfig fields set by the run's tokenizer
AUTO_PRESET = "small"  # the preset whose other fields (dropout, label smoothing...) auto keeps
SIZE_FIELDS = ("num_encoder_layers", "num_decoder_layers", "d_model", "d_ff", "num_heads")


def size_fields(encoder_layers: int, decoder_layers: int, width: int) -> dict[str, int]:
    """The SIZE_FIELDS of a shape in the `small` preset's proportions: d_ff 4 x width, 4 heads.

    >>> size_fields(6, 2, 192)["d_ff"]
    768
    """
    return dict(zip(SIZE_FIELDS, (encoder_layers, decoder_layers, width, 4 * width, 4)))


SIZE_LADDER: dict[str, dict[str, Any]] = {
    name: size_fields(layers, layers, width)
    for name, layers, width in (("2x128", 2, 128), ("3x192", 3, 192), ("3x256", 3, 256))
}


def largest_size() -> str:
    """The ladder's largest size: what `auto` stands for in the checks made before train
    chooses."""
    return list(SIZE_LADDER)[-1]


def _optional_model_fields() -> list[tuple[str, Any, None]]:
    """ModelConfig's fields but the vocabulary's, each optional: (name, type | None, None)."""
    hints = typing.get_type_hints(ModelConfig)
    return [(field.name, hints[field.name] | None, None)
            for field in dataclasses.fields(ModelConfig) if field.name not in VOCABULARY_FIELDS]


ModelOverrides = dataclasses.make_dataclass("ModelOverrides", _optional_model_fields(),
                                            frozen=True, namespace={"__module__": __name__})


@dataclasses.dataclass(frozen=True)
class ModelSection(ModelOverrides):
    """The `model` section: a preset of keras_transformer.config (tiny, small, base, big,
    student), or
    `auto` (train chooses the size its train.max_minutes budget trains best on this machine:
    pipelines/training/size_choice.py); any ModelConfig field overridden (None keeps the
    preset's value; ModelConfig checks the merged fields, `auto` refuses the size fields it
    chooses); and the Keras dtype policy (`auto`: chosen for the machine each stage runs on,
    see `resolved_dtype`). The vocabulary comes from the run's tokenizer, made by `prepare`:
    until then the checks use ModelConfig's default vocab_size, which only pad_id's depends on.
    """

    preset: Literal["auto", "tiny", "small", "base", "big", "student"] = "base"
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
        """This section with `preset: auto` replaced by a size of SIZE_LADDER."""
        return dataclasses.replace(self, preset=AUTO_PRESET, **SIZE_LADDER[size])

    def resolved_dtype(self) -> tuple[str, str]:
        """(the Keras dtype policy on this machine, why): `auto` resolved and an explicit policy
        checked by keras_transformer.precision.resolve_dtype.

        Raises:
            ConfigError: a mixed policy where ONEDNN_MAX_CPU_ISA would make oneDNN abort.
        """
        return resolved_dtype_for("model.dtype", self.dtype)


def resolved_dtype_for(key: str, requested: str) -> tuple[str, str]:
    """keras_transformer.precision.resolve_dtype, its refusal a ConfigError naming `key`."""
    try:
        return resolve_dtype(requested)
    except ValueError as error:
        raise ConfigError(f"{key}: {error}") from None
