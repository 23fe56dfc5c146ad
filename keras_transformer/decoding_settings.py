"""How a Transformer decodes, in one typed place: the paper's beam search (section 6.1: beam 4,
alpha 0.6, at most source length + 50 output tokens) and its limits.

Its defaults, its validation, the source cut (`max_source_pieces`, `source_length`,
`cut_source_ids`: max_source_length tokens, EOS included) and the output-length rule are
written here once. The pipeline config's `evaluate` section builds it, the Translator takes it,
every export records it (`to_dict`, in translator.json) and every runtime reads it back
(`from_dict`). No TensorFlow at import, so that `translate --runtime onnx` and `--runtime ct2`
read it without TensorFlow.

Example:
    >>> settings = DecodingSettings(beam_size=5)
    >>> settings.output_limit(12, max_length=256)
    62
    >>> settings.for_model(256).max_source_pieces  # a line's pieces read, then EOS
    255
    >>> DecodingSettings.from_dict(settings.to_dict()) == settings
    True
"""
from __future__ import annotations

import dataclasses
from typing import Any, Literal

STOP_RULES = ("full", "bound", "best")  # when a sentence's beam search ends (search_primitives)


def max_target_pieces(model_max_length: int) -> int:
    """The most pieces of a given target that a model of `model_max_length` positions scores
    (then EOS: `keras_transformer.scoring`)."""
    return model_max_length - 1


class DecodingSettingsError(ValueError):
    """An invalid setting; `field` names it."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(problem)
        self.field = field


def check_stop_rule(stop: str) -> None:
    """Raises DecodingSettingsError (field "stop") unless `stop` is one of STOP_RULES: the
    settings' check, and every search's."""
    if stop not in STOP_RULES:
        raise DecodingSettingsError("stop", f"must be one of {', '.join(STOP_RULES)}, "
                                            f"got {stop!r}")


@dataclasses.dataclass(frozen=True)
class DecodingSettings:
    """Beam search and its limits.

    Attributes:
        beam_size: hypotheses kept per sentence (1: greedy search).
        alpha: the GNMT length penalty exponent (0: plain log-probabilities).
        stop: when a sentence's search ends: "full" (fairseq's) once beam_size hypotheses have
            finished; "bound" (tensor2tensor's) once no alive one can beat them; "best" once
            its best finished hypothesis scores at least its best alive one at the current
            length (CTranslate2 and OpenNMT-py stop when the best extension ends: the fewest
            steps).
        extra_length: output tokens allowed beyond the source length (the paper's 50).
        max_source_length: source tokens kept, EOS included; None: the model's max_length
            (`for_model` resolves it, never above the model's max_length).
    """

    beam_size: int = 4
    alpha: float = 0.6
    stop: Literal["full", "bound", "best"] = "full"
    extra_length: int = 50
    max_source_length: int | None = None

    def __post_init__(self) -> None:
        for field, low in (("beam_size", 1), ("extra_length", 0), ("max_source_length", 1)):
            value = getattr(self, field)
            if value is None and field == "max_source_length":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise DecodingSettingsError(field, f"must be an integer of at least {low}, "
                                                   f"got {value!r}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) \
                or self.alpha < 0:
            raise DecodingSettingsError("alpha", f"must be a number of at least 0, "
                                                 f"got {self.alpha!r}")
        check_stop_rule(self.stop)

    def source_limit(self, model_max_length: int) -> int:
        """Source tokens kept, EOS included: max_source_length, at most the model's."""
        return min(self.max_source_length or model_max_length, model_max_length)

    @property
    def max_source_pieces(self) -> int:
        """The source cut: the most pieces of a line that are read, then its EOS
        (max_source_length - 1), for settings resolved against a model (`for_model`: the
        Translator's and every export's). Every runtime cuts its sources so, as the graphs'
        tokenizer does (`Tokenizer.tokenize(add_eos=True, max_length=max_source_length)`)."""
        return self.max_source_length - 1

    def source_length(self, pieces: int) -> int:
        """The tokens read of a line of `pieces` pieces: at most max_source_pieces of them,
        then EOS."""
        return min(pieces, self.max_source_pieces) + 1

    def cut_source_ids(self, source_ids: Any, model_max_length: int) -> Any:
        """Source ids [batch, time] (pieces, EOS, then PAD; a tensor or an array) cut to
        `source_limit` tokens."""
        return source_ids[:, :self.source_limit(model_max_length)]

    def for_model(self, model_max_length: int) -> DecodingSettings:
        """These settings with max_source_length resolved against the model's max_length."""
        return dataclasses.replace(self, max_source_length=self.source_limit(model_max_length))

    def output_limit(self, source_length: Any, max_length: int) -> Any:
        """The most tokens a translation may have: source length + extra_length, at most the
        model's max_length (its positions). `source_length` an int, or an int32 tensor of
        lengths in graph code (then a tensor of the same shape)."""
        limit = source_length + self.extra_length
        if isinstance(limit, int):
            return min(limit, max_length)
        import tensorflow as tf  # only given a tensor, TensorFlow is already loaded

        return tf.minimum(limit, max_length)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DecodingSettings:
        """The settings an export recorded. Exports made before the stop rule was recorded
        decoded with "bound"; unknown keys (the model config beside them) are ignored.

        Raises:
            DecodingSettingsError: a recorded setting missing or invalid.
        """
        fields = {field.name for field in dataclasses.fields(cls)}
        values = {key: value for key, value in data.items() if key in fields}
        values.setdefault("stop", "bound")
        missing = sorted(fields - set(values))
        if missing:
            raise DecodingSettingsError(missing[0], "missing")
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class SamplingSettings:
    """Random sampling instead of beam search (`keras_transformer.sampling`; back-translation).

    Attributes:
        top_k: sample among the k most likely tokens; 0: the whole vocabulary.
        top_p: then among the fewest most likely whose probabilities reach top_p (1: all).
        temperature: log-probabilities are divided by it first (< 1 sharper, > 1 flatter).
        seed: line i of an input is drawn with seed + i, the same in any batch and run.
    """

    top_k: int = 0
    top_p: float = 1.0
    temperature: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise DecodingSettingsError("top_k", f"must be an integer of at least 0 (0: the "
                                                 f"whole vocabulary), got {self.top_k!r}")
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise DecodingSettingsError("top_p", f"must be in (0, 1], got {self.top_p!r}")
        if not _is_number(self.temperature) or self.temperature <= 0:
            raise DecodingSettingsError("temperature", f"must be a number above 0, got "
                                                       f"{self.temperature!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) \
                or not 0 <= self.seed < 2 ** 62:
            raise DecodingSettingsError("seed", f"must be an integer in [0, 2**62), got "
                                                f"{self.seed!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
