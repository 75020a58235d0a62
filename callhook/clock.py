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

import heapq
import time
from collections.abc import Callable
from typing import Any, Protocol


class Clock(Protocol):
    """A monotonic source of time in seconds."""

    def now(self) -> float:
        """Return the current time in seconds (monotonic, arbitrary origin)."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic()``, the same clock asyncio's loop uses."""

    def now(self) -> float:
        return time.monotonic()


class TickClock:
    """The media tick's clock: the time of the tick the engine worked last.

    It moves in steps, and only as far as the media has been worked: while the event
    loop runs behind the wire (the media thread keeps the wire's time and Python works
    its slots later), it stays behind the loop's clock. Actions time their media on it
    (:meth:`callhook.telephony.mediaevents.MediaEvents.now`), so a silence or a key press is timed
    where it happened on the wire, not when the loop got to it. ``at`` is None while
    the engine has no call to tick for.

    :meth:`call_at` runs a callback once the clock has reached a time (the engine moves
    it with :meth:`advance`), so a call waiting for a deadline is woken by the tick that
    reaches it, not by polling the clock while the loop is behind.
    """

    __slots__ = ("_count", "_due", "at")

    def __init__(self) -> None:
        self.at: float | None = None
        self._due: list[list[Any]] = []  # heap of [when, count, callback or None]
        self._count = 0

    def call_at(self, when: float, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback`` once the clock reaches ``when`` (at the next :meth:`advance`
        if it already has); returns what cancels it."""
        self._count += 1
        entry: list[Any] = [when, self._count, callback]
        heapq.heappush(self._due, entry)

        def cancel() -> None:
            entry[2] = None

        return cancel

    def advance(self, now: float) -> None:
        """The engine worked the tick at ``now``: the callbacks due by then are called."""
        self.at = now
        due = self._due
        while due and due[0][0] <= now:
            callback = heapq.heappop(due)[2]
            if callback is not None:
                callback()

    def stop(self) -> None:
        """No call is ticked any more: ``at`` is None, and what waits is called now (its
        caller reads the loop's clock instead)."""
        self.at = None
        due, self._due = self._due, []
        for _, _, callback in due:
            if callback is not None:
                callback()
