"""The `data` section (prepare's): the corpus, its cleaning, the shared vocabulary and the
length limit, checked when the config loads (`FieldError` names the key).

Example:
    >>> DataConfig(source="bible:en-fr").vocab_size
    8000

`DataConfig(source="files")` raises `FieldError("source", "source 'files' needs a train split
(data.train)")`, which the loader reports as `FILE:LINE: data.source: ...`.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from pipelines.corpus.shards import MAX_SHARDS
from pipelines.corpus.source_spec import check_source_spec
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
class DataConfig:
    """The `data` section: the corpus, its cleaning, the shared vocabulary and the batching.

    `source` is `bible:SRC-TGT` (builtin, e.g. `bible:en-fr`), `tfds:NAME/CONFIG` (e.g.
    `tfds:wmt14_translate/de-en`; `src_lang`/`tgt_lang` pick the feature keys, default the
    builder's supervised keys) or `files` (`train`, optional `dev`/`test`). A split the source
    lacks is held out from train: `holdout` pairs (whole chapters for the Bible).
    """

    source: str
    src_lang: str | None = None
    tgt_lang: str | None = None
    train: SplitFiles | None = None
    dev: SplitFiles | None = None
    test: SplitFiles | None = None
    tfds_data_dir: Path | None = None  # where TFDS keeps its data (default ~/tensorflow_datasets)
    holdout: int = 1000
    max_length_ratio: float = 2.0  # drop train pairs whose lengths in characters differ more
    vocab_size: int = 8000  # shared SentencePiece pieces (an upper bound on small corpora)
    vocab_type: Literal["bpe", "unigram"] = "bpe"
    character_coverage: float = 1.0  # rarer characters fall back to byte pieces
    vocab_max_sentences: int = 1_000_000  # train sentences per side sampled for the vocabulary
    max_length: int = 128  # tokens of a side, BOS / EOS included; longer pairs are skipped
    shards: int | None = None  # train shard files (default: one per 500,000 pairs, at most 256)
    seed: int = 1234  # shuffling, held-out sampling, vocabulary sampling
    # Word alignments of the train pairs written beside the shards (data/*.align) for
    # train.guided_alignment_weight: by eflomal (pipelines/corpus/alignments.py), or none.
    alignments: Literal["none", "eflomal"] = "none"

    def __post_init__(self) -> None:
        message = check_source_spec(self.source)
        if message:
            raise FieldError("source", f"{message}, got {self.source!r}")
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
        kind = self.source.split(":")[0]
        if kind == "files" and self.train is None:
            raise FieldError("source", "source 'files' needs a train split (data.train)")
        for key in ("train", "dev", "test"):
            if kind != "files" and getattr(self, key) is not None:
                raise FieldError(key, f"only source 'files' takes split files, not {self.source!r}")
        for key in ("src_lang", "tgt_lang"):
            if kind == "bible" and getattr(self, key) is not None:
                raise FieldError(key, "the languages of bible:SRC-TGT come from the source")
