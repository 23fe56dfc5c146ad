"""A run's checkpoint files: finding them (the index, read and repaired here, not by
tf.train.get_checkpoint_state and the like, which log warnings of a damaged one; the newest
complete one), checking one whole before a restore (`checkpoint_problem`: its index reads, its
data files hold the bytes the index lists), and TensorFlow's read and write errors as one line
naming the file.

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
from google.protobuf import text_format
from tensorflow.python.training.checkpoint_state_pb2 import CheckpointState

from pipelines import InputError
from pipelines.files import atomic_open
from pipelines.paths import CHECKPOINT_NAME, RunPaths

# What a full disk or an unwritable directory makes TensorFlow's file writes fail with.
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


def training_checkpoints(paths: RunPaths) -> list[str]:
    """Prefixes of the run's kept training checkpoints, oldest first, as its index lists them.

    Raises:
        InputError: an index that cannot be read, naming it.
    """
    listed, problem = _read_index(paths)
    if problem is not None:
        raise InputError(f"{paths.checkpoint_index}: unreadable ({problem}); `keras-transformer "
                         f"train` rewrites it from the checkpoints beside it")
    return listed


def checkpoint_step(prefix: str | Path) -> int:
    """The step of `.../ckpt-STEP` (a training checkpoint) or `.../ckpt-STEP/ckpt` (a kept
    best one)."""
    return int(re.findall(r"ckpt-(\d+)", str(prefix))[-1])


def newest_readable_checkpoint(paths: RunPaths,
                               repair_index: bool) -> tuple[str | None, list[str]]:
    """(the checkpoint to resume from, a line for each damage found): the newest `ckpt-STEP`
    in the run's checkpoints/ whose files are complete (`checkpoint_problem`), whatever the
    index says; a line names each newer checkpoint skipped and why. When the index does not
    name it latest (the index unreadable or missing, its latest truncated or gone), with
    `repair_index` the index is rewritten to list the complete ones (a line says so unless it
    only named a checkpoint skipped), so that training resumes there and never starts again
    over good checkpoints; an index beside no checkpoint is removed.

    Raises:
        InputError: checkpoint files that are all incomplete.
    """
    directory, index = paths.checkpoints, paths.checkpoint_index
    on_disk = sorted({match[1] for path in directory.glob(f"{CHECKPOINT_NAME}-*")
                      if (match := re.fullmatch(rf"({CHECKPOINT_NAME}-\d+)\.(index|data-.*)",
                                                path.name))}, key=checkpoint_step)
    newest, skipped = None, []
    for name in reversed(on_disk):
        problem = checkpoint_problem(directory / name)
        if problem is None:
            newest = str(directory / name)
            break
        skipped.append((name, problem))
    if newest is None:
        if skipped:
            raise InputError(f"{directory}: no checkpoint there is complete ({skipped[0][1]}); "
                             f"move the directory away to train from step 0")
        if repair_index:
            index.unlink(missing_ok=True)  # else CheckpointManager would keep listing its names
        return None, []
    notes = [f"skipped the incomplete checkpoint {name}: {problem}" for name, problem in skipped]
    listed, problem = _read_index(paths)
    if repair_index and (not listed or Path(listed[-1]) != Path(newest)):
        _write_index(paths, [str(directory / older) for older in on_disk
                             if checkpoint_step(older) <= checkpoint_step(newest)
                             and checkpoint_problem(directory / older) is None])
        if problem is not None:
            notes.append(f"rewrote the unreadable checkpoint index {index} ({problem})")
        elif not listed:
            notes.append(f"wrote the missing checkpoint index {index}")
        elif Path(listed[-1]).name not in on_disk:
            notes.append(f"rewrote the checkpoint index {index}: its latest checkpoint, "
                         f"{listed[-1]}, has no files")
    return newest, notes


def _read_index(paths: RunPaths) -> tuple[list[str], str | None]:
    """(the checkpoints the index lists, oldest first, the latest last; why it cannot be read,
    or None): parsed here with protobuf's text format, not by tf.train.get_checkpoint_state,
    which logs TensorFlow's warnings of an unreadable index. No index lists nothing."""
    try:
        text = paths.checkpoint_index.read_text(encoding="utf-8")
    except FileNotFoundError:
        return [], None
    except UnicodeDecodeError:
        return [], "not text"
    try:
        state = text_format.Parse(text, CheckpointState())
    except text_format.ParseError as error:
        return [], f"line {error.GetLine()}: {str(error).partition(' : ')[2]}"
    if not state.model_checkpoint_path:
        return [], "no model_checkpoint_path"
    kept = state.all_model_checkpoint_paths or [state.model_checkpoint_path]
    return [str(paths.checkpoints / name) for name in kept], None


def _write_index(paths: RunPaths, prefixes: list[str]) -> None:
    """Lists the complete checkpoints `prefixes` (oldest first) in the index as
    tf.train.CheckpointManager writes it: names relative to it, and the times they were saved,
    which it needs to keep track of them."""
    saved = [Path(f"{prefix}.index").stat().st_mtime for prefix in prefixes]
    names = [Path(prefix).name for prefix in prefixes]
    state = CheckpointState(model_checkpoint_path=names[-1], all_model_checkpoint_paths=names,
                            all_model_checkpoint_timestamps=saved,
                            last_preserved_timestamp=min(saved) - 1)
    with atomic_open(paths.checkpoint_index, "w") as file:
        file.write(text_format.MessageToString(state))


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

