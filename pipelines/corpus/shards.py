"""The layout of a prepared train split: shard files and the manifest that lists them.

`data/train-00000-of-00004.src` / `.tgt` ... hold the train pairs, pair i of the split in shard
i mod N, so shards differ by at most one pair. `data/train.json`, written last, lists the
shards and their pair counts; readers take the list from it (never from a glob), so files left
by an older prepare are never read. Several shards let tf.data interleave them and let each
MultiWorkerMirroredStrategy worker read its own files.
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
    return suffix in (".src", ".tgt") and (stem == "train" or (
        stem.startswith("train-") and "-of-" in stem))


def write_manifest(data_dir: Path, pairs: list[int]) -> None:
    """data/train.json for shards holding `pairs[i]` pairs each."""
    count = len(pairs)
    manifest = {"pairs": sum(pairs),
                "shards": [{"src": f"{shard_stem(i, count)}.src",
                            "tgt": f"{shard_stem(i, count)}.tgt", "pairs": n}
                           for i, n in enumerate(pairs)]}
    with atomic_open(data_dir / MANIFEST, "w") as file:
        json.dump(manifest, file, indent=1)


def train_shards(data_dir: Path) -> list[Shard]:
    """The (source, target) files of the train split, as data/train.json lists them.

    Raises:
        InputError: no manifest (the run is not prepared) or one that cannot be read.
    """
    path = data_dir / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        return [(data_dir / shard["src"], data_dir / shard["tgt"])
                for shard in manifest["shards"]]
    except FileNotFoundError:
        raise InputError(f"{path}: no such file; run `keras-transformer prepare` first") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(f"{path}: not a train shard list ({error}); run `keras-transformer "
                         f"prepare` again") from None
