"""The layout of a prepared train split: shard files and the manifest that lists them.

`data/train-00000-of-00004.src` / `.tgt` ... hold the train pairs, pair i of the split in shard
i mod N, so shards differ by at most one pair; with several corpora (`data.corpora`) each has
its own shards, `data/train-NAME-00000-of-00004.src` .... `data/train.json`, written last,
lists the shards with their pair counts and each shard's corpus, weight and tag (and, with
`data.alignments`, its word-alignment file `.align`: `pipelines.corpus.alignments`); readers
take the list from it (never from a glob), so files left by an older prepare are never read. A
manifest of an earlier version, without corpora, is one corpus of weight 1. Several shards let
tf.data interleave them and let each MultiWorkerMirroredStrategy worker read its own files.

Example:
    >>> train_shards(Path("runs/demo/data"))  # [(train-00000-of-00001.src, ....tgt)]
    >>> train_corpora(Path("runs/demo/data"))  # [CorpusShards("main", 1.0, None, (28597,))]
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Sequence

from pipelines import InputError
from pipelines.files import atomic_open

MANIFEST = "train.json"
PAIRS_PER_SHARD = 500_000  # the default shard size
MAX_SHARDS = 256
Shard = tuple[Path, Path]  # (source file, target file)
DEFAULT_CORPUS = "main"  # the name of the one corpus of `data.source` (and of older manifests)
CORPUS_NAME = r"[a-z0-9_]+"  # a corpus name, part of its shards' file names


@dataclasses.dataclass(frozen=True)
class CorpusShards:
    """One corpus of the train split as the manifest records it: its name, its weight (share
    of the training pairs, relative to the others'), its tag (or None), the pairs of each of
    its shards and its (source, target) languages where the config declares them (None
    otherwise, and in manifests older than this record)."""

    name: str
    weight: float
    tag: str | None
    pairs: tuple[int, ...]
    languages: tuple[str | None, str | None] = (None, None)


def corpus_name_problem(name: str) -> str | None:
    """Why `name` cannot name a corpus (it goes into shard file names), or None."""
    if re.fullmatch(CORPUS_NAME, name):
        return None
    return "a corpus name is lowercase letters, digits and underscores (it names its shards)"


def shard_count(pairs: int, requested: int | None = None) -> int:
    """`requested` (`data.shards`), else one shard per PAIRS_PER_SHARD pairs, at most
    MAX_SHARDS; never more shards than pairs."""
    count = requested or min(MAX_SHARDS, math.ceil(pairs / PAIRS_PER_SHARD))
    return max(1, min(count, pairs))


def shard_stem(index: int, count: int, corpus: str | None = None) -> str:
    """`train-00003-of-00008` (or `train-CORPUS-00003-of-00008`): the name of shard `index`
    without its side's suffix."""
    return f"train-{f'{corpus}-' if corpus else ''}{index:05d}-of-{count:05d}"


def shard_stems(corpora: Sequence[tuple[str, int]]) -> list[list[str]]:
    """The shard names of each (corpus name, shard count): the corpus's name in them when
    there are several corpora."""
    named = len(corpora) > 1
    return [[shard_stem(i, count, name if named else None) for i in range(count)]
            for name, count in corpora]


def is_shard_file(path: Path) -> bool:
    """A train shard file of any prepare (or the single train.src / .tgt of older runs)."""
    stem, suffix = path.stem, path.suffix
    return suffix in (".src", ".tgt", ".align") and (stem == "train" or (
        stem.startswith("train-") and "-of-" in stem))


def write_manifest(data_dir: Path, corpora: Sequence[CorpusShards],
                   aligner: str | None = None) -> None:
    """data/train.json for the shards of `corpora` (named by `shard_stems`), with their
    `.align` files when `aligner` (the `data.alignments` that wrote them) is given."""
    stems = shard_stems([(corpus.name, len(corpus.pairs)) for corpus in corpora])
    shards = [{"src": f"{stem}.src", "tgt": f"{stem}.tgt", "pairs": n, "corpus": corpus.name,
               "weight": corpus.weight, "tag": corpus.tag, "languages": list(corpus.languages),
               **({"align": f"{stem}.align"} if aligner else {})}
              for corpus, names in zip(corpora, stems) for stem, n in zip(names, corpus.pairs)]
    manifest = {"pairs": sum(sum(corpus.pairs) for corpus in corpora), "shards": shards,
                **({"aligner": aligner} if aligner else {})}
    with atomic_open(data_dir / MANIFEST, "w") as file:
        json.dump(manifest, file, indent=1)


def train_shards(data_dir: Path) -> list[Shard]:
    """The (source, target) files of the train split, as data/train.json lists them.

    Raises:
        InputError: no manifest (the run is not prepared) or one that cannot be read.
    """
    return [(data_dir / shard["src"], data_dir / shard["tgt"])
            for shard in _manifest(data_dir)["shards"]]


def train_corpora(data_dir: Path) -> list[CorpusShards]:
    """The corpora of the train split, in the manifest's order (that of `train_shards`, each
    corpus's shards together); one of weight 1 for a manifest without corpora.

    Raises:
        InputError: no manifest, or one that cannot be read.
    """
    corpora: list[CorpusShards] = []
    for shard in _manifest(data_dir)["shards"]:
        name = shard.get("corpus", DEFAULT_CORPUS)
        if not corpora or corpora[-1].name != name:
            source, target = shard.get("languages") or (None, None)
            corpora.append(CorpusShards(name, float(shard.get("weight", 1.0)), shard.get("tag"),
                                        (), (source, target)))
        corpora[-1] = dataclasses.replace(corpora[-1],
                                          pairs=corpora[-1].pairs + (shard.get("pairs", 0),))
    return corpora


def train_alignments(data_dir: Path) -> list[Path]:
    """The word-alignment file of each train shard, as data/train.json lists them.

    Raises:
        InputError: no manifest, or one without alignments (prepared without
            `data.alignments`).
    """
    if not has_alignments(data_dir):
        raise InputError(f"{data_dir / MANIFEST}: the train split was prepared without word "
                         f"alignments; set data.alignments (e.g. eflomal) and run "
                         f"`keras-transformer prepare` again")
    return [data_dir / shard["align"] for shard in _manifest(data_dir)["shards"]]


def has_alignments(data_dir: Path) -> bool:
    """Whether every train shard has its word-alignment file (`data.alignments`).

    Raises:
        InputError: no manifest, or one that cannot be read.
    """
    return all("align" in shard for shard in _manifest(data_dir)["shards"])


def _manifest(data_dir: Path) -> dict:
    """data/train.json, read and checked to list shards."""
    path = data_dir / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(manifest["shards"], list):
            raise TypeError("shards is not a list")
        for shard in manifest["shards"]:
            shard["src"], shard["tgt"]  # KeyError / TypeError if not a shard entry
        return manifest
    except FileNotFoundError:
        raise InputError(f"{path}: no such file; run `keras-transformer prepare` first") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(f"{path}: not a train shard list ({error}); run `keras-transformer "
                         f"prepare` again") from None
