"""The rings between the media plane's thread and Python: single producer, single consumer,
fixed-size records, lock-free, allocated once.

:class:`PythonRing` is the reference: what a ring does, in Python, for the tests to hold
the native ring (``_ring.c``) to and for a process where the extension could not be
built. Both refuse a push into a full ring and count it (``dropped``), return ``None``
from an empty one, round the capacity up to a power of two, and keep records in order.
Only the native ring may be shared with a thread that runs without the GIL.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol


class Ring(Protocol):
    """A ring of ``capacity`` records of ``record_size`` bytes each."""

    @property
    def capacity(self) -> int: ...
    @property
    def record_size(self) -> int: ...
    @property
    def dropped(self) -> int: ...
    def push(self, record: bytes) -> bool: ...
    def pop(self) -> bytes | None: ...
    def __len__(self) -> int: ...


class PythonRing:
    """The reference ring (see the module docstring)."""

    def __init__(self, capacity: int, record_size: int) -> None:
        if not (1 <= capacity <= 1 << 24) or not (1 <= record_size <= 65536):
            raise ValueError("capacity must be 1 to 16777216 records, record_size 1 to 65536 bytes")
        size = 1
        while size < capacity:
            size <<= 1
        self.capacity = size
        self.record_size = record_size
        self.dropped = 0
        self._records: deque[bytes] = deque()

    def push(self, record: bytes) -> bool:
        """Copy one record in; False (and counted in ``dropped``) when the ring is full."""
        if len(record) != self.record_size:
            raise ValueError(f"a record is {self.record_size} bytes, not {len(record)}")
        if len(self._records) >= self.capacity:
            self.dropped += 1
            return False
        self._records.append(bytes(record))
        return True

    def pop(self) -> bytes | None:
        """The oldest record, or None when the ring is empty."""
        return self._records.popleft() if self._records else None

    def __len__(self) -> int:
        return len(self._records)


def new_ring(capacity: int, record_size: int) -> Ring:
    """The native ring where the extension is built, else the reference."""
    try:
        from callhook.media import _ring
    except ImportError:
        return PythonRing(capacity, record_size)
    return _ring.Ring(capacity, record_size)
