"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as Keras 3 layers."""
from keras_transformer.config import PRESETS, ModelConfig
from keras_transformer.model import Transformer

__all__ = ["PRESETS", "ModelConfig", "Transformer"]
