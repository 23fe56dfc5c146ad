"""Validation during training: dev loss over the dev split, and dev BLEU and chrF (sacrebleu;
greedy or beam search on the first dev pairs), at their intervals (`Validator`).

Both run on the model as it stands, outside any replica context (with a distribution strategy
they read the first replica's variables), compiled once for any batch shape.

Example:
    >>> validator = Validator(config, model, tokenizer)
    >>> validator.maybe_run(step, last=False, recipe=recipe, writer=writer, progress=progress)
"""
from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import sacrebleu
import tensorflow as tf

from keras_transformer.losses import label_smoothed_cross_entropy
from keras_transformer.model import Transformer
from keras_transformer.tokenizer import PAD_ID, Tokenizer
from keras_transformer.translate import GREEDY, decode_sources
from pipelines.training.budget import Recipe
from pipelines.config import PipelineConfig
from pipelines.training.data import make_dataset
from pipelines.files import read_lines
from pipelines.paths import RunPaths
from pipelines.progress import Progress
from pipelines.training.tensorboard import write_scalars

IDS_SPEC = tf.TensorSpec([None, None], tf.int32)
DECODE_BATCH = 64  # sentences per greedy decoding batch


class DevLoss:
    """The label-smoothed loss (as in training) and the perplexity over a dev dataset.

    Args:
        model: the Transformer.
        dataset: batches of {"source_ids", "target_ids"} as `pipelines.training.data.make_dataset`
            yields them (target BOS ... EOS), iterated whole at each call.
    """

    def __init__(self, model: Transformer, dataset: tf.data.Dataset) -> None:
        self.model = model
        self.dataset = dataset
        self._sums = tf.function(self._batch_sums, input_signature=[IDS_SPEC, IDS_SPEC],
                                 autograph=False)

    def __call__(self) -> tuple[float, float] | None:
        """(loss per real target token, perplexity), or None when no dev pair fits the
        dataset's max_length (there is nothing to measure)."""
        totals = tf.zeros([3])
        for batch in self.dataset:
            totals += self._sums(batch["source_ids"], batch["target_ids"])
        loss_sum, nll_sum, tokens = (float(total) for total in totals.numpy())
        if not tokens:
            return None
        return loss_sum / tokens, math.exp(min(nll_sum / tokens, 100.0))

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
    """Corpus BLEU and chrF of translations (greedy, or beam search of `beam_size`) of the first
    `max_sentences` dev pairs against the raw references, detokenized by the SentencePiece
    model (sacrebleu's defaults: BLEU's 13a tokenizer, chrF's 6 character n-grams). Sources
    are read as `evaluate` reads them (`keras_transformer.translate.decode_sources`): cut to
    `max_source_length` tokens, and a line with no piece translates to the empty string.

    Args:
        model: the Transformer.
        tokenizer: the run's shared tokenizer.
        src_path, tgt_path: the dev split, one sentence a line.
        max_sentences: pairs scored.
        max_source_length: source tokens kept, EOS included (default and at most the model's
            max_length).
        beam_size: 1 for greedy search.
    """

    def __init__(self, model: Transformer, tokenizer: Tokenizer, src_path: str | Path,
                 tgt_path: str | Path, max_sentences: int,
                 max_source_length: int | None = None, beam_size: int = 1) -> None:
        self.model = model
        self.tokenizer = tokenizer
        sources = read_lines(src_path, max_sentences)
        self.references = read_lines(tgt_path, max_sentences)
        self.settings = dataclasses.replace(GREEDY, beam_size=beam_size,
                                            max_source_length=max_source_length
                                            ).for_model(model.model_config.max_length)
        ids = tokenizer.tokenize(tf.constant(sources, tf.string), add_eos=True,
                                 max_length=self.settings.max_source_length)
        lengths = ids.row_lengths().numpy()  # [n]
        self.order = sorted(range(len(sources)), key=lambda i: lengths[i])  # similar lengths
        self.batches = [tf.gather(ids, self.order[i:i + DECODE_BATCH]).to_tensor(PAD_ID)
                        for i in range(0, len(sources), DECODE_BATCH)]  # [batch, src_len]
        self._translate = tf.function(self._decode, input_signature=[IDS_SPEC], autograph=False)

    def __call__(self) -> tuple[float, float]:
        """(BLEU, chrF), 0-100, of the current model's translations."""
        hypotheses = self.translate()
        return (sacrebleu.corpus_bleu(hypotheses, [self.references]).score,
                sacrebleu.corpus_chrf(hypotheses, [self.references]).score)

    def translate(self) -> list[str]:
        """Translations of the dev sources, in the order of the file."""
        hypotheses = [""] * len(self.order)
        decoded = (text.decode("utf-8") for batch in self.batches
                   for text in self.tokenizer.detokenize(self._translate(batch)).numpy())
        for index, text in zip(self.order, decoded):
            hypotheses[index] = text
        return hypotheses

    def _decode(self, source_ids: tf.Tensor) -> tf.Tensor:
        """[batch, src_len] -> target ids [batch, time] (EOS then PAD after each sentence)."""
        target_ids, _ = decode_sources(self.model, source_ids, self.settings)
        return target_ids


class Validator:
    """Dev loss and dev BLEU at their intervals and at the last step (chief only)."""

    def __init__(self, config: PipelineConfig, model: Transformer, tokenizer: Tokenizer) -> None:
        self.settings, self.max_length = config.train, config.data.max_length
        paths, data = RunPaths(config.run_path), config.data
        src, tgt = paths.split("dev")
        has_dev = src.is_file() and tgt.is_file()
        self.loss = self.bleu = None
        if has_dev and self.settings.validate_every_steps:
            self.loss = DevLoss(model, make_dataset(
                [(src, tgt)], paths.spm_model, shuffle=False,
                batch_tokens=config.train.batch_tokens, max_length=data.max_length))
        if has_dev and self.settings.bleu_every_steps:
            self.bleu = DevBleu(model, tokenizer, src, tgt, self.settings.bleu_max_sentences,
                                max_source_length=data.max_length,
                                beam_size=self.settings.bleu_beam_size)
        self.dev_loss: float | None = None
        self.dev_bleu: float | None = None
        self.dev_chrf: float | None = None
        self.loss_seconds = self.bleu_seconds = 0.0  # the last runs' durations

    @property
    def seconds(self) -> float:
        """What the final validation is expected to take (0 before any has run)."""
        return self.loss_seconds + self.bleu_seconds

    def maybe_run(self, step: int, last: bool, recipe: Recipe, writer: tf.summary.SummaryWriter,
                  progress: Progress) -> dict[str, float]:
        """Validates what is due at `step` (everything at the last step); returns what it
        measured: {"dev_loss", "dev_bleu", "dev_chrf"} or some of them."""
        measured: dict[str, float] = {}
        if self.loss is not None and recipe.validates("dev_loss", step, last):
            started = time.monotonic()
            loss = self.loss()
            self.loss_seconds = time.monotonic() - started
            if loss is None:
                progress.message(f"step {step:,}: no dev pair fits data.max_length "
                                 f"({self.max_length} tokens): no dev loss")
                self.loss = None  # the dev split will not change
            else:
                self.dev_loss, perplexity = loss
                measured["dev_loss"] = self.dev_loss
                write_scalars(writer, step, {"dev/loss": self.dev_loss,
                                             "dev/perplexity": perplexity})
                progress.message(f"step {step:,}: dev loss {self.dev_loss:.4f}, "
                                 f"perplexity {perplexity:.2f}")
        if self.bleu is not None and recipe.validates("dev_bleu", step, last):
            started = time.monotonic()
            self.dev_bleu, self.dev_chrf = self.bleu()
            self.bleu_seconds = time.monotonic() - started
            measured |= {"dev_bleu": self.dev_bleu, "dev_chrf": self.dev_chrf}
            write_scalars(writer, step, {"dev/bleu": self.dev_bleu, "dev/chrf": self.dev_chrf})
            beam = self.bleu.settings.beam_size
            progress.message(f"step {step:,}: dev BLEU {self.dev_bleu:.2f}, chrF "
                             f"{self.dev_chrf:.2f} ({'greedy' if beam == 1 else f'beam {beam}'}"
                             f", {len(self.bleu.references)} sentences)")
        return measured
