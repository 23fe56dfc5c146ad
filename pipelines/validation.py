"""Validation during training: dev loss over the dev split, and greedy dev BLEU (sacrebleu).

Both run on the model as it stands, outside any replica context (with a distribution strategy
they read the first replica's variables), compiled once for any batch shape.
"""
from __future__ import annotations

import math
from pathlib import Path

import sacrebleu
import tensorflow as tf

from keras_transformer.decoding import greedy_search
from keras_transformer.losses import label_smoothed_cross_entropy
from keras_transformer.model import Transformer
from keras_transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from pipelines.files import read_lines

IDS_SPEC = tf.TensorSpec([None, None], tf.int32)
EXTRA_DECODE_LENGTH = 50  # the paper's maximum output length: input length + 50
DECODE_BATCH = 64  # sentences per greedy decoding batch


class DevLoss:
    """The label-smoothed loss (as in training) and the perplexity over a dev dataset.

    Args:
        model: the Transformer.
        dataset: batches of {"source_ids", "target_ids"} as `pipelines.data.make_dataset`
            yields them (target BOS ... EOS), iterated whole at each call.
    """

    def __init__(self, model: Transformer, dataset: tf.data.Dataset) -> None:
        self.model = model
        self.dataset = dataset
        self._sums = tf.function(self._batch_sums, input_signature=[IDS_SPEC, IDS_SPEC])

    def __call__(self) -> tuple[float, float]:
        """(loss per real target token, perplexity)."""
        totals = tf.zeros([3])
        for batch in self.dataset:
            totals += self._sums(batch["source_ids"], batch["target_ids"])
        loss_sum, nll_sum, tokens = totals.numpy()
        tokens = max(float(tokens), 1.0)
        return float(loss_sum) / tokens, math.exp(min(float(nll_sum) / tokens, 100.0))

    def _batch_sums(self, source_ids: tf.Tensor, target_ids: tf.Tensor) -> tf.Tensor:
        """[loss sum, negative log-likelihood sum, real tokens] of one batch."""
        logits = self.model({"source_ids": source_ids, "target_ids": target_ids[:, :-1]},
                            training=False)  # [b, t - 1, vocab]
        labels = target_ids[:, 1:]  # [b, t - 1]
        smoothing = self.model.model_config.label_smoothing
        loss_sum, tokens = label_smoothed_cross_entropy(labels, logits, smoothing, PAD_ID)
        nll_sum, _ = label_smoothed_cross_entropy(labels, logits, 0.0, PAD_ID)
        return tf.stack([loss_sum, nll_sum, tokens])  # [3]


class DevBleu:
    """Corpus BLEU of greedy translations of the first `max_sentences` dev pairs against the
    raw references, detokenized by the SentencePiece model (sacrebleu's default 13a).

    Args:
        model: the Transformer.
        tokenizer: the run's shared tokenizer.
        src_path, tgt_path: the dev split, one sentence a line.
        max_sentences: pairs scored.
    """

    def __init__(self, model: Transformer, tokenizer: Tokenizer, src_path: str | Path,
                 tgt_path: str | Path, max_sentences: int) -> None:
        self.model = model
        self.tokenizer = tokenizer
        sources = read_lines(src_path, max_sentences)
        self.references = read_lines(tgt_path, max_sentences)
        ids = tokenizer.tokenize(tf.constant(sources), add_eos=True)  # [n, (src_len)]
        lengths = ids.row_lengths().numpy()
        self.order = sorted(range(len(sources)), key=lambda i: lengths[i])  # similar lengths
        self.batches = [tf.gather(ids, self.order[i:i + DECODE_BATCH]).to_tensor(PAD_ID)
                        for i in range(0, len(sources), DECODE_BATCH)]  # [batch, src_len]
        self._translate = tf.function(self._greedy, input_signature=[IDS_SPEC])

    def __call__(self) -> float:
        """BLEU (0-100) of the current model's greedy translations."""
        return sacrebleu.corpus_bleu(self.translate(), [self.references]).score

    def translate(self) -> list[str]:
        """Greedy translations of the dev sources, in the order of the file."""
        hypotheses = [""] * len(self.order)
        decoded = (text.decode("utf-8") for batch in self.batches
                   for text in self.tokenizer.detokenize(self._translate(batch)).numpy())
        for index, text in zip(self.order, decoded):
            hypotheses[index] = text
        return hypotheses

    def _greedy(self, source_ids: tf.Tensor) -> tf.Tensor:
        """[batch, src_len] -> target ids [batch, time] (EOS then PAD after each sentence)."""
        memory, memory_mask = self.model.encode(source_ids, training=False)
        cache = self.model.init_cache(memory, memory_mask)
        source_lengths = tf.reduce_sum(tf.cast(source_ids != PAD_ID, tf.int32), axis=1)  # [b]
        max_lengths = tf.minimum(source_lengths + EXTRA_DECODE_LENGTH,
                                 self.model.model_config.max_length)  # [b]

        def next_logits(ids: tf.Tensor, step: tf.Tensor, cache: dict) -> tuple[tf.Tensor, dict]:
            return self.model.decode_step(ids[:, -1], step, cache)  # [b, vocab]

        ids, _ = greedy_search(next_logits, cache, max_lengths, bos_id=BOS_ID, eos_id=EOS_ID,
                               pad_id=PAD_ID)
        return ids
