"""The `evaluate` section: the decoding settings of `evaluate` and of every export, the batch
size, the splits `run` scores and the weights evaluate and export read.

The decoding keys (evaluate.beam_size, alpha, stop, extra_length) are DecodingSettings' fields,
taken from it with their types and defaults (`DecodingKeys`): the list, the defaults and the
checks live once, in keras_transformer.decoding_settings. The source cut is the run's
(data.max_length, given to `decoding`), not a key.

Example:
    >>> EvaluateConfig(beam_size=5).decoding(max_source_length=128)
    DecodingSettings(beam_size=5, alpha=0.6, stop='full', extra_length=50, max_source_length=128)
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

from keras_transformer.decoding_settings import DecodingSettings, DecodingSettingsError
from pipelines.yaml_dataclasses import FieldError

NOT_KEYS = ("max_source_length",)  # DecodingSettings' fields that the run sets, not the config


def _decoding_fields() -> list[tuple[str, Any, dataclasses.Field]]:
    """DecodingSettings' fields but NOT_KEYS: (name, type, field with its default)."""
    hints = typing.get_type_hints(DecodingSettings)
    return [(field.name, hints[field.name], dataclasses.field(default=field.default))
            for field in dataclasses.fields(DecodingSettings) if field.name not in NOT_KEYS]


DecodingKeys = dataclasses.make_dataclass("DecodingKeys", _decoding_fields(), frozen=True,
                                          namespace={"__module__": __name__})
DECODING_KEYS = tuple(field.name for field in dataclasses.fields(DecodingKeys))


@dataclasses.dataclass(frozen=True)
class EvaluateConfig(DecodingKeys):
    """The `evaluate` section: DecodingSettings' keys (its defaults and checks: the paper's beam
    4, alpha 0.6, at most source length + 50 output tokens), the batch size, and the splits
    `run` scores with sacrebleu."""

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
        return DecodingSettings(**{name: getattr(self, name) for name in DECODING_KEYS},
                                max_source_length=max_source_length)
