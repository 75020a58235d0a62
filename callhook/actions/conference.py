"""The ``connect_to_conference`` action: the caller takes part in a conference room. The
machine.

Aculab's REST API version 2 ``connect to conference`` (its property names and defaults;
the decisions where it is silent are in docs/behaviour.md). The room itself, who is in it,
whether it has started, who is heard, is the rooms' (:mod:`callhook.conference.room`,
run by the telephony layer for every call of the process); this machine is one
participant's side of it: what its caller hears of the room besides the others' voices,
its digits, and the result when it leaves.

Theory of operation
-------------------
=====================  ==================================================================
state / event          what happens
=====================  ==================================================================
start                  :class:`~callhook.events.JoinRoom` with the participant options,
                       and the participant's name with its joined and left messages for
                       the others; the caller hears ``hold_media`` (else ringback) until
                       it is in
JOINING: joined        IN_ROOM: the hold media stops
JOINING: refused       over, not connected (a full room: ``busy``); the next action runs,
                       as Aculab's page says of a conference that fails to connect
JOINING: deadline      ``seconds_answer_timeout`` passed: over, not connected
IN_ROOM: holding       the room waits for its leader or a second participant: the caller
                       hears ``while_stopped_media`` over and over (else silence)
IN_ROOM: started       the ``while_stopped_media`` stops: the caller hears the room
IN_ROOM: a prompt      a beep or an announcement of someone's coming or going: played,
                       the ``while_stopped_media`` after it if the room still holds
IN_ROOM: a digit       to the room (its exit, mute and unmute digits)
IN_ROOM: left          over: ``seconds_connected_duration`` to ``next_page`` (absent: the
                       next action runs)
IN_ROOM: deadline      ``secondary_call.minutes_max_call_duration`` passed: out of the
                       room, over as if it had left
the caller hangs up    :class:`~callhook.events.LeaveRoom`; the call is over
=====================  ==================================================================

With ``secondary_call.call_recording`` the participant's call is recorded from the
moment it is in the room until it leaves: what it says and what it hears of the room.
A ``connect`` to ``con:ROOM`` is :class:`ConnectToRoom`: the same, with ``connect``'s
result.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Any

from callhook.actions.conferenceschema import ConnectToConference
from callhook.actions.connect import RINGBACK
from callhook.actions.connectschema import Connect
from callhook.actions.machine import (
    ActionContext,
    ActionMachine,
    Completed,
    Continue,
    StopReason,
    prompt_items,
)
from callhook.actions.schema import PlayAction
from callhook.events import (
    DigitReceived,
    JoinRoom,
    LeaveRoom,
    MediaCommand,
    MediaEvent,
    PromptFinished,
    PromptItem,
    RecordCall,
    RoomDigit,
    RoomHolding,
    RoomJoined,
    RoomLeft,
    RoomPrompt,
    RoomRefused,
    StartPrompt,
    StopPrompt,
    StopRecording,
)

#: A connect's cause and raw cause: the room said no (full: busy, as a busy far end's 486).
REFUSED_RAW = {"busy": "486", "failed": "500"}
NO_ANSWER = ("no_answer", "408")
#: Out of the room: as a far end that hung up (Aculab: the room's secondary call ended).
LEFT = ("hung_up", "BYE")


class State(enum.Enum):
    JOINING = "joining"
    IN_ROOM = "in_room"
    DONE = "done"


class ConferenceMachine(ActionMachine):
    """Runs one ``connect_to_conference`` action (see the module docstring)."""

    def __init__(self, action: ConnectToConference, ctx: ActionContext) -> None:
        self.action = action
        self.participant = action.participant()
        self.ctx = ctx
        self.state = State.JOINING
        self.until = 0.0  # the joining's deadline, then the longest time in the room
        self.joined_at = 0.0
        self.playing: int | None = None  # the prompt playing, if any
        self.looping = False  # it is the hold media or the while_stopped_media
        self.holding = False  # the room holds: while_stopped_media when nothing else plays
        self.queued: deque[tuple[PromptItem, ...]] = deque()  # beeps, announcements
        self.media_failed = False  # the looping media could not be played
        self.recording: str | None = None  # the participant's call recording, while it runs
        self.recorded: str | None = None  # its file
        self.result: dict[str, Any] | None = None

    def start(self, now: float) -> list[MediaCommand]:
        self.until = now + self.action.seconds_answer_timeout
        p = self.participant
        join = JoinRoom(
            self.action.room,
            p.options(),
            joined=self._items(p.name) + self._items(p.has_joined_message),
            left=self._items(p.name) + self._items(p.has_left_message),
        )
        return [join, *self._play(self._hold(), loop=True)]

    @property
    def deadline(self) -> float | None:
        return None if self.state is State.DONE else self.until

    def on_deadline(self, now: float) -> list[MediaCommand]:
        if self.state is State.DONE or now < self.until:
            return []
        commands = [LeaveRoom(), *self._stop(), *self._stop_recording()]
        if self.state is State.JOINING:
            self._over(None, "conference: not joined within seconds_answer_timeout", NO_ANSWER)
        else:
            seconds = round(now - self.joined_at, 1)
            self._over(seconds, "conference: minutes_max_call_duration reached", LEFT)
        return commands

    def handle(self, event: MediaEvent, now: float) -> list[MediaCommand]:
        if self.state is State.DONE:
            return []
        if isinstance(event, PromptFinished) and event.prompt_id == self.playing:
            return self._finished(failed=event.error is not None)
        if isinstance(event, RoomJoined) and self.state is State.JOINING:
            self.state = State.IN_ROOM
            self.joined_at = now
            second = self.action.secondary_call
            self.until = now + (second.minutes_max_call_duration if second else 240) * 60.0
            self.media_failed = False  # (the hold media's: the room's own is tried afresh)
            return self._stop() + self._record() + self._next()
        if isinstance(event, RoomRefused):
            commands = self._stop()
            cause = (event.cause, REFUSED_RAW.get(event.cause, "500"))
            self._over(None, f"conference: refused ({event.cause}: {event.raw_cause})", cause)
            return commands
        if isinstance(event, RoomHolding):
            self.holding = event.on
            if not event.on and self.looping:
                return self._stop()
            return self._next()
        if isinstance(event, RoomPrompt):
            self.queued.append(event.items)
            return (self._stop() if self.looping else []) + self._next()
        if isinstance(event, DigitReceived) and self.state is State.IN_ROOM:
            return [RoomDigit(event.digit)]
        if isinstance(event, RoomLeft):
            commands = self._stop() + self._stop_recording()
            self._over(event.seconds, f"conference: left ({event.reason})", LEFT)
            return commands
        return []

    def stop(self, now: float, why: StopReason) -> list[MediaCommand]:
        commands = [LeaveRoom(), *self._stop(), *self._stop_recording()]
        self.state = State.DONE
        self.outcome = Continue(f"connect_to_conference stopped: {why}")
        return commands

    # --- inside -------------------------------------------------------------------------

    def _items(self, play: PlayAction | None) -> tuple[PromptItem, ...]:
        return () if play is None else prompt_items(play, None, self.ctx.page_url)

    def _play(self, items: tuple[PromptItem, ...], *, loop: bool) -> list[MediaCommand]:
        self.playing = self.ctx.new_prompt_id()
        self.looping = loop
        return [StartPrompt(self.playing, items)]

    def _stop(self) -> list[MediaCommand]:
        if self.playing is None:
            return []
        prompt_id, self.playing, self.looping = self.playing, None, False
        return [StopPrompt(prompt_id)]

    def _finished(self, *, failed: bool) -> list[MediaCommand]:
        """The prompt playing ended: the loop again, or what comes next."""
        was_loop, self.playing, self.looping = self.looping, None, False
        # A hold or while-stopped media that cannot be played (a file missing from the
        # store) is not tried again every tick: ringback while joining, silence in the room.
        if was_loop and failed:
            self.media_failed = True
        if self.state is State.JOINING:
            return self._play(self._hold(), loop=True) if was_loop else []
        return self._next()

    def _hold(self) -> tuple[PromptItem, ...]:
        if self.media_failed:
            return RINGBACK
        return self._items(self.action.hold_media) or RINGBACK

    def _next(self) -> list[MediaCommand]:
        """What the caller hears now, when nothing plays: a queued prompt, else the
        ``while_stopped_media`` while the room holds, else the room."""
        if self.playing is not None or self.state is not State.IN_ROOM:
            return []
        if self.queued:
            return self._play(self.queued.popleft(), loop=False)
        stopped = self._items(self.participant.while_stopped_media)
        if self.holding and stopped and not self.media_failed:
            return self._play(stopped, loop=True)
        return []

    def _record(self) -> list[MediaCommand]:
        """``secondary_call.call_recording``: the participant's call, from now on."""
        second = self.action.secondary_call
        if second is None or not second.call_recording:
            return []
        self.recording = self.recorded = self.ctx.new_recording_name()
        cipher = second.call_recording_cipher  # (required with encryption: the schema's)
        return [
            RecordCall(
                self.recording,
                second.call_recording_mode,
                cipher.as_tuple() if second.call_recording_encryption and cipher else None,
                eliminate_dtmf=second.call_recording_eliminate_dtmf,
            )
        ]

    def _stop_recording(self) -> list[MediaCommand]:
        if self.recording is None:
            return []
        filename, self.recording = self.recording, None
        return [StopRecording(filename)]

    def _over(self, seconds: float | None, why: str, cause: tuple[str, str]) -> None:
        """Over: ``seconds`` in the room (None: never in it), ``cause`` as a connect's."""
        self.state = State.DONE
        result = self._result(seconds, cause)
        if result is None or self.action.next_page is None:
            self.outcome = Continue(why)
            return
        self.result = result
        self.outcome = Completed(self.wire_name, dict(result))

    wire_name = "connect_to_conference"

    def _result(self, seconds: float | None, cause: tuple[str, str]) -> dict[str, Any] | None:
        """What ``next_page`` gets; None: not requested (Aculab's "fails to connect")."""
        if seconds is None:
            return None
        result: dict[str, Any] = {"seconds_connected_duration": seconds}
        if self.recorded is not None:
            result["call_recording_filename"] = self.recorded  # callhook's (behaviour.md)
        return result


class ConnectToRoom(ConferenceMachine):
    """A ``connect`` whose destination is ``con:ROOM``: the room joined as by
    ``connect_to_conference`` with the participant defaults, and ``connect``'s result
    (``next_page`` requested whether it got in or not, as a connect's is)."""

    wire_name = "connect"

    def __init__(self, action: Connect, ctx: ActionContext) -> None:
        super().__init__(ConnectToConference.of_connect(action), ctx)
        self.destination = action.destinations[0]

    def _result(self, seconds: float | None, cause: tuple[str, str]) -> dict[str, Any]:
        result: dict[str, Any] = {
            "connected": seconds is not None,
            "destination": self.destination if seconds is not None else None,
            "call_cause": cause[0],
            "call_raw_cause": cause[1],
            "seconds_connected_duration": seconds or 0,
        }
        if self.recorded is not None:
            result["call_recording_filename"] = self.recorded
        return result
