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


class TickClock:
    """The media tick's clock: the time of the tick the engine worked last.

    It moves in steps, and only as far as the media has been worked: while the event
    loop runs behind the wire (the media thread keeps the wire's time and Python works
    its slots later), it stays behind the loop's clock. Actions time their media on it
    (:meth:`callhook.telephony.leg.SipLeg.now`), so a silence or a key press is timed
    where it happened on the wire, not when the loop got to it. ``at`` is None while
    the engine has no call to tick for.
    """

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at: float | None = None
