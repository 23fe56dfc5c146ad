"""Target-language tokens of a multilingual model: `<2fr>` before the source asks for French.

A model trained on corpora with several target languages (`data.corpora[i].tgt_lang`) reads
the target language as the first piece of its source: the token `<2LANG>`, a SentencePiece
user symbol (`keras_transformer.tokenizer.train_sentencepiece`), so one id. The languages a
model knows are those of the language tokens among its vocabulary's user symbols: the
SentencePiece model alone tells whether a model is multilingual (no metadata beside it), and
training, evaluation and every export read it the same way. A bilingual model has none.

A language code is what `LANGUAGE_FORM` matches: two or three lowercase letters, then optional
`-` subtags of letters and digits (`fr`, `pt-BR`, `zh-Hant`). Corpus tags (`<bt>`,
pipelines/corpus/tags.py) start with a letter, so they never look like a language token.

Example:
    >>> language_token("fr"), language_of_token("<2pt-BR>"), language_problem("French")
    ('<2fr>', 'pt-BR', "a language is a code such as fr, de or pt-BR, got 'French'")
    >>> with_language("Hello.", "fr"), split_language("<2fr> Hello.")
    ('<2fr> Hello.', ('fr', 'Hello.'))
    >>> target_language_problem("es", ("fr", "de"))
    "target language 'es': the model translates into fr, de (its target-language tokens)"
"""
from __future__ import annotations

import re
from typing import Sequence

LANGUAGE_FORM = r"[a-z]{2,3}(?:-[A-Za-z0-9]{2,8})*"
TOKEN = re.compile(rf"<2({LANGUAGE_FORM})>")


def language_problem(language: str) -> str | None:
    """Why `language` is not a language code, or None."""
    if re.fullmatch(LANGUAGE_FORM, language):
        return None
    return f"a language is a code such as fr, de or pt-BR, got {language!r}"


def language_token(language: str) -> str:
    """The source token that asks for `language`: `<2fr>`."""
    return f"<2{language}>"


def language_of_token(piece: str) -> str | None:
    """The language that a piece asks for, or None when it is not a language token."""
    match = TOKEN.fullmatch(piece)
    return match.group(1) if match else None


def with_language(source: str, language: str | None) -> str:
    """A source sentence as a multilingual model reads it: after its target-language token
    and a space (unchanged for None: a bilingual model)."""
    return f"{language_token(language)} {source}" if language else source


def target_languages(user_symbols: Sequence[str]) -> tuple[str, ...]:
    """The target languages of a model, from its vocabulary's user symbols
    (`keras_transformer.tokenizer.user_symbols`), in vocabulary order; () for a bilingual
    model."""
    return tuple(language for language in map(language_of_token, user_symbols) if language)


def unknown_language_message(language: str, known: Sequence[str]) -> str:
    """The one line every entry point (CLI, signatures, runtimes) gives for a target language
    the model was not trained for."""
    if not known:
        return (f"target language {language!r}: this model is bilingual (trained with no "
                f"target-language tokens); translate without a target language")
    return (f"target language {language!r}: the model translates into {', '.join(known)} "
            f"(its target-language tokens)")


def missing_language_message(known: Sequence[str]) -> str:
    """The one line for a multilingual model asked to translate with no target language."""
    return (f"this model is multilingual: give a target language for every line (one of "
            f"{', '.join(known)})")


def target_language_problem(language: str | None, known: Sequence[str]) -> str | None:
    """Why a model translating into `known` (() for a bilingual model) cannot be asked for
    `language` (None: no target language given), or None: the one check of every entry point
    that takes a target language (the CLI, the runtimes' line methods)."""
    if language is None:
        return missing_language_message(known) if known else None
    return None if language in known else unknown_language_message(language, known)


def split_language(source: str) -> tuple[str | None, str]:
    """(target language, text) of a source as `with_language` wrote it; (None, source) when it
    does not begin with a language token (a bilingual model's)."""
    token, _, text = source.partition(" ")
    language = language_of_token(token)
    return (language, text) if language else (None, source)
