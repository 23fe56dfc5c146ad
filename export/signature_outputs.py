"""The outputs of the Translator's functions and of the SavedModel's signatures read into Python
values, and the batched calls that both the in-process Translator (`export.translator`) and the
loaded SavedModel (`export.saved_model`) make of them."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import tensorflow as tf

from export.glossary import TermTranslation, padded_terms
from export.lines import translate_in_batches
from export.scores import Pair, PairScore, signature_scores


def translated_text(output: dict[str, tf.Tensor]) -> dict[str, Any]:
    """A translate function's output -> {"translation": list[str], "score": float32 [batch]}."""
    return {"translation": [text.decode("utf-8") for text in output["translation"].numpy()],
            "score": output["score"].numpy()}


def nbest_pairs(output: dict[str, tf.Tensor]) -> list[list[tuple[str, float]]]:
    """`translate_nbest`'s output -> per line, (translation, score) pairs, best first."""
    return [[(text.decode("utf-8"), float(score)) for text, score in zip(texts, scores)]
            for texts, scores in zip(output["translations"].numpy(), output["scores"].numpy())]


def scored_batch(score: Callable[..., dict[str, tf.Tensor]], batch: list[Pair]
                 ) -> list[PairScore]:
    """`score(text=, target=)` (the function or its signature) of one batch of pairs."""
    texts, targets = zip(*batch)
    output = score(text=tf.constant(texts), target=tf.constant(targets))
    return signature_scores({key: value.numpy() for key, value in output.items()})


def prefixed_in_batches(translate_prefix: Callable[..., dict[str, tf.Tensor]],
                        lines: Sequence[str], prefixes: Sequence[str],
                        batch_size: int) -> list[str]:
    """`translate_prefix(text=, prefix=)` (the function or its signature) over `lines` and
    their `prefixes`, in batches of similar lines; the translations in order."""
    def translate_batch(batch: list[tuple[str, str]]) -> list[str]:
        texts, prefix = zip(*batch)
        output = translate_prefix(text=tf.constant(texts), prefix=tf.constant(prefix))
        return [text.decode("utf-8") for text in output["translation"].numpy()]

    return translate_in_batches(translate_batch, list(zip(lines, prefixes)), batch_size,
                                length=lambda pair: len(pair[0]))


def aligned_in_batches(align: Callable[..., dict[str, tf.Tensor]], translations: Sequence[str],
                       lines: Sequence[str], batch_size: int) -> list[tuple[str, str]]:
    """(translation, `I-J ...`) of each line and its given translation, in order:
    `align(text=, target=)` (the function or the `align` signature), in batches."""
    def align_batch(batch: list[tuple[str, str]]) -> list[tuple[str, str]]:
        texts, targets = zip(*batch)
        output = align(text=tf.constant(texts), target=tf.constant(targets))
        return [(target, text.decode("utf-8"))
                for target, text in zip(targets, output["alignment"].numpy())]

    return translate_in_batches(align_batch, list(zip(lines, translations)), batch_size,
                                length=lambda pair: len(pair[1]))


def translated_aligned_in_batches(translate_aligned: Callable[..., dict[str, tf.Tensor]],
                                  lines: Sequence[str], batch_size: int
                                  ) -> list[tuple[str, str]]:
    """(translation, `I-J ...`) of each line in order: `translate_aligned(text=)` (the
    function or its signature), in batches of similar lines."""
    def translate_batch(batch: list[str]) -> list[tuple[str, str]]:
        output = translate_aligned(text=tf.constant(batch, tf.string))
        return [(text.decode("utf-8"), pairs.decode("utf-8")) for text, pairs in
                zip(output["translation"].numpy(), output["alignment"].numpy())]

    return translate_in_batches(translate_batch, lines, batch_size)


def termed_in_batches(translate_terms: Callable[..., dict[str, tf.Tensor]],
                      lines: Sequence[str], terms: Sequence[Sequence[str]],
                      batch_size: int) -> list[TermTranslation]:
    """`translate_terms(text=, terms=)` (the function or its signature) over `lines` and each
    one's target terms, in batches of similar lines; the results in order."""
    def translate_batch(batch: list[tuple[str, Sequence[str]]]) -> list[TermTranslation]:
        texts, batch_terms = zip(*batch)
        padded = padded_terms(batch_terms)
        output = translate_terms(text=tf.constant(texts, tf.string), terms=tf.constant(
            padded, tf.string, [len(texts), len(padded[0])]))
        found = output["term_found"].numpy()
        # "": an export made before translate_terms gave alignments (`translate` refuses
        # --glossary with --alignments or --markup on it: SavedModelTranslator.check_output)
        alignments = (output["alignment"].numpy() if "alignment" in output
                      else [b""] * len(texts))
        return [TermTranslation(text.decode("utf-8"), float(score), bool(fit),
                                tuple(bool(value) for value in row[:len(line_terms)]),
                                pairs.decode("utf-8"))
                for text, score, fit, row, line_terms, pairs in zip(
                    output["translation"].numpy(), output["score"].numpy(),
                    output["terms_fit"].numpy(), found, batch_terms, alignments)]

    return translate_in_batches(translate_batch, list(zip(lines, terms)), batch_size,
                                length=lambda pair: len(pair[0]))
