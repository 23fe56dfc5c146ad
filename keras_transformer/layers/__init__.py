"""Keras layers of the Transformer, one per file."""
from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.decoder import DecoderLayer
from keras_transformer.layers.embedding import SharedEmbedding
from keras_transformer.layers.encoder import EncoderLayer
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.positional_encoding import (
    LearnedPositionalEmbedding, SinusoidalPositionalEncoding)
from keras_transformer.layers.projection import Projection
from keras_transformer.layers.sublayer import ResidualSublayer

__all__ = [
    "DecoderLayer", "EncoderLayer", "LearnedPositionalEmbedding", "MultiHeadAttention",
    "PositionwiseFeedForward", "Projection", "ResidualSublayer", "SharedEmbedding",
    "SinusoidalPositionalEncoding",
]
