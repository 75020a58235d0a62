"""Who answered an outbound call: the machine that classifies the callee before the
application's first page is requested. Sans-IO.

An outbound call with ``classify_callee`` (the REST API's, an outbound service's:
docs/reference.md) is answered; before its first page, :class:`ClassifyMachine`
has the media session classify the far end (:mod:`callhook.media.classify`) and,
for an answering machine with ``wait_for_beep``, waits for the end of its greeting,
as Aculab's outbound services do ("If answering machine be detected it wait for the
machine's prompt message to be played before requesting your application's First
Page": Aculab, Starting An Outbound Service). The first page's ``this_call`` then
says who answered. A connect's far leg is classified by the connect's own machine
(:mod:`callhook.actions.connect`) with the same objects.

=====================  ==================================================================
state / event          what happens
=====================  ==================================================================
start                  the media session classifies (ClassifyFarEnd)
FarEndClassified       a live speaker, a fax machine, unknown: over; an answering
                       machine: over too, unless ``wait_for_beep``
GreetingEnded          the machine's greeting is over (a beep, silence, or its limit): over
deadline               no word from the media in time (no audio came, so its clock
                       stood): ``unknown`` (a machine's greeting: ``timeout``); over
the caller hangs up    over
=====================  ==================================================================
"""

from __future__ import annotations

from typing import Any

from callhook.actions.machine import ActionMachine, Continue, StopReason, Timer
from callhook.events import (
    ClassifyFarEnd,
    ClassifyOptions,
    FarEndClassified,
    GreetingEnded,
    MediaCommand,
    MediaEvent,
)

#: Seconds past a classification's limits before the action stops waiting for the media's
#: word (which keeps the audio's time: it stands still while no audio comes).
GRACE = 1.0


class ClassifyMachine(ActionMachine):
    """Classifies the call's own far end (see the module docstring); :attr:`far_end` is
    the ``far_end_classification`` object once it is over."""

    def __init__(self, options: ClassifyOptions) -> None:
        self.options = options
        self.started = self.decided = 0.0
        self.until = 0.0
        self.far_end: dict[str, Any] | None = None
        self.waiting = False  # the decision came; a machine's greeting's end is awaited

    def start(self, now: float) -> list[MediaCommand]:
        self.started = now
        self.until = now + self.options.milliseconds_timeout / 1000 + GRACE
        return [ClassifyFarEnd(self.options)]

    @property
    def deadline(self) -> float | None:
        return self.until if self.outcome is None else None

    def timers(self) -> tuple[Timer, ...]:
        if self.outcome is not None:
            return ()
        if self.waiting:
            return (Timer("greeting", self.decided, self.until),)
        return (Timer("classify", self.started, self.until),)

    def on_deadline(self, now: float) -> list[MediaCommand]:
        if self.far_end is None:
            waited = round(now - self.started, 3)
            self.far_end = far_end(FarEndClassified("unknown", "timeout", waited))
        elif self.far_end["greeting_end"] is None:
            self.far_end["greeting_end"] = "timeout"
            self.far_end["seconds_to_greeting_end"] = round(now - self.started, 3)
        self.outcome = Continue(f"classified: {self.far_end['far_end_type']}")
        return [ClassifyFarEnd(None)]

    def handle(self, event: MediaEvent, now: float) -> list[MediaCommand]:
        ours = isinstance(event, FarEndClassified | GreetingEnded) and event.attempt is None
        if self.outcome is not None or not ours:
            return []  # (a far leg's is its connect's)
        if isinstance(event, FarEndClassified):
            self.far_end = far_end(event)
            if event.far_end_type == "answering_machine" and self.options.wait_for_beep:
                self.waiting, self.decided = True, now
                self.until = now + self.options.seconds_beep_timeout + GRACE
                return []
        elif isinstance(event, GreetingEnded) and self.far_end is not None:
            greeting_ended(self.far_end, event)
        else:
            return []
        self.outcome = Continue(f"classified: {self.far_end['far_end_type']}")
        return []

    def stop(self, now: float, why: StopReason) -> list[MediaCommand]:
        self.outcome = Continue(f"classification stopped: {why}")
        return [ClassifyFarEnd(None)]


# --- who answered, as the application is told it (docs/reference.md) --------------------


def far_end(event: FarEndClassified) -> dict[str, Any]:
    """The ``far_end_classification`` object of a decision (the greeting's end to come)."""
    return {
        "far_end_type": event.far_end_type,
        "reason": event.reason,
        "seconds_to_classify": event.seconds,
        "greeting_end": None,
        "seconds_to_greeting_end": None,
        "seconds_beep_start": None,
        "seconds_beep_end": None,
        "beep_hz": [],
    }


def greeting_ended(classification: dict[str, Any], event: GreetingEnded) -> None:
    """Note a machine's greeting's end in its ``far_end_classification``."""
    classification.update(
        greeting_end=event.how,
        seconds_to_greeting_end=event.seconds,
        seconds_beep_start=event.beep_start,
        seconds_beep_end=event.beep_end,
        beep_hz=list(event.beep_hz),
    )


def this_call_far_end(classification: dict[str, Any]) -> dict[str, Any]:
    """What a call info (``this_call``, a connect's result) says of who answered."""
    return {
        "far_end_type": classification["far_end_type"],
        "far_end_classification": dict(classification),
    }
