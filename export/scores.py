"""Scores of given translations as every runtime returns them (no TensorFlow import): the
SavedModel's `score` signature (`export.translator`), the in-process Translator and
CTranslate2's `score_batch` (`export.ct2_runtime`).

Example:
    scorer.score_pairs([("In the beginning.", "Au commencement.")])
    # [PairScore(score=-0.41, log_prob=-1.02, token_ids=[...], token_log_probs=[...])]
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np

from export.lines import translate_in_batches

Pair = tuple[str, str]  # (source line, its translation)


@dataclasses.dataclass(frozen=True)
class PairScore:
    """A translation's score: `log_prob` (the sum of `token_log_probs`) divided by the GNMT
    length penalty of its pieces and EOS, as beam search scores its own translations."""
    score: float
    log_prob: float
    token_ids: list[int]  # the translation's pieces, then EOS
    token_log_probs: list[float]


def gnmt_score(log_prob: float, length: int, alpha: float) -> float:
    """`log_prob` of `length` tokens (EOS included) / ((5 + length) / 6) ** alpha, as
    `keras_transformer.search_primitives.length_penalty`."""
    return log_prob / ((5.0 + length) / 6.0) ** alpha


def signature_scores(output: dict[str, np.ndarray]) -> list[PairScore]:
    """The `score` signature's output (numpy arrays) -> a PairScore per row."""
    scores = []
    for score, log_prob, ids, token_log_probs in zip(
            output["score"], output["log_prob"], output["target_ids"],
            output["token_log_probs"]):
        length = int(np.count_nonzero(ids))  # pieces and EOS; PAD (0) after
        scores.append(PairScore(float(score), float(log_prob), [int(i) for i in ids[:length]],
                                [float(p) for p in token_log_probs[:length]]))
    return scores


def token_column(score: PairScore, piece: Callable[[int], str]) -> str:
    """`PIECE=LOG_PROB ...`: each piece of the translation, then `</s>`, with its
    log-probability (`piece`: id -> piece)."""
    return " ".join(f"{piece(i)}={p:.4f}" for i, p in zip(score.token_ids, score.token_log_probs))


def score_in_batches(score_batch: Callable[[list[Pair]], list[PairScore]],
                     pairs: Sequence[Pair], batch_size: int) -> list[PairScore]:
    """`score_batch` over `pairs` in batches of similar target lengths; scores in order."""
    return translate_in_batches(score_batch, pairs, batch_size,
                                length=lambda pair: len(pair[1]))
