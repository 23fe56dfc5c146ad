"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as Keras 3 layers.

`Transformer` loads TensorFlow on first use, so that modules such as
keras_transformer.precision import without it.
"""
from typing import Any

from keras_transformer.config import PRESETS, ModelConfig

__all__ = ["PRESETS", "ModelConfig", "Transformer"]


def __getattr__(name: str) -> Any:
    if name == "Transformer":
        from keras_transformer.model import Transformer

        return Transformer
    raise AttributeError(f"module 'keras_transformer' has no attribute {name!r}")
