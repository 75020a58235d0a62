"""A call's media events on the media's clock, for the call runner (through its leg,
:class:`~callhook.telephony.leg.SipLeg`).

Each event carries the media time of the tick that noted it
(:class:`~callhook.clock.TickClock`: the engine advances it to each slot's own time, and
wakes the call's leg in the slot that noted its events), and a deadline has come when the
media has been worked up to it. An action thus sees a silence or a key press where it
happened on the wire, even while the event loop runs behind the media thread and works
off a backlog of slots (docs/architecture.md, "The actions' clock").

A call that takes part in no tick is timed on the loop's clock. A tick that stops while
the call is in it is noticed by the loop's timer standing by (:data:`BACKSTOP`): twice in
a row with the media clock unmoved, and the call's timers move to the loop's clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from callhook.clock import TickClock
from callhook.events import MediaEvent
from callhook.media.session import MediaSession

logger = logging.getLogger("callhook.call")

#: Seconds past a deadline's media time left (on the loop's clock) before a leg looks at
#: the clock again without the tick's wake-up: the call left the tick meanwhile, or (the
#: clock unmoved over two such waits) the tick stopped.
BACKSTOP = 0.5

Gather = Callable[[], None]
Taken = Callable[[MediaEvent], MediaEvent]


class MediaEvents:
    """``session``'s events in order, each with its media time, and the wait for the next
    one or a deadline on that clock; ``label`` names the call in log lines.

    Where events are taken, ``gather`` runs before each look at the queue (work that may
    add events: the leg's utterances) and ``taken`` may replace an event as the runner
    takes it. (Given per call, not kept: the leg that owns this must not be kept alive by
    a cycle through it once its call is over.)
    """

    def __init__(self, session: MediaSession, label: str) -> None:
        self.session = session
        self.label = label
        self.loop = asyncio.get_running_loop()
        # Events and the media time each was noted at, in order; the latest media time
        # read (the clock only goes forward, also across the loop's stand-in).
        self._queue: deque[tuple[MediaEvent, float]] = deque()
        self._media_now = 0.0
        #: The media time the runner acts at: the event it took last, or the time it read.
        self.acting_at: float | None = None
        # The deadline the media clock wakes the call at, and what cancels that.
        self._registered: tuple[float, Callable[[], None]] | None = None
        self._unmoved = 0  # backstops in a row that found the media clock where it was
        self._wake = asyncio.Event()

    def now(self) -> float:
        """The call's media time: how far its media has been worked (the loop's clock
        while it takes part in no tick). The runner acts at that time."""
        self.acting_at = at = self.clock()
        return at

    def clock(self) -> float:
        """The call's media time, as :meth:`now` without acting at it."""
        clock = self.session.media_clock
        at = clock.at if clock is not None else None
        if at is None:
            at = self.loop.time()
        if at > self._media_now:
            self._media_now = at
        return self._media_now

    def note(self) -> None:
        """Move the session's events to the queue, timed now (the engine wakes the leg
        in the tick that noted them)."""
        events = self.session.events
        if events:
            now = self.clock()
            queue = self._queue
            while events:
                queue.append((events.popleft(), now))

    def wake(self) -> None:
        """Something may have happened: a waiting :meth:`next_event` looks."""
        self.note()
        self._wake.set()

    def inject(self, event: MediaEvent) -> None:
        """An event from elsewhere (signalling, speech, far legs), timed now."""
        self.note()  # (what the media noted before this comes before it)
        self._queue.append((event, self.clock()))
        self._wake.set()

    def take_pending(self, gather: Gather, taken: Taken) -> list[MediaEvent]:
        """Every event waiting, in order."""
        events = []
        while self._peek(gather) is not None:
            events.append(taken(self._queue.popleft()[0]))
        return events

    async def next_event(
        self, deadline: float | None, gather: Gather, taken: Taken
    ) -> tuple[MediaEvent | None, float]:
        """The next event and its media time, or ``(None, deadline)`` once the media has
        been worked up to ``deadline`` with no event before it."""
        while True:
            at = self._peek(gather)
            if at is not None and (deadline is None or at <= deadline):
                self.acting_at = at
                return taken(self._queue.popleft()[0]), at
            if deadline is not None and (at is not None or self.clock() >= deadline):
                # (An event noted after the deadline comes after it.)
                self.acting_at = deadline
                return None, deadline
            self._wake.clear()
            timeout = None
            if deadline is not None:
                timeout = deadline - self.clock()
                clock = self.session.media_clock
                if clock is not None and clock.at is not None:
                    # The loop's clock runs ahead of the media's while the loop is behind:
                    # the tick that reaches the deadline wakes the call (the loop's timer
                    # only stands by, in case the call leaves the tick).
                    self._wake_at(clock, deadline)
                    timeout += BACKSTOP
            seen = self.clock()
            # asyncio.timeout, not wait_for (which, in Python 3.11, can swallow a cancellation).
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                # (Once could be a stall of the whole machine: the slots come after it.)
                self._unmoved = self._unmoved + 1 if self.clock() == seen else 0
                if deadline is not None and self._unmoved >= 2 and self._media_stopped():
                    self.acting_at = deadline
                    return None, deadline

    def close(self) -> None:
        """The call is over: the tick wakes it no more."""
        if self._registered is not None:
            self._registered[1]()
            self._registered = None

    def _peek(self, gather: Gather) -> float | None:
        """The media time of the next event, None when there is none."""
        gather()
        self.note()
        return self._queue[0][1] if self._queue else None

    def _media_stopped(self) -> bool:
        """Twice in a row the backstop came and the media clock had not moved since the
        wait began (past the deadline's media time left and :data:`BACKSTOP` more of the
        loop's): the tick has stopped while the call is in it. Its actions go on, on the
        loop's clock from now on, said once."""
        if self.session.media_clock is None:
            return False
        self.session.media_clock = None
        logger.warning(
            "%s: the media tick stopped; the call's timers run on the loop's clock", self.label
        )
        return True

    def _wake_at(self, clock: TickClock, deadline: float) -> None:
        registered = self._registered
        if registered is not None:
            if registered[0] == deadline:
                return
            registered[1]()
        self._registered = (deadline, clock.call_at(deadline, self._deadline_came))

    def _deadline_came(self) -> None:
        self._registered = None
        self._wake.set()
