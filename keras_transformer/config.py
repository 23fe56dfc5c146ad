"""Model hyperparameters and the paper's presets (Table 3), with no TensorFlow import.

`ModelConfig` is frozen and checks every field when made (a ModelConfigError names the field,
then any field it conflicts with); `from_preset` starts from `tiny`, `small`, `base`, `big` or
`student` (PRESETS) and overrides fields; `to_dict` is what a saved model
(`Transformer.get_config`) and an export's translator.json record.

Example:
    >>> config = ModelConfig.from_preset("base", vocab_size=8000)
    >>> config.num_encoder_layers, config.d_model, config.num_heads, config.head_key_dim
    (6, 512, 8, 64)
    >>> try:
    ...     ModelConfig(d_model=500, num_heads=8)
    ... except ModelConfigError as error:
    ...     print(error.fields)
    ('d_model', 'num_heads')
"""
from __future__ import annotations

import dataclasses
from typing import Any

POSITIONAL_ENCODINGS = ("sinusoidal", "learned")


class ModelConfigError(ValueError):
    """An invalid ModelConfig field; `fields` names it, then any field it conflicts with."""

    def __init__(self, field: str, problem: str, *, conflicts_with: tuple[str, ...] = ()):
        super().__init__(f"ModelConfig.{field} {problem}")
        self.fields = (field, *conflicts_with)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Hyperparameters of the encoder-decoder Transformer.

    Field names follow the paper: N is `num_encoder_layers` / `num_decoder_layers`,
    h is `num_heads`, d_k / d_v are `key_dim` / `value_dim` (None: d_model / h),
    P_drop is `dropout` and eps_ls is `label_smoothing`. `alignment_heads`: the heads of the
    alignment layer (`keras_transformer.alignment`) whose cross-attention gives word alignments,
    as CTranslate2 counts them: 0 all heads averaged, N the first N averaged (1: head 0 alone,
    the head guided-alignment training supervises); no weight depends on it.
    """

    vocab_size: int = 37000
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8
    key_dim: int | None = None
    value_dim: int | None = None
    dropout: float = 0.1
    attention_dropout: float = 0.0
    relu_dropout: float = 0.0
    label_smoothing: float = 0.1
    norm_first: bool = False
    positional_encoding: str = "sinusoidal"
    max_length: int = 1024
    layer_norm_epsilon: float = 1e-6
    pad_id: int = 0
    alignment_heads: int = 0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "num_encoder_layers", "num_decoder_layers", "d_model",
                     "d_ff", "num_heads", "max_length"):
            _require_type(self, name, int)
            if getattr(self, name) <= 0:
                raise ModelConfigError(name, f"must be positive, got {getattr(self, name)!r}")
        for name in ("key_dim", "value_dim"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value <= 0):
                raise ModelConfigError(name, f"must be a positive int or None, got {value!r}")
        if (self.key_dim is None or self.value_dim is None) and self.d_model % self.num_heads:
            raise ModelConfigError(
                "d_model", f"({self.d_model}) must be divisible by ModelConfig.num_heads "
                f"({self.num_heads}) unless key_dim and value_dim are set",
                conflicts_with=("num_heads",))
        for name in ("dropout", "attention_dropout", "relu_dropout", "label_smoothing"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ModelConfigError(name, f"must be a number in [0, 1), got {value!r}")
        if self.layer_norm_epsilon <= 0:
            raise ModelConfigError("layer_norm_epsilon",
                                   f"must be positive, got {self.layer_norm_epsilon!r}")
        if self.positional_encoding not in POSITIONAL_ENCODINGS:
            raise ModelConfigError("positional_encoding", f"must be one of {POSITIONAL_ENCODINGS}, "
                                   f"got {self.positional_encoding!r}")
        _require_type(self, "norm_first", bool)
        _require_type(self, "pad_id", int)
        _require_type(self, "alignment_heads", int)
        if not 0 <= self.alignment_heads <= self.num_heads:
            raise ModelConfigError("alignment_heads", f"must be in [0, num_heads] (0: all heads "
                                   f"averaged), got {self.alignment_heads!r}",
                                   conflicts_with=("num_heads",))
        if not 0 <= self.pad_id < self.vocab_size:
            raise ModelConfigError("pad_id", f"must be in [0, vocab_size), got {self.pad_id!r}",
                                   conflicts_with=("vocab_size",))

    @property
    def head_key_dim(self) -> int:
        """d_k: the per-head size of queries and keys."""
        return self.key_dim or self.d_model // self.num_heads

    @property
    def head_value_dim(self) -> int:
        """d_v: the per-head size of values."""
        return self.value_dim or self.d_model // self.num_heads

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """The named preset (one of PRESETS) with fields overridden."""
        if name not in PRESETS:
            raise ValueError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}")
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown ModelConfig field(s) {unknown}")
        return cls(**{**PRESETS[name], **overrides})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require_type(config: ModelConfig, name: str, kind: type) -> None:
    value = getattr(config, name)
    valid = _is_int(value) if kind is int else isinstance(value, kind)
    if not valid:
        raise ModelConfigError(name, f"must be {kind.__name__}, got {value!r}")


# Table 3 of the paper: base and big (d_k = d_v = d_model / h = 64 in both); tiny and small
# are scaled-down variants for tests and CPU-sized corpora; student is the shape of Bergamot's
# `tiny` students (Bogoychev et al.; the Firefox translation models): a deep encoder, which
# runs once a sentence, and a 2-layer decoder, which runs at every output step, for a model
# distilled from a teacher (data.distill_from) and served fast.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(num_encoder_layers=2, num_decoder_layers=2, d_model=64, d_ff=256, num_heads=4,
                 dropout=0.1, label_smoothing=0.1),
    "small": dict(num_encoder_layers=3, num_decoder_layers=3, d_model=256, d_ff=1024, num_heads=4,
                  dropout=0.1, label_smoothing=0.1),
    "base": dict(num_encoder_layers=6, num_decoder_layers=6, d_model=512, d_ff=2048, num_heads=8,
                 dropout=0.1, label_smoothing=0.1),
    "big": dict(num_encoder_layers=6, num_decoder_layers=6, d_model=1024, d_ff=4096, num_heads=16,
                dropout=0.3, label_smoothing=0.1),
    "student": dict(num_encoder_layers=6, num_decoder_layers=2, d_model=256, d_ff=1536,
                    num_heads=8, dropout=0.1, label_smoothing=0.1),
}
