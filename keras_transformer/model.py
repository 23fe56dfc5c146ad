"""The encoder-decoder Transformer (section 3, figure 1).

`Transformer` (a Keras model built from a ModelConfig, one embedding matrix shared by source,
target and the pre-softmax projection) owns the forward passes: teacher forcing on
{"source_ids", "target_ids"} (the target starting with BOS) to float32 logits; `encode` and
`decode_step` with its per-layer cache, for the searches; `attention_weights` and the features
for alignments and training. Ids use `config.pad_id` as padding; `padding_mask` and
`causal_mask` build the boolean masks the layers take.

Example:
    model = Transformer(ModelConfig.from_preset("tiny", vocab_size=8000))
    logits = model({"source_ids": source_ids, "target_ids": target_in})  # [b, t, 8000]
    memory, memory_mask = model.encode(source_ids)  # [b, s, 64], [b, 1, 1, s]
    cache = model.init_cache(memory, memory_mask)
    logits, cache = model.decode_step(last_ids, step, cache)  # last_ids [b] -> [b, 8000]
"""
from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.config import ModelConfig
from keras_transformer.layers import (DecoderLayer, EncoderLayer, LearnedPositionalEmbedding,
                                      SharedEmbedding, SinusoidalPositionalEncoding)
from keras_transformer.search_primitives import SENTENCE_KEY, Cache


def padding_mask(ids: tf.Tensor, pad_id: int) -> tf.Tensor:
    """True at real tokens: [batch, time] -> bool [batch, 1, 1, time] (broadcasts over heads
    and queries)."""
    return tf.not_equal(ids, pad_id)[:, None, None, :]


def causal_mask(length: tf.Tensor) -> tf.Tensor:
    """True where query position i may attend to key position j <= i: bool [1, 1, time, time]."""
    positions = tf.range(length)
    return (positions[None, :] <= positions[:, None])[None, None]


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """The paper's Transformer with one embedding matrix shared by source, target and the
    pre-softmax projection.

    Inputs are token ids with `config.pad_id` as padding; the target fed to the decoder starts
    with BOS (teacher forcing: `target_in = target[:, :-1]`, labels `target[:, 1:]`).

    Example:
        model = Transformer(ModelConfig.from_preset("base", vocab_size=37000))
        logits = model({"source_ids": src, "target_ids": tgt_in})  # [batch, tgt_time, vocab]
        memory, memory_mask = model.encode(src)
        cache = model.init_cache(memory, memory_mask)
        logits, cache = model.decode_step(last_ids, step, cache)    # [batch, vocab]
        weights = model.attention_weights(src, tgt_in)  # per kind, per layer [b, h, q, k]
        weights = model.cross_attention_weights(src, tgt_in, layer=0)  # [b, h, q, k]
    """

    def __init__(self, config: ModelConfig | dict, **kwargs) -> None:
        super().__init__(**kwargs)
        self.model_config = config if isinstance(config, ModelConfig) else ModelConfig(**config)
        c = self.model_config
        policy = self.dtype_policy
        self.embedding = SharedEmbedding(c.vocab_size, c.d_model, dtype=policy, name="embedding")
        if c.positional_encoding == "learned":
            self.source_positions = LearnedPositionalEmbedding(c.max_length, dtype=policy,
                                                               name="source_positions")
            self.target_positions = LearnedPositionalEmbedding(c.max_length, dtype=policy,
                                                               name="target_positions")
        else:
            self.source_positions = self.target_positions = SinusoidalPositionalEncoding(
                c.max_length, dtype=policy, name="positional_encoding")
        self.source_dropout = keras.layers.Dropout(c.dropout, dtype=policy)
        self.target_dropout = keras.layers.Dropout(c.dropout, dtype=policy)
        layer_args = dict(num_heads=c.num_heads, key_dim=c.head_key_dim,
                          value_dim=c.head_value_dim, d_ff=c.d_ff, dropout=c.dropout,
                          attention_dropout=c.attention_dropout, relu_dropout=c.relu_dropout,
                          norm_first=c.norm_first, epsilon=c.layer_norm_epsilon, dtype=policy)
        self.encoder_layers = [EncoderLayer(**layer_args, name=f"encoder_{i}")
                               for i in range(c.num_encoder_layers)]
        self.decoder_layers = [DecoderLayer(**layer_args, name=f"decoder_{i}")
                               for i in range(c.num_decoder_layers)]
        # Pre-norm stacks end with a layer normalisation; post-norm layers already end with one.
        self.encoder_norm = self.decoder_norm = None
        if c.norm_first:
            self.encoder_norm = keras.layers.LayerNormalization(
                epsilon=c.layer_norm_epsilon, dtype=policy, name="encoder_norm")
            self.decoder_norm = keras.layers.LayerNormalization(
                epsilon=c.layer_norm_epsilon, dtype=policy, name="decoder_norm")
        # Built at once: encode / decode_step reach sub-layers outside Model.__call__.
        self.build()

    def build(self, input_shape=None) -> None:
        if self.built:  # built in __init__; Keras may ask again when loading or calling
            return
        hidden_shape = (None, None, self.model_config.d_model)
        self.embedding.build()
        for positions in {id(self.source_positions): self.source_positions,
                          id(self.target_positions): self.target_positions}.values():
            positions.build(hidden_shape)
        for layer in self.encoder_layers:
            layer.build(hidden_shape)
        for layer in self.decoder_layers:
            layer.build(hidden_shape, hidden_shape)
        for norm in (self.encoder_norm, self.decoder_norm):
            if norm is not None:
                norm.build(hidden_shape)
        self.built = True

    def call(self, inputs: dict[str, tf.Tensor], training: bool | None = None) -> tf.Tensor:
        """{"source_ids": [batch, src_time], "target_ids": [batch, tgt_time]} ->
        float32 logits [batch, tgt_time, vocab]."""
        memory, memory_mask = self.encode(inputs["source_ids"], training=training)
        return self.decode(inputs["target_ids"], memory, memory_mask, training=training)

    def encode(self, source_ids: tf.Tensor,
               training: bool | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """[batch, src_time] ->
        (memory [batch, src_time, d_model], padding mask [batch, 1, 1, src_time])."""
        memory, mask, _ = self._encode(source_ids, training)
        return memory, mask

    def decode(self, target_ids: tf.Tensor, memory: tf.Tensor, memory_mask: tf.Tensor,
               training: bool | None = None) -> tf.Tensor:
        """Teacher forcing: [batch, tgt_time] -> float32 logits [batch, tgt_time, vocab]."""
        return self.embedding.logits(self._decode(target_ids, memory, memory_mask, training)[0])

    def features(self, inputs: dict[str, tf.Tensor], training: bool | None = None) -> tf.Tensor:
        """Like `call`, but the final decoder states [batch, tgt_time, d_model] (compute dtype)
        that `embedding.logits` projects; training fuses that projection with the loss."""
        memory, memory_mask = self.encode(inputs["source_ids"], training=training)
        return self._decode(inputs["target_ids"], memory, memory_mask, training)[0]

    def features_and_cross_attention(self, inputs: dict[str, tf.Tensor], layer: int,
                                     training: bool | None = None
                                     ) -> tuple[tf.Tensor, tf.Tensor]:
        """`features`, and the float32 cross-attention weights [batch, heads, tgt_time,
        src_time] of decoder layer `layer` in the same pass (guided-alignment training)."""
        memory, memory_mask = self.encode(inputs["source_ids"], training=training)
        hidden, scores = self._decode(inputs["target_ids"], memory, memory_mask, training)
        return hidden, scores[layer]["cross_attention"]

    def attention_weights(self, source_ids: tf.Tensor,
                          target_ids: tf.Tensor) -> dict[str, list[tf.Tensor]]:
        """The attention weights of a teacher-forced pass, one float32 tensor [batch, heads,
        queries, keys] per layer under "encoder_self_attention", "decoder_self_attention" and
        "encoder_decoder_attention" (the paper's figures 3 to 5 plot them)."""
        memory, memory_mask, encoder_scores = self._encode(source_ids, False)
        _, decoder_scores = self._decode(target_ids, memory, memory_mask, False)
        return {
            "encoder_self_attention": [s["self_attention"] for s in encoder_scores],
            "decoder_self_attention": [s["self_attention"] for s in decoder_scores],
            "encoder_decoder_attention": [s["cross_attention"] for s in decoder_scores],
        }

    def cross_attention_weights(self, source_ids: tf.Tensor, target_ids: tf.Tensor,
                                layer: int) -> tf.Tensor:
        """float32 [batch, heads, queries, keys]: decoder layer `layer`'s encoder-decoder
        attention weights in a teacher-forced pass (`attention_weights`'s entry), computing
        nothing they do not need: not the layers after it, its feed-forward network or the
        output projection. A graph that computes what it discards costs Grappler's constant
        folding a pass over the whole graph per discarded node, when a TF1 session (TF
        Serving's) first runs it."""
        memory, memory_mask, _ = self._encode(source_ids, False)
        x, mask = self._embed_target(target_ids, False)
        for decoder_layer in self.decoder_layers[:layer]:
            x = decoder_layer(x, memory, attention_mask=mask, memory_mask=memory_mask,
                              training=False)
        return self.decoder_layers[layer].cross_attention_weights(x, memory, mask, memory_mask)

    def _encode(self, source_ids: tf.Tensor, training: bool | None
                ) -> tuple[tf.Tensor, tf.Tensor, list[dict[str, tf.Tensor]]]:
        mask = padding_mask(source_ids, self.model_config.pad_id)
        x = self.source_positions(self.embedding(source_ids))  # [b, s, d]
        x = self.source_dropout(x, training=training)
        scores = []
        for layer in self.encoder_layers:
            x, layer_scores = layer(x, attention_mask=mask, training=training,
                                    return_attention_scores=True)
            scores.append(layer_scores)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return x, mask, scores

    def _decode(self, target_ids: tf.Tensor, memory: tf.Tensor, memory_mask: tf.Tensor,
                training: bool | None) -> tuple[tf.Tensor, list[dict[str, tf.Tensor]]]:
        x, mask = self._embed_target(target_ids, training)
        scores = []
        for layer in self.decoder_layers:
            x, layer_scores = layer(x, memory, attention_mask=mask, memory_mask=memory_mask,
                                    training=training, return_attention_scores=True)
            scores.append(layer_scores)
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        return x, scores

    def _embed_target(self, target_ids: tf.Tensor, training: bool | None
                      ) -> tuple[tf.Tensor, tf.Tensor]:
        """The decoder's input [batch, time, d_model] of teacher-forced target ids [batch,
        time] and its causal mask [1, 1, time, time]."""
        x = self.target_positions(self.embedding(target_ids))  # [b, t, d]
        return self.target_dropout(x, training=training), causal_mask(tf.shape(target_ids)[1])

    def init_cache(self, memory: tf.Tensor, memory_mask: tf.Tensor,
                   length: tf.Tensor | int = 0) -> Cache:
        """The decoding cache for `memory` [batch, src_time, d_model]: every tensor in it has
        the batch as its leading dimension, so beam search can tile and reorder its per-row
        tensors (the self-attention's), and keeps the per-sentence ones (the memory's mask,
        keys and values, under SENTENCE_KEY) a row per sentence. `length` > 0:
        self-attention caches of that fixed size (`decode_step(..., fixed=True)`, under XLA
        only), else growing ones."""
        cache: Cache = {SENTENCE_KEY: {"memory_mask": memory_mask}}
        for i, layer in enumerate(self.decoder_layers):
            cache[f"layer_{i}"] = layer.init_cache(memory, length)
        return cache

    def decode_step(self, ids: tf.Tensor, step: tf.Tensor | int, cache: Cache,
                    output_kernel: tf.Tensor | None = None, fixed: bool = False,
                    rows_per_sentence: int = 1) -> tuple[tf.Tensor, Cache]:
        """Decodes position `step` given its input token ids [n]: returns float32 logits [n,
        vocab] for the next token and the cache extended by one position (`fixed`: written at
        position `step` of a fixed-size cache). `output_kernel`: `embedding.output_kernel()`,
        computed once before a decoding loop (else the embedding is transposed at every
        step). `rows_per_sentence`: the consecutive rows (a beam search's beams) that read a
        sentence's row of the cache's per-sentence tensors."""
        x = self.target_positions.at_position(self.embedding(ids), step)  # [n, d]
        new_cache: Cache = {SENTENCE_KEY: cache[SENTENCE_KEY]}
        memory_mask = cache[SENTENCE_KEY]["memory_mask"]  # [n / rows_per_sentence, 1, 1, s]
        for i, layer in enumerate(self.decoder_layers):
            x, new_cache[f"layer_{i}"] = layer.step(x, cache[f"layer_{i}"], memory_mask,
                                                     step if fixed else None,
                                                     rows_per_sentence)
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        return self.embedding.logits(x, output_kernel), new_cache  # [n, vocab] float32

    def get_config(self) -> dict:
        return {"name": self.name, "trainable": self.trainable,
                "dtype": keras.saving.serialize_keras_object(self.dtype_policy),
                "config": self.model_config.to_dict()}

    @classmethod
    def from_config(cls, config: dict) -> Transformer:
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.saving.deserialize_keras_object(config["dtype"])
        return cls(ModelConfig(**config.pop("config")), **config)
