"""A run's checkpoint files: finding them (the index, the newest complete one), checking one
whole before a restore (`checkpoint_problem`: its index reads, its data files hold the bytes
the index lists), and TensorFlow's read and write errors as one line naming the file.

Example:
    >>> prefixes = training_checkpoints(RunPaths(run_dir))  # oldest first
    >>> checkpoint_step(prefixes[-1]), checkpoint_problem(prefixes[-1])
    (6000, None)
"""
from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import shutil
from pathlib import Path
from typing import Iterator

import numpy as np
import tensorflow as tf

from pipelines import InputError
from pipelines.paths import CHECKPOINT_NAME, RunPaths

# What a full disk or an unwritable directory makes TensorFlow's file writes fail with.
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


def training_checkpoints(paths: RunPaths) -> list[str]:
    """Prefixes of the run's kept training checkpoints, oldest first."""
    state = tf.train.get_checkpoint_state(str(paths.checkpoints))
    return list(state.all_model_checkpoint_paths) if state else []


def checkpoint_step(prefix: str | Path) -> int:
    """The step of `.../ckpt-STEP` (a training checkpoint) or `.../ckpt-STEP/ckpt` (a kept
    best one)."""
    return int(re.findall(r"ckpt-(\d+)", str(prefix))[-1])


def newest_readable_checkpoint(directory: Path,
                               repair_index: bool) -> tuple[str | None, list[str]]:
    """(the checkpoint to resume from, why each newer one cannot be): the newest `ckpt-STEP`
    on disk whose files are complete (`checkpoint_problem`), whatever the index says. When the
    index does not name it latest (the index unreadable, its latest truncated or gone), with
    `repair_index` the index is rewritten to list the complete ones, so that training resumes
    there and never starts again over good checkpoints.

    Raises:
        InputError: checkpoint files that are all incomplete.
    """
    on_disk = sorted({match[1] for path in directory.glob(f"{CHECKPOINT_NAME}-*")
                      if (match := re.fullmatch(rf"({CHECKPOINT_NAME}-\d+)\.(index|data-.*)",
                                                path.name))}, key=checkpoint_step)
    newest, skipped = None, []
    for name in reversed(on_disk):
        problem = checkpoint_problem(directory / name)
        if problem is None:
            newest = str(directory / name)
            break
        skipped.append(problem)
    if newest is None:
        if skipped:
            raise InputError(f"{directory}: no checkpoint there is complete ({skipped[0]}); "
                             f"move the directory away to train from step 0")
        return None, []
    listed = tf.train.latest_checkpoint(str(directory))  # None (a TF warning) if unreadable
    if repair_index and (listed is None or Path(listed) != Path(newest)):
        # with timestamps, which CheckpointManager needs to keep track of them
        complete = [str(directory / older) for older in on_disk
                    if checkpoint_step(older) <= checkpoint_step(newest)
                    and checkpoint_problem(directory / older) is None]
        saved = [Path(f"{prefix}.index").stat().st_mtime for prefix in complete]
        with tf_write_errors(directory):
            tf.compat.v1.train.update_checkpoint_state(
                str(directory), newest, all_model_checkpoint_paths=complete,
                all_model_checkpoint_timestamps=saved, last_preserved_timestamp=min(saved) - 1)
    return newest, skipped


def checkpoint_problem(prefix: str | Path) -> str | None:
    """Why the checkpoint `prefix` cannot be restored, naming the file: its index missing or
    unreadable, a data file missing or shorter than the index says (a copy or a save cut
    short); None when it is complete."""
    prefix = Path(prefix)
    index = prefix.with_name(f"{prefix.name}.index")
    shards = sorted(prefix.parent.glob(f"{prefix.name}.data-*-of-*"))
    if not index.is_file():
        return f"{index}: no such file"
    if not shards or len(shards) != int(shards[0].name.rsplit("-of-", 1)[1]):
        return f"{prefix}.data-*: a data file is missing"
    data = shards[0] if len(shards) == 1 else f"{prefix}.data-*"
    try:
        reader = tf.train.load_checkpoint(str(prefix))
    except (tf.errors.OpError, ValueError) as error:
        return f"{index}: unreadable ({_reason(error)})"
    try:
        expected = _data_bytes(reader)
    except (tf.errors.OpError, IndexError) as error:  # reading its strings
        return f"{data}: truncated or corrupt ({_reason(error)})"
    present = sum(shard.stat().st_size for shard in shards)
    if present < expected:
        return f"{data}: truncated ({present:,} of {expected:,} bytes)"
    return None


def _data_bytes(reader: tf.train.CheckpointReader) -> int:
    """The bytes of a checkpoint's data files by its index (at least): each numeric tensor's
    elements, a string tensor's as TF's bundle writer lays them out (a varint length per
    string, a 4-byte checksum of the lengths, the strings)."""
    total = 0
    shapes = reader.get_variable_to_shape_map()
    for key, dtype in reader.get_variable_to_dtype_map().items():
        if dtype == tf.string:
            value = reader.get_tensor(key)
            strings = [value] if isinstance(value, bytes) else list(np.ravel(value))
            total += 4 + sum(max(1, math.ceil(len(s).bit_length() / 7)) + len(s)
                             for s in strings)
        elif dtype.is_numpy_compatible:  # (no other kind in our checkpoints: a lower bound)
            total += dtype.size * math.prod(shapes[key])
    return total


def check_complete(prefix: str | Path) -> None:
    """Raises InputError naming the file if the checkpoint is incomplete."""
    problem = checkpoint_problem(prefix)
    if problem is not None:
        raise InputError(f"{problem}; checkpoint {prefix} cannot be restored")


@contextlib.contextmanager
def restoring(prefix: str | Path) -> Iterator[None]:
    """Turns TensorFlow's errors of reading a corrupt checkpoint (a data checksum that does
    not match ...) into an InputError naming it."""
    try:
        yield
    except (tf.errors.OpError, IndexError) as error:
        raise InputError(f"{prefix}: unreadable checkpoint ({_reason(error)})") from None


@contextlib.contextmanager
def tf_write_errors(directory: Path) -> Iterator[None]:
    """Turns TensorFlow's errors of a full disk or an unwritable directory, while writing under
    `directory`, into the OSError the CLI prints in one line (`DIRECTORY: no space left on
    device`)."""
    try:
        yield
    except (tf.errors.ResourceExhaustedError, tf.errors.PermissionDeniedError) as error:
        number = next((n for n in WRITE_ERRNOS if os.strerror(n) in error.message), None)
        if number is None:
            raise
        raise OSError(number, os.strerror(number), str(directory)) from None


def _reason(error: Exception) -> str:
    """The first line of an error's message, without TF's `{{function_node ...}}` prefix."""
    message = getattr(error, "message", None) or str(error)
    return re.sub(r"^\{\{[^}]*\}\}\s*", "", message.strip().splitlines()[0])


def replace_directory(new: Path, target: Path) -> None:
    """Moves the complete directory `new` to `target`, replacing any old one, by renames."""
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    new.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def remove_partial_checkpoint(prefix: Path) -> None:
    """Removes what a failed save of `prefix` left: TensorFlow's temporary directory and index
    file, and the checkpoint's files unless they are complete (the save failed after writing
    them)."""
    shutil.rmtree(prefix.with_name(f"{prefix.name}_temp"), ignore_errors=True)
    for temporary in prefix.parent.glob("checkpoint.tmp*"):  # the index being rewritten
        temporary.unlink(missing_ok=True)
    if checkpoint_problem(prefix) is not None:
        for path in prefix.parent.glob(f"{prefix.name}.*"):
            path.unlink(missing_ok=True)

