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
out until there is room again. Room is looked for again, at most every
:data:`RETRY_SECONDS` per file, when any series of that file is counted (prometheus-client
keeps one file per kind of metric: counters, histograms, each kind of gauge); found, the
series are written into the file with their values so far, also those not counted since.
The server log says when room is first refused, and when the series are back.

A file is made under a name the collector does not read (``*.db.new``), its blocks
allocated, then renamed: ``/metrics`` never meets an empty sample file (it reads each
file's header), nor one that is removed again for want of room.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import time
from collections.abc import Callable
from typing import Final

from prometheus_client import values
from prometheus_client.mmap_dict import _INITIAL_MMAP_SIZE, MmapedDict

logger = logging.getLogger("callhook.monitoring")

#: How often a file whose series are (partly) in memory looks for room again (seconds).
RETRY_SECONDS: Final = 10.0

#: The files of this process that keep series in memory (or would, had they been
#: counted): the server log says when the first comes and when the last goes.
_holding: set[str] = set()
#: The clock of the retries (a test's virtual clock replaces it).
_clock: Callable[[], float] = time.monotonic


def _allocated(fd: int, size: int, filename: str) -> bool:
    """Whether the first ``size`` bytes of ``fd`` have their blocks (allocated now)."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        _no_room(filename, exc)
        return False
    return True


def _no_room(filename: str, exc: OSError) -> None:
    """``filename`` keeps series in memory: said if it is the process's first to."""
    if not _holding:
        logger.error(
            "metrics: no room for samples in %s (%s): series first counted now are kept"
            " in memory, left out of /metrics until there is room again",
            os.path.dirname(filename),
            exc.strerror or exc,
        )
    _holding.add(filename)


def _room_found(filename: str) -> None:
    """``filename`` keeps no series in memory any more: said if it was the last to."""
    if filename in _holding:
        _holding.discard(filename)
        if not _holding:
            logger.warning(
                "metrics: room for samples in %s again: series kept in memory are written"
                " there as they are next counted",
                os.path.dirname(filename),
            )


def _made(filename: str) -> bool:
    """Whether ``filename`` is there with its first blocks, made now if not: under another
    name, then renamed, so that the collector sees it whole or not at all."""
    with contextlib.suppress(OSError):
        if os.stat(filename).st_size > 0:
            return True
    making = filename + ".new"
    try:
        with open(making, "wb") as made:
            room = _allocated(made.fileno(), _INITIAL_MMAP_SIZE, filename)
        if room:
            os.replace(making, filename)
            return True
    except OSError as exc:  # (no room even for the file's inode or directory entry)
        _no_room(filename, exc)
    with contextlib.suppress(OSError):
        os.unlink(making)
    return False


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
        self._retry_at = 0.0
        self._no_file = not read_mode and not _made(filename)
        if self._no_file:  # every series in memory
            self._f = self._m = None  # type: ignore[assignment]
            self._fname, self._positions, self._used = filename, {}, 0
            self._retry_at = _clock() + RETRY_SECONDS
            return
        super().__init__(filename, read_mode)  # type: ignore[no-untyped-call]

    def _init_value(self, key: str) -> None:
        if self._no_file:
            self._spare[key] = (0.0, 0.0)
            return
        needed, capacity = self._used + _entry_size(key), self._capacity
        while needed > capacity:
            capacity *= 2
        if capacity > self._capacity and not _allocated(self._f.fileno(), capacity, self._fname):
            self._spare[key] = (0.0, 0.0)
            self._retry_at = _clock() + RETRY_SECONDS
            return
        super()._init_value(key)  # type: ignore[no-untyped-call]

    def _room_again(self) -> None:
        """Move the series kept in memory into the file, if there is room now (tried at
        most every :data:`RETRY_SECONDS`)."""
        now = _clock()
        if now < self._retry_at:
            return
        self._retry_at = now + RETRY_SECONDS
        if self._no_file:
            if not _made(self._fname):
                return
            try:
                super().__init__(self._fname)  # type: ignore[no-untyped-call]
            except OSError as exc:  # (no descriptor, no memory to map: as no room)
                if getattr(self, "_f", None) is not None:
                    self._f.close()
                self._f = self._m = None  # type: ignore[assignment]
                self._positions, self._used = {}, 0
                _no_room(self._fname, exc)
                return
            self._no_file = False
        spare, self._spare = self._spare, {}
        for key, (value, timestamp) in spare.items():
            self._init_value(key)
            if key in self._spare:  # (still no room: in memory, as it was)
                self._spare[key] = (value, timestamp)
            else:
                super().write_value(key, value, timestamp)  # type: ignore[no-untyped-call]
        if not self._spare:
            _room_found(self._fname)

    def read_value(self, key: str) -> tuple[float, float]:
        if key not in self._positions and key not in self._spare:
            self._init_value(key)
        if self._spare:  # (any series of the file: one never counted again goes back too)
            self._room_again()
        if key in self._spare:
            return self._spare[key]
        value: tuple[float, float] = super().read_value(key)  # type: ignore[no-untyped-call]
        return value

    def write_value(self, key: str, value: float, timestamp: float) -> None:
        if key not in self._positions and key not in self._spare:
            self._init_value(key)
        if self._spare:
            self._room_again()
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
