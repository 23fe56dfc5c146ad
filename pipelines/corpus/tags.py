"""Corpus tags (`data.corpora[i].tag`): a reserved source token such as `<bt>`, prepended by
prepare to the source side of its corpus's train pairs and learned as a SentencePiece user
symbol (`keras_transformer.tokenizer.train_sentencepiece`), so that training and the served
graphs, which share spm.model, read it as one id.

A tag is `<` a letter, then letters, digits, `_` or `-`, then `>`: never one of the pieces
every vocabulary has anyway (SentencePiece's control pieces `<pad>`, `<unk>`, `<s>`, `</s>`,
the byte pieces `<0x41>`). Its form is checked when the config loads; that no corpus text holds
it, and that a parent's vocabulary (`train.init_from`) has it as one piece, by prepare.

Example:
    >>> tag_problem("<bt>") is None, tag_problem("bt") is None, tagged("Hello.", "<bt>")
    (True, False, '<bt> Hello.')
"""
from __future__ import annotations

import re

TAG_FORM = r"<[A-Za-z][A-Za-z0-9_-]*>"
CONTROL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")  # the ids tokenizer.py reserves


def tag_problem(tag: str) -> str | None:
    """Why `tag` cannot tag a corpus, or None."""
    if not re.fullmatch(TAG_FORM, tag):
        return "a tag is <NAME>, NAME a letter then letters, digits, _ or - (e.g. <bt>)"
    if tag in CONTROL_PIECES:
        return f"a tag must not be a SentencePiece control piece ({', '.join(CONTROL_PIECES)})"
    return None


def tagged(source: str, tag: str | None) -> str:
    """A source sentence as its corpus's train shards hold it: after the tag and a space."""
    return f"{tag} {source}" if tag else source
