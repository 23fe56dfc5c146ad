"""An ensemble of Transformers of one vocabulary, decoded as one model: what every search and
scoring of keras_transformer reads from a model, over the mean of the members'
log-probabilities.

    Ensemble(members)  # Transformers sharing vocab_size and pad_id; configs may differ
        .encode(source_ids) -> (each member's memory, the padding mask [batch, 1, 1, source])
        .init_cache(memories, mask, length=0) -> {"member_0": cache, "member_1": cache, ...}
        .decode_step(ids, step, cache, output_kernel) -> (float32 [batch, vocab], cache)
        ensemble({"source_ids": ..., "target_ids": ...}) -> float32 [batch, time, vocab]

Contract: where a search or scoring reads a Transformer's logits, an ensemble gives the mean of
its members' log-softmax (log-linear averaging, as Marian and OpenNMT-py ensemble); every
reader takes their log-softmax, which renormalizes that mean, so that beam search, sampling,
forced prefixes, terms and `keras_transformer.scoring` all read one distribution, and `score`
gives a searched translation back its search score. Each member's decoding cache sits under
its own key (`member_I`), so beam search tiles and reorders their per-row tensors alike.
Limits are the strictest member's: `model_config` is the first member's with the smallest
`max_length`.
Alignments (`keras_transformer.alignment`) read the first member's attention, as Marian reads
one model's (its alignment model's); an ensemble has no attention of its own to average.

Example:
    ensemble = Ensemble([model_a, model_b])  # a 2x128 and a 3x256 of one spm.model
    ids, scores = decode_hypotheses(ensemble, source_ids, DecodingSettings(beam_size=4))
    Translator(ensemble, spm_model_proto)  # every signature, one SavedModel holding both
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import tensorflow as tf

from keras_transformer.config import ModelConfig
from keras_transformer.model import Transformer
from keras_transformer.search_primitives import Cache


def member_key(index: int) -> str:
    """The cache key of member `index`'s decoding cache."""
    return f"member_{index}"


class MemberKernels:
    """The `embedding` an ensemble offers the searches: `output_kernel()` gives each member's
    transposed output projection, computed once before a decoding loop as a Transformer's is,
    and `table()` each member's embedding matrix (a shortlist gathers its pieces' rows)."""

    def __init__(self, members: Sequence[Transformer]) -> None:
        self._members = tuple(members)

    def output_kernel(self) -> tuple[tf.Tensor, ...]:
        """Each member's `embedding.output_kernel()` [d_model_i, vocab]."""
        return tuple(member.embedding.output_kernel() for member in self._members)

    def table(self) -> tuple[tf.Tensor, ...]:
        """Each member's `embedding.table()` [vocab, d_model_i]."""
        return tuple(member.embedding.table() for member in self._members)


class Ensemble:
    """Transformers of one vocabulary decoded as one model (module docstring).

    Args:
        members: two or more built Transformers with the same vocab_size and pad_id (their
            other config fields may differ), in one Keras dtype policy.

    Raises:
        ValueError: fewer than two members, or one of another vocab_size, pad_id or dtype.
    """

    def __init__(self, members: Sequence[Transformer]) -> None:
        if len(members) < 2:
            raise ValueError(f"an ensemble needs at least two members, got {len(members)}")
        first = members[0]
        for index, member in enumerate(members[1:], start=1):
            for field in ("vocab_size", "pad_id"):
                mine, theirs = (getattr(m.model_config, field) for m in (member, first))
                if mine != theirs:
                    raise ValueError(f"ensemble member {index} has {field} {mine}, member 0 "
                                     f"{theirs}: members share one vocabulary")
            if member.dtype_policy.name != first.dtype_policy.name:
                raise ValueError(f"ensemble member {index} computes in "
                                 f"{member.dtype_policy.name}, member 0 in "
                                 f"{first.dtype_policy.name}")
        self.members = tuple(members)
        self.model_config: ModelConfig = dataclasses.replace(
            first.model_config,
            max_length=min(member.model_config.max_length for member in members))
        self.embedding = MemberKernels(self.members)

    @property
    def variables(self) -> list[tf.Variable]:
        """The members' variables, member after member, each in its `variables` order."""
        return [variable for member in self.members for variable in member.variables]

    @property
    def dtype_policy(self):
        """The members' Keras dtype policy."""
        return self.members[0].dtype_policy

    def __call__(self, inputs: dict[str, tf.Tensor], training: bool | None = None) -> tf.Tensor:
        """Teacher forcing: {"source_ids": [batch, source], "target_ids": [batch, time]} ->
        float32 [batch, time, vocab], the mean of the members' log-softmax."""
        return _mean_log_probs([member(inputs, training=training) for member in self.members])

    def encode(self, source_ids: tf.Tensor, training: bool | None = None
               ) -> tuple[tuple[tf.Tensor, ...], tf.Tensor]:
        """[batch, source] -> (each member's memory [batch, source, d_model_i], the padding
        mask [batch, 1, 1, source], the same for every member)."""
        encoded = [member.encode(source_ids, training=training) for member in self.members]
        return tuple(memory for memory, _ in encoded), encoded[0][1]

    def init_cache(self, memories: Sequence[tf.Tensor], memory_mask: tf.Tensor,
                   length: tf.Tensor | int = 0) -> Cache:
        """Each member's `Transformer.init_cache` under its `member_key`."""
        return {member_key(index): member.init_cache(memory, memory_mask, length)
                for index, (member, memory) in enumerate(zip(self.members, memories,
                                                             strict=True))}

    def decode_step(self, ids: tf.Tensor, step: tf.Tensor | int, cache: Cache,
                    output_kernel: Sequence[tf.Tensor] | None = None, fixed: bool = False,
                    rows_per_sentence: int = 1) -> tuple[tf.Tensor, Cache]:
        """`Transformer.decode_step` of every member: float32 [n, vocab], the mean of their
        log-softmax, and the members' caches extended (`output_kernel`: the tuple
        `embedding.output_kernel()` gave)."""
        kernels = output_kernel or (None,) * len(self.members)
        steps = [member.decode_step(ids, step, cache[member_key(index)], kernel, fixed,
                                    rows_per_sentence)
                 for index, (member, kernel) in enumerate(zip(self.members, kernels,
                                                              strict=True))]
        return (_mean_log_probs([logits for logits, _ in steps]),
                {member_key(index): new for index, (_, new) in enumerate(steps)})

    def attention_weights(self, source_ids: tf.Tensor,
                          target_ids: tf.Tensor) -> dict[str, list[tf.Tensor]]:
        """The first member's `Transformer.attention_weights` (visualize plots them)."""
        return self.members[0].attention_weights(source_ids, target_ids)

    def cross_attention_weights(self, source_ids: tf.Tensor, target_ids: tf.Tensor,
                                layer: int) -> tf.Tensor:
        """The first member's `Transformer.cross_attention_weights` (alignments read them)."""
        return self.members[0].cross_attention_weights(source_ids, target_ids, layer)


def _mean_log_probs(logits: Sequence[tf.Tensor]) -> tf.Tensor:
    """float32 [..., vocab]: the mean of the log-softmax of each member's logits [..., vocab]."""
    return tf.add_n([tf.nn.log_softmax(tf.cast(member, tf.float32), axis=-1)
                     for member in logits]) / len(logits)
