"""The disk-space guard: a new recording is refused, with its cause, while the disk holding
it has less than ``[recordings] min_free_mb`` free, rather than fail in the middle of the
call when the disk fills."""

from __future__ import annotations

import errno
import os
from pathlib import Path


class DiskLow(OSError):
    """Less free space than the floor (an ``ENOSPC``, as a full disk's error is)."""


def free_bytes(path: Path) -> int:
    """Bytes free to an unprivileged writer on the filesystem ``path`` is (or would be) on."""
    for place in (path, *path.parents):
        try:
            stats = os.statvfs(place)
        except (FileNotFoundError, NotADirectoryError):
            continue
        return stats.f_bavail * stats.f_frsize
    raise FileNotFoundError(errno.ENOENT, "no such directory", str(path))


def check_room(path: Path, min_free: int) -> None:
    """Raises :class:`DiskLow` if ``path``'s disk has less than ``min_free`` bytes free
    (0: no floor)."""
    if min_free <= 0:
        return
    free = free_bytes(path)
    if free < min_free:
        raise DiskLow(
            errno.ENOSPC,
            f"{free // 2**20} MB free on its disk, below [recordings] min_free_mb "
            f"({min_free // 2**20})",
        )
