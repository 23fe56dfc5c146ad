"""The forms of `data.source`: bible:SRC-TGT (the builtin corpora), tfds:NAME/CONFIG, files.

Example:
    >>> check_source_spec("bible:en-fr") is None, check_source_spec("web:en-fr") is None
    (True, False)
"""
from __future__ import annotations

import re

from pipelines.corpus.bible import BIBLES


def check_source_spec(spec: str) -> str | None:
    """The problem with a `data.source` value, or None when it is well formed."""
    kind, _, rest = spec.partition(":")
    if kind == "files" and not rest:
        return None
    if kind == "bible":
        src, _, tgt = rest.partition("-")
        if src in BIBLES and tgt in BIBLES and src != tgt:
            return None
        return (f"unknown builtin corpus; builtins are bible:SRC-TGT with two of "
                f"{', '.join(BIBLES)} (e.g. bible:en-fr, bible:en-de, bible:en-es)")
    if kind == "tfds":
        if re.fullmatch(r"[\w.-]+(/[\w.-]+)?(:[\w.]+)?", rest):
            return None
        return "expected tfds:NAME/CONFIG, e.g. tfds:wmt14_translate/de-en"
    return "expected bible:SRC-TGT, tfds:NAME/CONFIG or files"
