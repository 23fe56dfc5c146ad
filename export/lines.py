"""Lines in, translations out, in batches of similar lengths (no TensorFlow import).

The runtimes' line methods (SavedModel, ONNX, CTranslate2) batch through here:
`translate_in_batches` sorts the lines by length (less padding), calls a batch function on at
most `batch_size` of them at a time and returns its results in the lines' order;
`scored_in_batches` and `sampled_in_batches` wrap a runtime's `translate` (sampled line i
seeded seed + i); `normalize_spaces` and `decode_line` read a line as the graphs' tokenizer
reads it (a run of whitespace and NUL as one space, each invalid UTF-8 byte as one U+FFFD);
`language_line` and `line_languages` give a multilingual model's lines their target languages
as its graphs do (`export.text.language_text`), `by_language` translates lines of several
target languages through line methods that take one, `translate_prepared` the lines prepare
wrote (each after its language's token); `prefix_problem` says why prefixes cannot be forced,
or None.

Example:
    >>> translate_in_batches(lambda batch: [line.upper() for line in batch],
    ...                      ["ccc", "a", "bb"], batch_size=2)
    ['CCC', 'A', 'BB']
    >>> normalize_spaces("one   two"), decode_line(b"caf\\xe9") == "caf\\ufffd"
    ('one two', True)
    >>> language_line("Hello.", "fr"), language_line(" ", "fr"), language_line("Hello.", None)
    ('<2fr> Hello.', ' ', 'Hello.')
"""
from __future__ import annotations

import codecs
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from keras_transformer.languages import split_language, target_language_problem, with_language

if TYPE_CHECKING:
    from export.metadata import ExportMetadata
    from keras_transformer.decoding_settings import SamplingSettings

L, T = TypeVar("L"), TypeVar("T")  # a line (or line and prefix); its translation

# SentencePiece reads each byte outside valid UTF-8 as one U+FFFD; so does this error handler
# (Python's "replace" gives one U+FFFD per maximal invalid subsequence).
SPACES = re.compile(r"[\t\n\f\r \x00]+")  # RE2's \s and NUL, read as one space by the graphs


def normalize_spaces(line: str) -> str:
    """A line as the graphs' tokenizer reads it: runs of whitespace and NUL as one space."""
    return SPACES.sub(" ", line)


codecs.register_error("sentencepiece",
                      lambda error: ("\ufffd" * (error.end - error.start), error.end))


def decode_line(line: str | bytes) -> str:
    """Text of a line given as bytes, invalid UTF-8 read as SentencePiece reads it."""
    return line if isinstance(line, str) else line.decode("utf-8", "sentencepiece")


def language_line(line: str, language: str | None) -> str:
    """A line as a model translating into `language` reads it (None: a bilingual model's line,
    as it is): after the language's token (`keras_transformer.languages.with_language`), but
    a blank line (no piece) as it is, so that it translates to nothing; as
    `export.text.language_text` joins them in the graphs."""
    if language is None or not normalize_spaces(line).strip(" "):
        return line
    return with_language(line, language)


def line_languages(target_lang: str | Sequence[str] | None, count: int,
                   known: Sequence[str]) -> list[str | None]:
    """The target language of each of `count` lines for a model translating into `known` (()
    for a bilingual model, whose lines have None): `target_lang` for every line (a code) or
    line by line (a sequence of codes).

    Raises:
        ValueError: `keras_transformer.languages.target_language_problem`'s line (a code the
            model does not know, none for a multilingual model, one for a bilingual model),
            or not one code per line.
    """
    given = target_lang is None or isinstance(target_lang, str)
    languages = [target_lang] * count if given else list(target_lang)
    if len(languages) != count:
        raise ValueError(f"{len(languages)} target languages for {count} lines")
    for language in dict.fromkeys([target_lang] if given else languages):
        problem = target_language_problem(language, known)
        if problem:
            raise ValueError(problem)
    return languages


def by_language(translate: Callable[[list[L], str | None], list[T]], lines: Sequence[L],
                languages: Sequence[str | None]) -> list[T]:
    """`translate(lines, target_lang)` (a runtime's line method) called once per target
    language on that language's lines; the results in the order of `lines`."""
    results: list[T] = [None] * len(lines)  # type: ignore[list-item]  # all set below
    for language in dict.fromkeys(languages):
        indices = [index for index, each in enumerate(languages) if each == language]
        for index, result in zip(indices, translate([lines[i] for i in indices], language)):
            results[index] = result
    return results


def translate_prepared(translate: Callable[[list[str], str | None], list[T]],
                       sources: Sequence[str], languages: Sequence[str]) -> list[T]:
    """Translations of source lines as prepare writes them, through `translate(texts,
    target_lang)` (a runtime's line method) of a model translating into `languages`: a
    multilingual model's lines each into the language of its token
    (`keras_transformer.languages.with_language`), read off the line; a bilingual model's
    lines as they are."""
    split = ([split_language(source) for source in sources] if languages
             else [(None, source) for source in sources])
    return by_language(translate, [text for _, text in split],
                       [language for language, _ in split])


def translate_in_batches(translate_batch: Callable[[list[L]], Sequence[T]],
                         lines: Sequence[L], batch_size: int,
                         length: Callable[[L], int] = len) -> list[T]:
    """Calls `translate_batch` on batches of at most `batch_size` lines sorted by `length`
    (less padding); returns the translations (or n-best lists) in the order of `lines`."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    order = sorted(range(len(lines)), key=lambda i: length(lines[i]))
    translations: list[T] = [None] * len(lines)  # type: ignore[list-item]  # all set below
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        for index, text in zip(batch, translate_batch([lines[i] for i in batch])):
            translations[index] = text
    return translations


def scored_in_batches(translate: Callable[[list[str]], dict[str, Any]], lines: Sequence[str],
                      batch_size: int) -> list[tuple[str, float]]:
    """(translation, score) of each line in order, from `translate(batch)` -> {"translation":
    [batch], "score": [batch]} (a runtime's translate) over batches of similar lengths."""
    def scored_batch(batch: list[str]) -> list[tuple[str, float]]:
        output = translate(batch)
        return [(text, float(score)) for text, score in zip(output["translation"],
                                                            output["score"])]

    return translate_in_batches(scored_batch, lines, batch_size)


def sampled_in_batches(translate: Callable[..., dict[str, Any]], lines: Sequence[str],
                       sampling: SamplingSettings, first_index: int,
                       batch_size: int) -> list[tuple[str, float]]:
    """(sampled translation, score) of each line in order, from `translate(text=,
    top_k=, top_p=, temperature=, seed=)` (numpy arrays [batch]; the `translate_sample`
    signature), line i of the input (`first_index` + its index here) seeded seed + i."""
    import numpy as np

    def sampled_batch(batch: list[tuple[int, str]]) -> list[tuple[str, float]]:
        size = len(batch)
        output = translate(
            text=np.array([line for _, line in batch], object),
            top_k=np.full([size], sampling.top_k, np.int32),
            top_p=np.full([size], sampling.top_p, np.float32),
            temperature=np.full([size], sampling.temperature, np.float32),
            seed=np.array([sampling.seed + first_index + index for index, _ in batch], np.int64))
        return [(text, float(score)) for text, score in zip(output["translation"],
                                                            output["score"])]

    return translate_in_batches(sampled_batch, list(enumerate(lines)), batch_size,
                                length=lambda item: len(item[1]))


def prefix_problem(lines: Sequence[str], prefixes: Sequence[str], spm_model: Path,
                   metadata: ExportMetadata) -> str | None:
    """What keeps `prefixes` (one per line) from being forced, or None: a count other than the
    lines', or a prefix of more pieces than its line's translation may have (the export's
    `DecodingSettings.output_limit`)."""
    if len(prefixes) != len(lines):
        return f"{len(prefixes)} prefixes for {len(lines)} lines"
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=str(spm_model))
    for number, (line, prefix) in enumerate(zip(lines, prefixes), 1):
        if not prefix.strip():
            continue
        settings = metadata.settings
        source = settings.source_length(len(processor.encode(normalize_spaces(line))))
        limit = settings.output_limit(source, metadata.model.max_length)
        pieces = len(processor.encode(normalize_spaces(prefix)))
        if pieces > limit:
            return (f"line {number}: the prefix has {pieces} pieces, more than the {limit} "
                    f"tokens its translation may have (source length + extra_length)")
    return None
