"""Integer-versioned directories, as TF Serving reads a model's base path (no TensorFlow import).

A version appears by one rename of a complete directory, so a reader listing versions never
sees a partial one; names other than integers (temporary directories) are not versions.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path


def versions(base_dir: Path) -> list[int]:
    """The versions under `base_dir`, ascending."""
    if not base_dir.is_dir():
        return []
    return sorted(int(p.name) for p in base_dir.iterdir() if p.name.isdigit() and p.is_dir())


def latest_version(base_dir: Path) -> Path | None:
    """The newest version's directory, or None."""
    found = versions(base_dir)
    return base_dir / str(found[-1]) if found else None


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
