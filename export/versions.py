"""Integer-versioned directories, as TF Serving reads a model's base path (no TensorFlow import),
and the staging directories they are built in.

    versions(base_dir) -> [int], ascending;  latest_version(base_dir, *required) -> Path | None
    staging_directory(parent, prefix) -> a new empty `parent/PREFIX-PID-XXXX`
    publish_version(complete, base_dir) -> base_dir/<1 + the largest version>, by one rename

A version appears by one rename of a complete directory, so a reader listing versions never
sees a partial one; names other than integers (staging directories) are not versions. A
staging directory is named after its process, so that a later export removes those of
processes that died (killed, or a full disk) and a live concurrent export keeps its own.

Example:
    >>> import shutil, tempfile
    >>> base = Path(tempfile.mkdtemp())
    >>> staging = staging_directory(base, ".export")  # write the export in here, then:
    >>> publish_version(staging, base).name, versions(base), latest_version(base).name
    ('1', [1], '1')
    >>> shutil.rmtree(base)
"""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path


def versions(base_dir: Path) -> list[int]:
    """The versions under `base_dir`, ascending."""
    if not base_dir.is_dir():
        return []
    return sorted(int(p.name) for p in base_dir.iterdir() if p.name.isdigit() and p.is_dir())


def latest_version(base_dir: Path, *required: str) -> Path | None:
    """The newest version's directory holding the `required` files (paths relative to it), or
    None. (TF Serving serves the newest number whatever it holds: our exports publish whole
    versions only, by one rename.)"""
    for version in reversed(versions(base_dir)):
        directory = base_dir / str(version)
        if all((directory / name).is_file() for name in required):
            return directory
    return None


def publish_version(complete: Path, base_dir: Path) -> Path:
    """Renames the complete directory `complete` (on the same file system) to the next
    version, 1 + the largest present; if a concurrent writer takes that number first, the
    rename fails and the next number is tried. Returns the version's directory."""
    while True:
        target = base_dir / str((versions(base_dir) or [0])[-1] + 1)
        try:
            os.rename(complete, target)
            return target
        except OSError as error:
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise


def staging_directory(parent: Path, prefix: str) -> Path:
    """A new empty directory `parent/PREFIX-PID-XXXX` to build an export in, readable as the
    umask allows (tempfile's 0700 would hide a published version from a TF Serving that runs
    as another user). Staging directories of `prefix` left by dead processes are removed."""
    parent.mkdir(parents=True, exist_ok=True)
    for path in parent.glob(f"{prefix}-*-*"):
        if path.is_dir() and not _alive(path.name[len(prefix) + 1:].split("-")[0]):
            shutil.rmtree(path, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}-{os.getpid()}-", dir=parent))
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(0o777 & ~umask)
    return path


def _alive(pid: str) -> bool:
    """Whether the process `pid` (a decimal string) exists; True for what is not a pid."""
    if not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
