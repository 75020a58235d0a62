"""prometheus-client's sample files (its multiprocess mode: ``serve --workers``), made so
that a full disk cannot kill a worker through them.

prometheus-client keeps each process's samples in files it maps into memory
(``MmapedDict``), made and grown with ``truncate``: sparse files, whose blocks the
filesystem allocates only when a page is first written through the mapping. On a full
disk (ext4, xfs and tmpfs alike) that page cannot be given a block, and the kernel sends
the process SIGBUS: a worker died so when a series (a new label value) was first counted
after its data disk filled.

:class:`SampleFile` allocates every block (``posix_fallocate``) before it is mapped, so a
full disk is an ``OSError`` at that moment instead, and the series that needed the room
is kept in the process's memory: it goes on being counted, and ``/metrics`` leaves it
out until the process restarts. The server log says so, once until room is found again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct

from prometheus_client import values
from prometheus_client.mmap_dict import _INITIAL_MMAP_SIZE, MmapedDict

logger = logging.getLogger("callhook.monitoring")

#: Whether the last allocation failed (its line said; said again once one succeeds).
_refused = False


def _allocated(fd: int, size: int, filename: str) -> bool:
    """Whether the first ``size`` bytes of ``fd`` have their blocks (allocated now)."""
    global _refused
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if not _refused:
            logger.error(
                "metrics: no room for samples in %s (%s): series first counted now are kept"
                " in memory, left out of /metrics until callhook restarts",
                os.path.dirname(filename),
                exc.strerror or exc,
            )
        _refused = True
        return False
    _refused = False
    return True


def _entry_size(key: str) -> int:
    """The bytes ``MmapedDict`` takes for ``key``'s entry (its ``_init_value``'s layout:
    a length, the key padded to 8 bytes, two doubles)."""
    encoded = len(key.encode("utf-8"))
    return struct.calcsize("i") + encoded + (8 - (encoded + 4) % 8) + 16


class SampleFile(MmapedDict):
    """A sample file whose mapped pages all have their blocks; a series with no room in
    it is kept in memory (see the module docstring)."""

    def __init__(self, filename: str, read_mode: bool = False) -> None:
        self._spare: dict[str, tuple[float, float]] = {}
        if not read_mode:
            with open(filename, "a+b") as made:
                fresh = os.fstat(made.fileno()).st_size == 0
                room = not fresh or _allocated(made.fileno(), _INITIAL_MMAP_SIZE, filename)
            if not room:  # no file, every series in memory (the collector skips none)
                with contextlib.suppress(OSError):
                    os.unlink(filename)
                self._f = self._m = None  # type: ignore[assignment]
                self._fname, self._positions, self._used = filename, {}, 0
                return
        super().__init__(filename, read_mode)  # type: ignore[no-untyped-call]

    def _init_value(self, key: str) -> None:
        if self._f is None:  # (no file)
            self._spare[key] = (0.0, 0.0)
            return
        needed, capacity = self._used + _entry_size(key), self._capacity
        while needed > capacity:
            capacity *= 2
        if capacity > self._capacity and not _allocated(self._f.fileno(), capacity, self._fname):
            self._spare[key] = (0.0, 0.0)
            return
        super()._init_value(key)  # type: ignore[no-untyped-call]

    def read_value(self, key: str) -> tuple[float, float]:
        if key not in self._positions and key not in self._spare:
            self._init_value(key)
        if key in self._spare:
            return self._spare[key]
        value: tuple[float, float] = super().read_value(key)  # type: ignore[no-untyped-call]
        return value

    def write_value(self, key: str, value: float, timestamp: float) -> None:
        if key not in self._positions and key not in self._spare:
            self._init_value(key)
        if key in self._spare:
            self._spare[key] = (value, timestamp)
            return
        super().write_value(key, value, timestamp)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        super().close()  # type: ignore[no-untyped-call]


def read(path: str) -> dict[str, float]:
    """The values a sample file holds, as ``/metrics`` reads them: by series key."""
    found = MmapedDict.read_all_values_from_file(path)  # type: ignore[no-untyped-call]
    return {key: value for key, value, _, _ in found}


def install() -> None:
    """Make prometheus-client keep its samples in :class:`SampleFile` s: before any
    metric's value is made (its multiprocess values look the class up when they open a
    file)."""
    values.MmapedDict = SampleFile  # type: ignore[attr-defined]
