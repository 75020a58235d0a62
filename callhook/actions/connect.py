"""The ``connect`` action: put the caller through to another party. The machine.

Aculab's REST API version 2 ``connect`` (its property names and defaults; the
decisions where it is silent are in docs/behaviour.md). The call the
application runs on is the *primary* call; each destination is called at once
as a far leg (a *secondary* call): the first to answer is bridged to the
caller, the others are dropped.

Theory of operation
-------------------
:class:`ConnectMachine` is an :class:`~callhook.actions.machine.ActionMachine`
(sans-IO: ``now`` and events in, commands out). The leg places the far legs
(:class:`~callhook.events.CallCallee`), ends them
(:class:`~callhook.events.DropCallee`: CANCEL while ringing, BYE once up) and
joins one to the call (:class:`~callhook.events.JoinCallee`); it reports each
far leg's progress as :class:`~callhook.events.CalleeRinging`,
:class:`~callhook.events.CalleeAnswered` and
:class:`~callhook.events.CalleeEnded`.

=====================  ==================================================================
state / event          what happens
=====================  ==================================================================
start                  every destination is called; the caller hears ``hold_media``
                       over and over, else ringback (440 + 480 Hz, 2 s on, 4 s off)
RINGING: ringing with  one destination and ``pass_early_media``: the hold prompt stops
early media            and the far leg's early media is passed to the caller
RINGING: answered,     the other far legs are dropped; the far end is classified
with classify_callee   (ClassifyFarEnd), the hold media or ringback going on: CLASSIFYING
CLASSIFYING: the far   (FarEndClassified; for an answering machine with ``wait_for_beep``,
end classified         also GreetingEnded: its greeting is over) on as when answered below;
                       the result says who answered
CLASSIFYING: deadline  no decision in time (no audio came: the media's clock stood):
                       ``unknown`` (a machine's greeting: ``timeout``), and on as above
RINGING: answered      the other far legs are dropped; with ``secondary_call``, its pages
                       are run on the answered one (RunCallee); with a ``first_page``,
                       SCREENING, the hold media or ringback going on; else the hold
                       prompt stops and the answered one is joined: BRIDGED
SCREENING: ready       the far leg's first page actions all ran: the hold prompt stops, it
                       is joined: BRIDGED
SCREENING or CLASSI-   over, not connected, with its cause (its first page hung up, or
FYING: the far leg     it did)
ended
RINGING: a far leg     forgotten; when it was the last, the action is over, not connected,
ended                  with the most telling cause of them all (busy, then no answer,
                       unobtainable, failed)
RINGING: deadline      ``seconds_answer_timeout`` passed: every far leg is dropped; over,
                       not connected, ``no_answer``
BRIDGED: the far leg   the bridge is over: the result says connected, to which
ended                  destination, the far end's cause and how long the bridge lasted
the caller hangs up    every far leg is dropped (CANCEL / BYE); the call is over
=====================  ==================================================================

The result goes to ``next_page`` (absent: the next action runs).
"""

from __future__ import annotations

import enum
from typing import Any
from urllib.parse import urljoin

from callhook.actions.classify import GRACE, far_end, greeting_ended, this_call_far_end
from callhook.actions.connectschema import Connect
from callhook.actions.machine import (
    ActionContext,
    ActionMachine,
    Completed,
    Continue,
    StopReason,
    prompt_items,
)
from callhook.actions.schema import WebPageRequest
from callhook.events import (
    CallCallee,
    CalleeAnswered,
    CalleeEnded,
    CalleeReady,
    CalleeRinging,
    ClassifyFarEnd,
    ClassifyOptions,
    DropCallee,
    FarEndClassified,
    GreetingEnded,
    JoinCallee,
    MediaCommand,
    MediaEvent,
    PlayTone,
    PromptFinished,
    PromptItem,
    RecordCall,
    RunCallee,
    SecondaryPages,
    StartPrompt,
    StopPrompt,
    StopRecording,
)

#: Ringback (North American: 440 + 480 Hz, 2 s on, 4 s off), what the caller hears while
#: the far end rings and the application gave no ``hold_media``.
RINGBACK: tuple[PromptItem, ...] = (
    PlayTone(440.0, 2.0, and_hz=480.0),
    PlayTone(0.0, 4.0),
)

#: When every far leg failed, the cause the result reports: the most telling one.
CAUSE_ORDER = ("busy", "no_answer", "unobtainable", "failed")


class State(enum.Enum):
    RINGING = "ringing"
    CLASSIFYING = "classifying"  # answered; who answered is being found (classify_callee)
    SCREENING = "screening"  # answered; its secondary_call.first_page actions run on it
    BRIDGED = "bridged"
    DONE = "done"


class ConnectMachine(ActionMachine):
    """Runs one ``connect`` action (see the module docstring)."""

    def __init__(self, action: Connect, ctx: ActionContext) -> None:
        self.action = action
        self.ctx = ctx
        self.state = State.RINGING
        self.live: set[int] = set()  # far legs not ended yet
        self.causes: dict[int, tuple[str, str]] = {}
        self.joined: int | None = None
        self.bridged_at = 0.0
        self.answered_at = 0.0
        self.until = 0.0
        self.holding: int | None = None  # the hold prompt playing
        self.hold_failed = False  # hold_media could not be played: ringback instead
        self.early = False
        self.info: dict[str, Any] = {}  # the joined far leg's description
        self.recording: str | None = None  # the whole-call recording's file, while it runs
        self.recorded: str | None = None  # the file it made
        # The recording's cipher from the far leg's first page's response (Aculab's
        # call_recording_cipher there), when the action gives none.
        self.page_cipher: tuple[str, str, str] | None = None
        self.result: dict[str, Any] | None = None  # once over (with or without a next_page)
        given = action.classify_callee
        self.classify: ClassifyOptions | None = given.options() if given is not None else None
        #: Who answered (classify_callee), as the result and the far leg's pages say it.
        self.far_end: dict[str, Any] | None = None

    # --- the machine --------------------------------------------------------------------

    def start(self, now: float) -> list[MediaCommand]:
        self.until = now + self.action.seconds_answer_timeout
        commands: list[MediaCommand] = []
        for attempt, destination in enumerate(self.action.destinations):
            self.live.add(attempt)
            commands.append(CallCallee(attempt, destination, self.action.call_from))
        return commands + self._hold()

    @property
    def deadline(self) -> float | None:
        return self.until if self.state in (State.RINGING, State.CLASSIFYING) else None

    def on_deadline(self, now: float) -> list[MediaCommand]:
        if self.state is State.CLASSIFYING:
            # The far end's audio never decided it (none came: the media's clock stood).
            assert self.joined is not None
            if self.far_end is None:
                waited = round(now - self.answered_at, 3)
                self.far_end = far_end(FarEndClassified("unknown", "timeout", waited))
            elif self.far_end["greeting_end"] is None:
                self.far_end["greeting_end"] = "timeout"
                self.far_end["seconds_to_greeting_end"] = round(now - self.answered_at, 3)
            return [ClassifyFarEnd(None, self.joined), *self._classified(self.joined, now)]
        if self.state is not State.RINGING:
            return []
        commands = self._stop_hold() + self._drop_all()
        self._finish(now, connected=False, cause=("no_answer", "487"))
        return commands

    def handle(self, event: MediaEvent, now: float) -> list[MediaCommand]:
        if isinstance(event, PromptFinished) and event.prompt_id == self.holding:
            self.holding = None
            if event.error:
                # A hold_media that cannot be played (a file missing from the store, a
                # page that fails) is not tried again every tick: the caller hears
                # ringback instead, as when no hold_media is given (docs/behaviour.md).
                self.hold_failed = True
            return self._hold()  # over and over, until the bridge (or the early media)
        if isinstance(event, CalleeRinging):
            return self._ringing(event)
        if isinstance(event, CalleeAnswered):
            return self._answered(event, now)
        if isinstance(event, CalleeReady):
            return self._ready(event, now)
        if isinstance(event, CalleeEnded):
            return self._ended(event, now)
        if isinstance(event, FarEndClassified | GreetingEnded):
            return self._classification(event, now)
        return []

    def stop(self, now: float, why: StopReason) -> list[MediaCommand]:
        commands = self._stop_hold() + self._drop_all() + self._stop_recording()
        self.state = State.DONE
        self.outcome = Continue(f"connect stopped: {why}")
        return commands

    # --- events -------------------------------------------------------------------------

    def _ringing(self, event: CalleeRinging) -> list[MediaCommand]:
        wanted = self.action.pass_early_media and event.early_media
        if self.state is not State.RINGING or not wanted or self.early:
            return []
        self.early = True
        return [*self._stop_hold(), JoinCallee(event.attempt, early=True)]

    def _answered(self, event: CalleeAnswered, now: float) -> list[MediaCommand]:
        if self.state is not State.RINGING or event.attempt not in self.live:
            return [DropCallee(event.attempt)]  # too late: another one won
        self.joined = event.attempt
        self.info = event.info
        others: list[MediaCommand] = [
            DropCallee(a) for a in sorted(self.live) if a != event.attempt
        ]
        self.live = {event.attempt}
        self.answered_at = now
        if self.classify is not None:
            # Aculab: the far end is classified before its first page (or the join).
            self.state = State.CLASSIFYING
            self.until = now + self.classify.milliseconds_timeout / 1000 + GRACE
            return [*others, ClassifyFarEnd(self.classify, event.attempt)]
        return self._classified(event.attempt, now, others)

    def _classification(
        self, event: FarEndClassified | GreetingEnded, now: float
    ) -> list[MediaCommand]:
        if self.state is not State.CLASSIFYING or event.attempt != self.joined:
            return []
        assert self.classify is not None and self.joined is not None
        if isinstance(event, FarEndClassified):
            self.far_end = far_end(event)
            machine = event.far_end_type == "answering_machine"
            if machine and self.classify.wait_for_beep:
                self.until = now + self.classify.seconds_beep_timeout + GRACE
                return []  # its greeting's end comes next
        elif self.far_end is not None:
            greeting_ended(self.far_end, event)
        return self._classified(self.joined, now)

    def _classified(
        self, attempt: int, now: float, others: list[MediaCommand] | None = None
    ) -> list[MediaCommand]:
        """Far leg ``attempt`` answered (and was classified, if asked): its pages run, or
        it is joined (after ``others``)."""
        if self.far_end is not None:
            self.info = {**self.info, **this_call_far_end(self.far_end)}
        others = list(others or [])
        pages = self._pages()
        if pages is not None:
            others.append(RunCallee(attempt, pages))
        if pages is not None and pages.first_page is not None:
            # Aculab: the first page's actions run on the far leg before it is joined;
            # the caller hears the hold media (or ringback) meanwhile.
            self.state = State.SCREENING
            return others
        return self._join(attempt, now, others)

    def _ready(self, event: CalleeReady, now: float) -> list[MediaCommand]:
        if self.state is not State.SCREENING or event.attempt != self.joined:
            return []
        self.page_cipher = event.cipher
        return self._join(event.attempt, now, [])

    def _join(self, attempt: int, now: float, then: list[MediaCommand]) -> list[MediaCommand]:
        """Bridge far leg ``attempt`` (after the hold prompt stops and ``then``)."""
        self.state = State.BRIDGED
        self.bridged_at = now
        return [*self._stop_hold(), *then, JoinCallee(attempt), *self._record()]

    def _ended(self, event: CalleeEnded, now: float) -> list[MediaCommand]:
        if event.attempt not in self.live:
            return []
        self.live.discard(event.attempt)
        self.causes[event.attempt] = (event.cause, event.raw_cause)
        if self.state is State.BRIDGED and event.attempt == self.joined:
            commands = self._stop_recording()
            self._finish(now, connected=True, cause=(event.cause, event.raw_cause))
            return commands
        if self.state in (State.SCREENING, State.CLASSIFYING) and event.attempt == self.joined:
            # The far leg ended before it was joined (its first page hung up, or it did).
            commands = self._stop_hold()
            self._finish(now, connected=False, cause=(event.cause, event.raw_cause))
            return commands
        if self.state is State.RINGING and not self.live:
            commands = self._stop_hold()
            self._finish(now, connected=False, cause=self._most_telling())
            return commands
        return []

    # --- inside -------------------------------------------------------------------------

    def _hold(self) -> list[MediaCommand]:
        if self.state not in (State.RINGING, State.CLASSIFYING, State.SCREENING) or self.early:
            return []
        prompt_id = self.ctx.new_prompt_id()
        self.holding = prompt_id
        hold = self.action.hold_media
        if hold is None or self.hold_failed:
            items = RINGBACK
        else:
            items = prompt_items(hold, None, self.ctx.page_url)
        return [StartPrompt(prompt_id, items)]

    def _stop_hold(self) -> list[MediaCommand]:
        if self.holding is None:
            return []
        prompt_id, self.holding = self.holding, None
        return [StopPrompt(prompt_id)]

    def _pages(self) -> SecondaryPages | None:
        """The ``secondary_call`` pages to run on the far leg, and its duration limit (None:
        no ``secondary_call``: the far leg runs nothing, and the limit is Aculab's default)."""
        second = self.action.secondary_call
        if second is None:
            return None
        first, final, error = second.first_page, second.final_page, second.error_page

        def resolved(page: WebPageRequest | None) -> tuple[str, str] | None:
            return None if page is None else (urljoin(self.ctx.page_url, page.url), page.method)

        return SecondaryPages(
            resolved(first),
            resolved(final),
            resolved(error),
            max_seconds=second.minutes_max_call_duration * 60.0,
            needs_cipher=(
                second.call_recording
                and second.call_recording_encryption
                and second.call_recording_cipher is None
            ),
            far_end=self.far_end,
        )

    def _record(self) -> list[MediaCommand]:
        """``secondary_call.call_recording``: the bridged call, from the join on."""
        second = self.action.secondary_call
        if second is None or not second.call_recording:
            return []
        self.recording = self.recorded = self.ctx.new_recording_name()
        cipher: tuple[str, str, str] | None = None
        if second.call_recording_encryption:
            given = second.call_recording_cipher
            cipher = given.as_tuple() if given is not None else self.page_cipher
            if cipher is None:  # (its pages are refused first: never recorded in clear)
                self.recording = self.recorded = None
                return []
        return [
            RecordCall(
                self.recording,
                second.call_recording_mode,
                cipher,
                eliminate_dtmf=second.call_recording_eliminate_dtmf,
            )
        ]

    def _stop_recording(self) -> list[MediaCommand]:
        if self.recording is None:
            return []
        filename, self.recording = self.recording, None
        return [StopRecording(filename)]

    def _drop_all(self) -> list[MediaCommand]:
        commands: list[MediaCommand] = [DropCallee(a) for a in sorted(self.live)]
        self.live.clear()
        return commands

    def _most_telling(self) -> tuple[str, str]:
        causes = list(self.causes.values())
        for wanted in CAUSE_ORDER:
            for cause in causes:
                if cause[0] == wanted:
                    return cause
        return causes[0] if causes else ("failed", "")

    def _finish(self, now: float, *, connected: bool, cause: tuple[str, str]) -> None:
        self.state = State.DONE
        destination = None
        if connected and self.joined is not None:
            destination = self.action.destinations[self.joined]
        result: dict[str, Any] = {
            "connected": connected,
            "destination": destination,
            "call_cause": cause[0],
            "call_raw_cause": cause[1],
            "seconds_connected_duration": round(now - self.bridged_at, 1) if connected else 0,
        }
        if connected:
            result["secondary_call"] = dict(self.info)
        if self.far_end is not None:
            result.update(this_call_far_end(self.far_end))
        if self.recorded is not None:
            result["call_recording_filename"] = self.recorded  # callhook's (behaviour.md)
        self.result = result
        page = self.action.next_page
        if page is None:
            self.outcome = Continue(f"connect: {cause[0]}")
        else:
            self.outcome = Completed("connect", result)
