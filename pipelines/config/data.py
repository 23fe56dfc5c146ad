"""The `data` section (prepare's): the corpus (`data.source`) or corpora (`data.corpora`, each
with a weight, an optional tag and the noise training adds to it), their cleaning, the shared
vocabulary and the length limit, checked when the config loads (`FieldError` names the key).

Example:
    >>> DataConfig(source="bible:en-fr").vocab_size
    8000
    >>> [c.name for c in DataConfig(corpora=(CorpusConfig("bible", "bible:en-fr"),
    ...     CorpusConfig("bt", "files", train=SplitFiles(tsv=Path("bt.tsv")), tag="<bt>"))
    ... ).corpus_configs()]
    ['bible', 'bt']

`DataConfig(source="files")` raises `FieldError("source", "source 'files' needs a train split
(data.train)")`, which the loader reports as `FILE:LINE: data.source: ...`.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Literal

from keras_transformer.languages import language_problem
from pipelines.corpus.bible import bible_languages
from pipelines.corpus.language_id import MODEL_NAME, language_label
from pipelines.corpus.shards import DEFAULT_CORPUS, MAX_SHARDS, corpus_name_problem
from pipelines.corpus.source_spec import check_source_spec
from pipelines.corpus.tags import tag_problem
from pipelines.yaml_dataclasses import FieldError


@dataclasses.dataclass(frozen=True)
class SplitFiles:
    """One split of a user corpus: parallel files `src` and `tgt` (one sentence per line), or a
    `tsv` file with `source<TAB>target` lines. Relative paths resolve against the config file."""

    src: Path | None = None
    tgt: Path | None = None
    tsv: Path | None = None

    def __post_init__(self) -> None:
        if (self.src is None) != (self.tgt is None):
            raise FieldError("tgt" if self.src else "src", "src and tgt go together")
        if (self.tsv is None) == (self.src is None):
            raise ValueError("give either src and tgt, or tsv")


@dataclasses.dataclass(frozen=True)
class NoiseConfig:
    """Noise on the fly on a corpus's train pairs (`data.corpora[i].noise`, or `data.noise` for
    `data.source`), applied by pipelines/training/noise.py as training reads them: each key is
    the probability that a pair gets that noise, drawn for each pair independently (0: never).
    """

    typos: float = 0.0  # one character edit in a few source words (the target stays clean)
    uppercase: float = 0.0  # both sides in upper case
    titlecase: float = 0.0  # each word of both sides starts with a capital
    remove_end_punctuation: float = 0.0  # the end mark both sides share (. ! ? ...) removed
    inline_tags: float = 0.0  # a placeholder or an element inserted at matching words of both

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not 0 <= value <= 1:
                raise FieldError(field.name, f"must be a probability from 0 to 1, got {value!r}")


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
    """One corpus: an item of `data.corpora`, or the one corpus of `data.source`.

    `source` is `bible:SRC-TGT` (builtin, e.g. `bible:en-fr`), `tfds:NAME/CONFIG` (e.g.
    `tfds:wmt14_translate/de-en`; `src_lang`/`tgt_lang` pick the feature keys, default the
    builder's supervised keys) or `files` (`train`, optional `dev`/`test`). `weight` is its
    share of the training pairs relative to the other corpora's; `tag` (e.g. `<bt>`,
    pipelines/corpus/tags.py) is prepended to the source side of its train pairs; `max_pairs`
    keeps a uniform sample of that many of its train pairs. `src_lang`/`tgt_lang` name the
    languages of a `files` corpus: needed when the corpora translate into several languages
    (one model, a target-language token on each source: keras_transformer/languages.py).
    `noise` (`NoiseConfig`) is what training does to its train pairs as it reads them
    (prepare never reads it).
    """

    name: str
    source: str
    src_lang: str | None = None
    tgt_lang: str | None = None
    train: SplitFiles | None = None
    dev: SplitFiles | None = None
    test: SplitFiles | None = None
    weight: float = 1.0
    tag: str | None = None
    max_pairs: int | None = None
    noise: NoiseConfig | None = None

    def __post_init__(self) -> None:
        problem = corpus_name_problem(self.name)
        if problem:
            raise FieldError("name", f"{problem}, got {self.name!r}")
        message = check_source_spec(self.source)
        if message:
            raise FieldError("source", f"{message}, got {self.source!r}")
        kind = self.source.split(":")[0]
        if kind == "files" and self.train is None:
            raise FieldError("source", "source 'files' needs a train split (data.train)")
        for key in ("train", "dev", "test"):
            if kind != "files" and getattr(self, key) is not None:
                raise FieldError(key, f"only source 'files' takes split files, not {self.source!r}")
        for key in ("src_lang", "tgt_lang"):
            if kind == "bible" and getattr(self, key) is not None:
                raise FieldError(key, "the languages of bible:SRC-TGT come from the source")
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise FieldError("weight", f"must be a positive number, got {self.weight!r}")
        problem = tag_problem(self.tag) if self.tag is not None else None
        if problem:
            raise FieldError("tag", f"{problem}, got {self.tag!r}")
        if self.max_pairs is not None and self.max_pairs < 1:
            raise FieldError("max_pairs", f"must be at least 1, got {self.max_pairs!r}")

    @property
    def languages(self) -> tuple[str | None, str | None]:
        """(source, target) languages: those of `bible:SRC-TGT`, else `src_lang`/`tgt_lang`
        (None where not given)."""
        if self.source.partition(":")[0] == "bible":
            return bible_languages(self.source)
        return self.src_lang, self.tgt_lang


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """The `data` section: the corpus or corpora, their cleaning, the shared vocabulary and the
    batching.

    One corpus is `source` (with `src_lang`, `tgt_lang`, `train`, `dev`, `test`: see
    `CorpusConfig`); several are `corpora`, a list of `CorpusConfig` mappings, of which the one
    named `dev_test` (default the first) gives the dev and test splits. A split that corpus
    lacks is held out from its train pairs: `holdout` pairs (whole chapters for the Bible).
    Corpora with several target languages make a multilingual model: each source is read
    after its target-language token (`target_language`), and the first corpus of each target
    language gives that language's dev and test pairs (`dev_test_corpora`).
    """

    source: str | None = None
    src_lang: str | None = None
    tgt_lang: str | None = None
    train: SplitFiles | None = None
    dev: SplitFiles | None = None
    test: SplitFiles | None = None
    corpora: tuple[CorpusConfig, ...] = ()
    dev_test: str | None = None  # the corpus of `corpora` that gives dev and test
    tfds_data_dir: Path | None = None  # where TFDS keeps its data (default ~/tensorflow_datasets)
    holdout: int = 1000
    max_length_ratio: float = 2.0  # drop train pairs whose lengths in characters differ more
    vocab_size: int = 8000  # shared SentencePiece pieces (an upper bound on small corpora)
    vocab_type: Literal["bpe", "unigram"] = "bpe"
    character_coverage: float = 1.0  # rarer characters fall back to byte pieces
    vocab_max_sentences: int = 1_000_000  # train sentences per side sampled for the vocabulary
    max_length: int = 128  # tokens of a side, BOS / EOS included; longer pairs are skipped
    shards: int | None = None  # train shard files of each corpus (default: one per 500,000
    # pairs, at most 256)
    seed: int = 1234  # shuffling, held-out sampling, vocabulary sampling
    # Word alignments of the train pairs written beside the shards (data/*.align) for
    # train.guided_alignment_weight: by eflomal (pipelines/corpus/alignments.py), or none.
    alignments: Literal["none", "eflomal"] = "none"
    noise: NoiseConfig | None = None  # the noise of `source`'s train pairs (training's)
    # Drop pairs with a side not in its corpus's language (pipelines/corpus/language_id.py):
    # auto checks the languages each corpus has (bible:SRC-TGT's, a TFDS builder's, src_lang /
    # tgt_lang), on (true) requires them of every corpus, off (false) checks none.
    language_id: bool | str = "auto"
    # Sequence-level knowledge distillation (pipelines/corpus/distill.py): the teacher run
    # whose export translates the train sources, for the student to learn its translations;
    # with distill_originals the original pairs are trained on too.
    distill_from: str | tuple[str, ...] | None = None
    distill_originals: bool = False

    def __post_init__(self) -> None:
        self._check_corpora()
        self._check_language_id()
        self._check_distillation()
        for key, low in (("holdout", 1), ("vocab_size", 300), ("vocab_max_sentences", 1000),
                         ("max_length", 3)):
            if getattr(self, key) < low:
                raise FieldError(key, f"must be at least {low}, got {getattr(self, key)!r}")
        if self.shards is not None and not 1 <= self.shards <= MAX_SHARDS:
            raise FieldError("shards", f"must be between 1 and {MAX_SHARDS}, got {self.shards!r}")
        if not 0 < self.character_coverage <= 1:
            raise FieldError("character_coverage",
                             f"must be in (0, 1], got {self.character_coverage!r}")
        if self.max_length_ratio and self.max_length_ratio < 1:
            raise FieldError("max_length_ratio",
                             f"must be 0 (off) or at least 1, got {self.max_length_ratio!r}")

    def corpus_configs(self) -> tuple[CorpusConfig, ...]:
        """The corpora, in order: `corpora`, or the one corpus of `source` (named `main`)."""
        if self.corpora:
            return self.corpora
        return (CorpusConfig(DEFAULT_CORPUS, self.source, self.src_lang, self.tgt_lang,
                             self.train, self.dev, self.test),)

    def corpus_noise(self) -> dict[str, NoiseConfig | None]:
        """Each corpus's noise by its name: `corpora`'s, or `noise` for `source` (training
        reads it; prepare does not, so changing it never prepares again)."""
        if self.corpora:
            return {corpus.name: corpus.noise for corpus in self.corpora}
        return {DEFAULT_CORPUS: self.noise}

    def dev_test_corpus(self) -> str:
        """The name of the corpus that gives the dev and test splits (the first corpus's of
        each target language in a multilingual run: `dev_test_corpora`)."""
        return self.dev_test or self.corpus_configs()[0].name

    def target_languages(self) -> tuple[str, ...]:
        """The distinct target languages of the corpora, in corpus order: several for a
        multilingual model."""
        return tuple(dict.fromkeys(corpus.languages[1] for corpus in self.corpus_configs()
                                   if corpus.languages[1]))

    def language_pairs(self) -> set[tuple[str, str]]:
        """The (source, target) language pairs the corpora declare (bible:SRC-TGT, src_lang /
        tgt_lang); none for corpora that declare no languages."""
        return {corpus.languages for corpus in self.corpus_configs()
                if None not in corpus.languages}

    def multilingual(self) -> bool:
        """Whether the corpora translate into several languages (one model for them all)."""
        return len(self.target_languages()) > 1

    def target_language(self, corpus: CorpusConfig) -> str | None:
        """The target-language token's language for `corpus`'s sources, None when bilingual."""
        return corpus.languages[1] if self.multilingual() else None

    def dev_test_corpora(self) -> tuple[str, ...]:
        """The corpora that give dev and test pairs: `dev_test_corpus`, or in a multilingual
        run the first corpus of each target language (their pairs, each after its token)."""
        if not self.multilingual():
            return (self.dev_test_corpus(),)
        first = {}
        for corpus in self.corpus_configs():
            first.setdefault(corpus.languages[1], corpus.name)
        return tuple(first.values())

    def teachers(self) -> tuple[str, ...]:
        """The runs `distill_from` names (one teacher, or several: an ensemble); () when the
        run is not distilled."""
        if self.distill_from is None:
            return ()
        return (self.distill_from,) if isinstance(self.distill_from, str) else self.distill_from

    def _check_distillation(self) -> None:
        """`distill_from` naming at least one run, each once; `distill_originals` only with it."""
        teachers = self.teachers()
        if self.distill_from is not None and not teachers:
            raise FieldError("distill_from", "must name a teacher run directory (or a list of "
                                             "them), got an empty list")
        for index, teacher in enumerate(teachers):
            key = "distill_from" if isinstance(self.distill_from, str) else \
                f"distill_from[{index}]"
            if not teacher.strip():
                raise FieldError(key, "must name a teacher run directory, got ''")
            if teacher in teachers[:index]:
                raise FieldError(key, f"{teacher} is named twice")
        if self.distill_originals and not teachers:
            raise FieldError("distill_originals", "keeps the original pairs beside a teacher's "
                                                  "translations: give data.distill_from too")

    def _check_language_id(self) -> None:
        """`language_id` on, off or auto; with it not off, the declared languages known to the
        model; with it on, a `files` corpus declaring both."""
        if self.language_id not in (True, False, "auto"):
            raise FieldError("language_id", f"must be on, off or auto, got {self.language_id!r}")
        if self.language_id is False:
            return
        for index, corpus in enumerate(self.corpus_configs()):
            where = f"corpora[{index}]." if self.corpora else ""
            for key in ("src_lang", "tgt_lang"):
                code = getattr(corpus, key)
                if code is not None and language_label(code) is None:
                    raise FieldError(f"{where}{key}", f"{code!r} is not a language {MODEL_NAME} "
                                     f"knows (data.language_id checks it): give a code such as "
                                     f"fr, de or pt-BR, or set data.language_id: off")
                if (self.language_id is True and code is None
                        and corpus.source.partition(":")[0] == "files"):
                    raise FieldError("language_id", f"on needs the languages of every corpus: "
                                     f"give data.{where}{key}, or set data.language_id: auto")

    def _check_corpora(self) -> None:
        """One corpus (`source`, checked as a `CorpusConfig`) or several (`corpora`), not both;
        distinct names; `dev_test` naming one, the only one with dev / test files."""
        if self.source is not None and self.corpora:
            raise FieldError("corpora", "give data.source (one corpus) or data.corpora "
                                        "(several), not both")
        if self.source is None and not self.corpora:
            raise FieldError("source", "missing required key: give data.source (one corpus) or "
                                       "data.corpora (several)")
        if self.source is not None:
            if self.dev_test is not None:
                raise FieldError("dev_test", "names one of data.corpora; data.source is the only "
                                             "corpus")
            self.corpus_configs()  # checks the source and its splits
            return
        for key in ("src_lang", "tgt_lang", "train", "dev", "test", "noise"):
            if getattr(self, key) is not None:
                raise FieldError(key, "with data.corpora, give it in the corpus it belongs to")
        names = [corpus.name for corpus in self.corpora]
        for index, name in enumerate(names):
            if name in names[:index]:
                raise FieldError(f"corpora[{index}].name", f"{name!r} names two corpora (also "
                                 f"data.corpora[{names.index(name)}])")
        if self.dev_test is not None and self.dev_test not in names:
            raise FieldError("dev_test", f"must name one of data.corpora ({', '.join(names)}), "
                                         f"got {self.dev_test!r}")
        self._check_languages()
        givers = self.dev_test_corpora()
        for index, corpus in enumerate(self.corpora):
            for key in ("dev", "test"):
                if getattr(corpus, key) is not None and corpus.name not in givers:
                    raise FieldError(f"corpora[{index}].{key}",
                                     f"only the corpus data.dev_test names "
                                     f"({self.dev_test_corpus()}) gives the {key} split"
                                     if len(givers) == 1 else
                                     f"only the first corpus of each target language "
                                     f"({', '.join(givers)}) gives the {key} split")

    def _check_languages(self) -> None:
        """In a multilingual run: every corpus's target language known and a language code
        (it becomes a token), and no `dev_test` (each target language's first corpus gives
        its dev and test)."""
        if not self.multilingual():
            return
        languages = ", ".join(self.target_languages())
        for index, corpus in enumerate(self.corpora):
            target = corpus.languages[1]
            if target is None:
                raise FieldError(f"corpora[{index}].tgt_lang",
                                 f"the corpora translate into several languages ({languages}): "
                                 f"give corpus {corpus.name}'s target language")
            problem = language_problem(target)
            if problem:
                raise FieldError(f"corpora[{index}].tgt_lang", problem)
        if self.dev_test is not None:
            raise FieldError("dev_test", f"the corpora translate into several languages "
                                         f"({languages}): each one's dev and test come from its "
                                         f"first corpus in data.corpora; order them instead")
