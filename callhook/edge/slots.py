"""The media thread's finished slots, read in order and handed to the media tick.

The thread (:mod:`callhook.edge.plane`) wakes the event loop once a slot; :meth:`SlotReader.read`
then hands every finished slot to the tick's work, in order, with its own time and the
datagrams read in it:

* a slot whose record the thread had no room for (its ring was full while Python was
  behind) shows as a gap in the numbers: it is worked with no datagrams, so each call's
  media clock goes on as the wire's did;
* the slots the thread skipped after a stall of its own (each record says how many came
  just before it) are skipped here too;
* it works for at most :data:`BUDGET` of wall time a call, then lets the loop's other
  work (SIP, the runners) run and goes on at the loop's next turn: a backlog is worked
  off at once, and nothing else waits long.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from callhook.edge.plane import Address, Plane

#: Seconds of wall time the work of the media thread's slots may take before the loop's
#: other work runs: one slot's work is far less, a backlog's more.
BUDGET = 0.02

Received = list[tuple[Any, bytes, Address, float]]


class SlotReader:
    """Reads ``plane``'s slots and calls ``work(slot, when, received)`` for each, in order."""

    def __init__(
        self,
        plane: Plane,
        loop: asyncio.AbstractEventLoop,
        work: Callable[[int, float, Received], None],
        tick: float,
    ) -> None:
        self.plane = plane
        self.loop = loop
        self.work = work
        self.tick = tick
        # The slots read but not yet worked, the last one read, and whether a call of
        # read() is due already.
        self.backlog: deque[tuple[int, float, Received]] = deque()
        self.last: int | None = None
        self.soon = False
        self.closed = False

    def read(self) -> None:
        """The thread finished slots (its descriptor is readable): work them (see the
        module docstring)."""
        if self.closed:
            return
        self.soon = False
        plane, backlog = self.plane, self.backlog
        plane.wake()
        until = time.monotonic() + BUDGET
        while True:
            if not backlog:
                got = plane.next_slot()
                if got is None:
                    return
                slot, when, _late, skipped, received = got
                if self.last is not None:
                    for missing in range(self.last + 1, slot - skipped):
                        backlog.append((missing, when - (slot - missing) * self.tick, []))
                backlog.append((slot, when, received))
                self.last = slot
                continue
            if time.monotonic() > until:
                break
            self.work(*backlog.popleft())
        if not self.soon:  # more are waiting: after the loop's other work
            self.soon = True
            self.loop.call_soon(self.read)
