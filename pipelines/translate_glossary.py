"""`keras-transformer translate --glossary FILE`: each line's glossary terms
(`export.glossary`) forced into its translation by the SavedModel's `translate_terms`
signature (constrained beam search); the glossary and the options checked before any work, and
a term that could not be used reported on stderr, one line each (`INPUT:LINE: ...`).

With --scores and --tokens a row scores the constrained translation; with --alignments and
--markup the constrained translation is aligned (`translate_terms` gives its alignment, the
terms found in the line's text without its tags); --n-best, --prefix-file and --sampling-*
are refused (none has a constrained search), and so are ONNX Runtime and CTranslate2 (no
constrained search in their graphs).

Example:
    $ keras-transformer translate runs/demo/export --glossary terms.tsv < news.en
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from export.glossary import Glossary, GlossaryError, TermTranslation
from pipelines import InputError

RUNTIME_NAMES = {"onnx": "an ONNX export", "ct2": "a CTranslate2 export"}


def check_glossary(args: argparse.Namespace, runtime: str, directory: Path,
                   sampling: bool) -> Glossary | None:
    """The glossary of --glossary (None without it), read whole, and the options it comes with
    (`sampling`: a --sampling-* option was given).

    Raises:
        InputError: a glossary line that is not `SOURCE<TAB>TARGET` (FILE:LINE), an option it
            cannot go with, or a runtime other than tf.
    """
    if not args.glossary:
        return None
    if args.n_best is not None or args.prefix_file or sampling:
        raise InputError("--glossary: not with --n-best, --prefix-file or --sampling-*")
    if runtime != "tf":
        raise InputError(f"--glossary: {directory} is {RUNTIME_NAMES[runtime]}, which has no "
                         f"constrained search; use --runtime tf (the SavedModel's "
                         f"translate_terms signature)")
    try:
        return Glossary.read(Path(args.glossary))
    except GlossaryError as error:
        raise InputError(f"--glossary {error}") from None


class GlossaryTranslator:
    """Translates windows of lines with their glossary terms, reporting on stderr each line
    whose terms did not fit its output limit or are missing from its translation."""

    def __init__(self, translator: Any, glossary: Glossary, input_name: str,
                 batch_size: int, target_lang: str | None = None) -> None:
        self.translator = translator
        self.glossary = glossary
        self.input_name = input_name
        self.batch_size = batch_size
        self.target_lang = target_lang  # a multilingual model's, for every line

    def scored_lines(self, lines: list[str], first: int) -> list[tuple[str, float]]:
        """(translation, score) of each line of a window whose first line is line first + 1."""
        return [(result.translation, result.score) for result in self.termed(lines, first)]

    def aligned_lines(self, lines: list[str], first: int) -> list[tuple[str, str]]:
        """(translation, `I-J ...` word alignment) of each line of such a window."""
        return [(result.translation, result.alignment) for result in self.termed(lines, first)]

    def termed(self, lines: list[str], first: int) -> list[TermTranslation]:
        """Each line of a window whose first line is line first + 1 translated with its
        terms; the lines whose terms did not fit or are missing said on stderr."""
        from export.translator.signatures import in_language
        from export.translator.terms import termed_in_batches

        terms = [self.glossary.target_terms(line) for line in lines]
        translate_terms = in_language(self.translator.translate_terms, self.target_lang,
                                      self.translator.target_languages)
        results = termed_in_batches(translate_terms, lines, terms, self.batch_size)
        for index, (line_terms, result) in enumerate(zip(terms, results)):
            problem = term_problem(line_terms, result)
            if problem:
                print(f"keras-transformer translate: {self.input_name}:{first + index + 1}: "
                      f"{problem}", file=sys.stderr)
        return results


def term_problem(terms: list[str], result: TermTranslation) -> str | None:
    """What went wrong with a line's terms, or None when its translation holds them all."""
    if not result.terms_fit:
        return (f"glossary terms {', '.join(map(_quoted, terms))} do not fit in the line's "
                f"output limit (source length + extra_length); translated without them")
    missing = [term for term, found in zip(terms, result.term_found) if not found]
    if missing:
        return f"glossary terms {', '.join(map(_quoted, missing))} missing from the translation"
    return None


def _quoted(term: str) -> str:
    return '"' + term + '"'
