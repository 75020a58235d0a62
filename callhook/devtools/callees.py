"""The far ends of a flow's ``connect`` and ``transfer``, in process. Pure.

``callhook test`` without ``--sip`` has no network, yet an application that puts its
caller through must be testable in CI. The far legs a ``connect`` places
(:class:`~callhook.events.CallCallee`) are answered here as the flow's ``callees`` say
(:class:`~callhook.devtools.flow.Callee`): ringing, then answering or failing with a cause, and
hanging up after a while. A ``transfer``'s REFER is refused with 405, as callhook test's
user agent refuses it over SIP and as a phone that does not do REFER does.

Like :class:`~callhook.media.simulated.SimulatedMedia`, it takes commands at a time and
hands back the events that fall due (``next_time``, ``pop_due``), so the flow's leg
runs it on the same virtual clock.
"""

from __future__ import annotations

import fnmatch
import heapq
from collections.abc import Mapping

from callhook.devtools.flow import Callee
from callhook.events import (
    CallCallee,
    CalleeAnswered,
    CalleeEnded,
    CalleeRinging,
    DropCallee,
    MediaCommand,
    MediaEvent,
    Refer,
    ReferAnswered,
)

#: The SIP status a far end that does not answer is reported with, as a SIP far leg's.
RAW_CAUSES = {"busy": "486", "no_answer": "480", "unobtainable": "404", "failed": "500"}

#: The status the scripted caller refuses a REFER with: 405 (RFC 3261 §21.4.6), as
#: callhook's own user agent does, which does not do REFER (Allow: has no REFER).
REFER_REFUSED = 405


class SimulatedCallees:
    """The far legs of one call's connects, behaving as ``callees`` says."""

    def __init__(self, callees: Mapping[str, Callee]) -> None:
        self.callees = dict(callees)
        self._due: list[tuple[float, int, MediaEvent]] = []
        self._order = 0  # keeps events of one time in the order they were made
        #: (attempt, destination, the glob that matched or None) of each far leg placed.
        self.placed: list[tuple[int, str, str | None]] = []
        self._dropped: set[int] = set()

    def behaviour(self, destination: str) -> tuple[str | None, Callee | None]:
        """The first glob matching ``destination`` (case aside) and its behaviour."""
        for glob, callee in self.callees.items():
            if fnmatch.fnmatchcase(destination.lower(), glob.lower()):
                return glob, callee
        return None, None

    def command(self, command: MediaCommand, now: float) -> None:
        """Take one of the call's commands (those that are not about callees are ignored)."""
        if isinstance(command, CallCallee):
            self._place(command, now)
        elif isinstance(command, DropCallee):
            # CANCEL or BYE from callhook: the far leg says no more.
            self._dropped.add(command.attempt)
        elif isinstance(command, Refer):
            self._at(now, ReferAnswered(REFER_REFUSED))

    def _place(self, command: CallCallee, now: float) -> None:
        attempt = command.attempt
        glob, callee = self.behaviour(command.destination)
        self.placed.append((attempt, command.destination, glob))
        if callee is None:
            self._at(now, CalleeEnded(attempt, "unobtainable", RAW_CAUSES["unobtainable"]))
            return
        self._at(now, CalleeRinging(attempt))
        answered = now + callee.rings
        if callee.outcome != "answer":
            cause = callee.outcome
            self._at(answered, CalleeEnded(attempt, cause, RAW_CAUSES[cause]))
            return
        info = {
            "call_id": f"callee-{attempt}",
            "call_direction": "out",
            "call_to": command.destination,
            "call_state": "answered",
        }
        self._at(answered, CalleeAnswered(attempt, info))
        if callee.talks is not None:
            self._at(answered + callee.talks, CalleeEnded(attempt, "hung_up", "BYE"))

    def _at(self, at: float, event: MediaEvent) -> None:
        self._order += 1
        heapq.heappush(self._due, (at, self._order, event))

    def next_time(self) -> float | None:
        """When the next event falls due (None: none will)."""
        self._forget_dropped()
        return self._due[0][0] if self._due else None

    def pop_due(self, now: float) -> list[MediaEvent]:
        """The events due by ``now``, in order."""
        events: list[MediaEvent] = []
        self._forget_dropped()
        while self._due and self._due[0][0] <= now:
            events.append(heapq.heappop(self._due)[2])
            self._forget_dropped()
        return events

    def _forget_dropped(self) -> None:
        # A far leg callhook ended sends nothing more.
        while self._due and _attempt(self._due[0][2]) in self._dropped:
            heapq.heappop(self._due)


def _attempt(event: MediaEvent) -> int | None:
    if isinstance(event, CalleeRinging | CalleeAnswered | CalleeEnded):
        return event.attempt
    return None
