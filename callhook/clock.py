"""Time, injected.

Every layer that needs the time is handed a :class:`Clock` instead of calling
``time.monotonic()`` itself, so the same code runs on the event loop's clock in
production and on :class:`callhook.devtools.harness.VirtualClock` in tests, where a
30-second timeout takes no real time at all.

Media time is in seconds as a float, monotonic, with an arbitrary origin.
Wall-clock time (``time.time()``) is used only where a value leaves the
process (log timestamps, request signatures).
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """A monotonic source of time in seconds."""

    def now(self) -> float:
        """Return the current time in seconds (monotonic, arbitrary origin)."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic()``, the same clock asyncio's loop uses."""

    def now(self) -> float:
        return time.monotonic()
