"""The layout of a prepared train split: shard files and the manifest that lists them.

`data/train-00000-of-00004.src` / `.tgt` ... hold the train pairs, pair i of the split in shard
i mod N, so shards differ by at most one pair. `data/train.json`, written last, lists the
shards and their pair counts (and, with `data.alignments`, each shard's word-alignment file
`.align`: `pipelines.corpus.alignments`); readers take the list from it (never from a glob), so files left
by an older prepare are never read. Several shards let tf.data interleave them and let each
MultiWorkerMirroredStrategy worker read its own files.

Example:
    >>> train_shards(Path("runs/demo/data"))  # [(train-00000-of-00001.src, ....tgt)]
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from pipelines import InputError
from pipelines.files import atomic_open

MANIFEST = "train.json"
PAIRS_PER_SHARD = 500_000  # the default shard size
MAX_SHARDS = 256
Shard = tuple[Path, Path]  # (source file, target file)


def shard_count(pairs: int, requested: int | None = None) -> int:
    """`requested` (`data.shards`), else one shard per PAIRS_PER_SHARD pairs, at most
    MAX_SHARDS; never more shards than pairs."""
    count = requested or min(MAX_SHARDS, math.ceil(pairs / PAIRS_PER_SHARD))
    return max(1, min(count, pairs))


def shard_stem(index: int, count: int) -> str:
    """`train-00003-of-00008`: the name of shard `index` without its side's suffix."""
    return f"train-{index:05d}-of-{count:05d}"


def is_shard_file(path: Path) -> bool:
    """A train shard file of any prepare (or the single train.src / .tgt of older runs)."""
    stem, suffix = path.stem, path.suffix
    return suffix in (".src", ".tgt", ".align") and (stem == "train" or (
        stem.startswith("train-") and "-of-" in stem))


def write_manifest(data_dir: Path, pairs: list[int], aligner: str | None = None) -> None:
    """data/train.json for shards holding `pairs[i]` pairs each, with their `.align` files
    when `aligner` (the `data.alignments` that wrote them) is given."""
    count = len(pairs)
    names = [shard_stem(i, count) for i in range(count)]
    shards = [{"src": f"{stem}.src", "tgt": f"{stem}.tgt", "pairs": n}
              for stem, n in zip(names, pairs)]
    if aligner:
        for stem, shard in zip(names, shards):
            shard["align"] = f"{stem}.align"
    manifest = {"pairs": sum(pairs), "shards": shards, **({"aligner": aligner} if aligner else {})}
    with atomic_open(data_dir / MANIFEST, "w") as file:
        json.dump(manifest, file, indent=1)


def train_shards(data_dir: Path) -> list[Shard]:
    """The (source, target) files of the train split, as data/train.json lists them.

    Raises:
        InputError: no manifest (the run is not prepared) or one that cannot be read.
    """
    return [(data_dir / shard["src"], data_dir / shard["tgt"])
            for shard in _manifest(data_dir)["shards"]]


def train_alignments(data_dir: Path) -> list[Path]:
    """The word-alignment file of each train shard, as data/train.json lists them.

    Raises:
        InputError: no manifest, or one without alignments (prepared without
            `data.alignments`).
    """
    path = data_dir / MANIFEST
    shards = _manifest(data_dir)["shards"]
    if not all("align" in shard for shard in shards):
        raise InputError(f"{path}: the train split was prepared without word alignments; "
                         f"set data.alignments (e.g. eflomal) and run `keras-transformer "
                         f"prepare` again")
    return [data_dir / shard["align"] for shard in shards]


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
