"""The conference rooms of this process: calls put in them, their audio mixed each tick.

The SIP service (telephony/service.py) owns one :class:`Conferences`; each call's leg gets
a :class:`CallConference` (the leg's :class:`~callhook.telephony.leg.ConferencePort`).
A call's ``connect_to_conference`` action (``actions/conference.py``) asks to join a room,
passes on its digits and leaves; the rooms (``conference/room.py``) say what follows, and
this carries it out: a participant's media session is joined to its room's mix
(``media/mixing.py``) as a bridged call's is to the other side, and each participant's
action hears of the room as events (:class:`~callhook.events.RoomJoined`,
:class:`~callhook.events.RoomHolding`, :class:`~callhook.events.RoomPrompt` for a beep or
an announcement, :class:`~callhook.events.RoomLeft`). The media tick calls :meth:`tick`
after it has taken in every call's packets and before it sends theirs.

A participant's id is the application instance running on its call, as Aculab's
conference participant id is ("the Instance ID of the application which placed that
call"). The rooms see a participant as a :class:`Participant`: a call of this process
(:class:`LocalParticipant`), or a call of another worker taking part through a socket
(``telephony/roomlinks.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from callhook.conference.room import (
    MAX_PARTICIPANTS,
    Announce,
    Beep,
    Destroyed,
    Effect,
    Holding,
    Left,
    Muted,
    NotInRoom,
    Room,
    RoomFull,
    Rooms,
    Started,
    Stopped,
)
from callhook.events import (
    JoinRoom,
    PlayTone,
    RoomHolding,
    RoomJoined,
    RoomLeft,
    RoomPrompt,
    RoomRefused,
)
from callhook.media.bridge import Feed
from callhook.media.g711 import Law
from callhook.media.mixing import HANGOVER, OPEN_DBOV, RoomMix, mix_all
from callhook.telephony.roomrecording import Mode, RoomRecording
from callhook.telephony.sipcall import SipCall

logger = logging.getLogger("callhook.conference")

#: What the others hear when a participant with ``beep_on_entry`` comes in.
ENTRY_BEEP = (PlayTone(frequency_hz=1000.0, seconds=0.2),)


RoomEvent = RoomJoined | RoomRefused | RoomHolding | RoomPrompt | RoomLeft
#: Makes a room's recording: (app, room, mode, channels, notify: URL and method or None).
OpenRecording = Callable[[str, str, Mode, int, "tuple[str, str] | None"], RoomRecording]


class Participant(Protocol):
    """What the rooms need of a participant: who it is, a way to tell its action what the
    room does, and its media to join to the mix and give back."""

    #: Its participant id.
    pid: str
    #: Its call's application (rooms are per application).
    app: str
    #: Its call, for the log (``call <Call-ID>``).
    name: str
    #: The law its media is in.
    law: Law

    def tell(self, event: RoomEvent) -> None:
        """The room's news for its action."""

    def seat(self, talk: Feed, hears: Feed) -> None:
        """Its media into the mix: what it says into ``talk``, it hears ``hears``."""

    def unseat(self) -> None:
        """Its media its own again."""


def participant_id(call: SipCall) -> str:
    """The call's participant id: its application instance (its Call-ID before one runs)."""
    return call.instance_id or call.call_id


class LocalParticipant:
    """A call of this process in a room: its media session joined to the mix."""

    def __init__(self, call: SipCall) -> None:
        self.call = call
        self.pid = participant_id(call)
        self.app = call.app.name
        self.name = f"call {call.call_id}"
        self.law = call.media.session.law

    def tell(self, event: RoomEvent) -> None:
        self.call.leg.inject(event)

    def seat(self, talk: Feed, hears: Feed) -> None:
        session = self.call.media.session
        session.reclaim()  # (its receive comes back from the media thread: the mix takes it)
        session.tells, session.tells_digits, session.hears = talk, None, hears

    def unseat(self) -> None:
        session = self.call.media.session
        session.reclaim()
        session.tells = session.hears = None


@dataclass
class _Seat:
    """A participant in its room, and what the others hear of its coming and going."""

    who: Participant
    room: Room
    command: JoinRoom


class Conferences:
    """Every conference room of this process (see the module docstring).

    ``now``: the clock the rooms' times are on (seconds); ``limit``: the most participants
    in a room; ``open_dbov`` and ``hangover``: the mix's talker gate.
    """

    def __init__(
        self,
        now: Callable[[], float],
        *,
        limit: int = MAX_PARTICIPANTS,
        open_dbov: float = OPEN_DBOV,
        hangover: int = HANGOVER,
    ) -> None:
        #: The rooms' clock.
        self.now = now
        self.rooms = Rooms(limit)
        self._gate = (open_dbov, hangover)
        self._mixes: dict[tuple[str, str], RoomMix] = {}
        self._seats: dict[str, _Seat] = {}
        #: The rooms being recorded (telephony/roomrecording.py).
        self.recordings: dict[tuple[str, str], RoomRecording] = {}
        #: Makes a room's recording (app, room, mode, channels, notify); set by the SIP
        #: service (None: rooms are not recorded here).
        self.open_recording: OpenRecording | None = None

    # --- what a call's leg asks -------------------------------------------------------------

    def join(self, who: Participant, command: JoinRoom) -> None:
        """Put ``who`` in its application's room ``command.room``."""
        pid, app = who.pid, who.app
        if pid in self._seats:  # (its action left no room before it joins another: a bug)
            logger.error("%s: conference %r refused: in a room already", who.name, command.room)
            who.tell(RoomRefused("failed", "the call is in a conference room already"))
            return
        try:
            room, effects = self.rooms.join(app, command.room, pid, command.options, self.now())
        except RoomFull as exc:
            logger.info("%s: conference %r refused: %s", who.name, command.room, exc)
            who.tell(RoomRefused("busy", str(exc)))
            return
        except ValueError as exc:  # (not expected: the seat is checked above)
            logger.error("%s: conference %r refused: %s", who.name, command.room, exc)
            who.tell(RoomRefused("failed", str(exc)))
            return
        self._seats[pid] = _Seat(who, room, command)
        mix = self._mixes.get((app, command.room))
        if mix is None:
            mix = self._mixes[(app, command.room)] = RoomMix(*self._gate)
        who.seat(*mix.add(pid, who.law))
        logger.info(
            "%s: in conference %r (%d participants)", who.name, command.room, len(room.participants)
        )
        who.tell(RoomJoined())
        self._apply(room, effects)

    def digit(self, pid: str, digit: str) -> None:
        """Participant ``pid`` pressed ``digit``."""
        seat = self._seats.get(pid)
        if seat is None:
            return
        effects = seat.room.digit(pid, digit, self.now())
        if effects:
            self._apply(seat.room, effects)

    def leave(self, pid: str, who: Participant | None = None) -> None:
        """Participant ``pid`` leaves its room, if it is in one (its action stopped, or its
        call ended); with ``who``, only if that is who sits there."""
        seat = self._seats.get(pid)
        if seat is None or (who is not None and seat.who is not who):
            return
        try:
            effects = seat.room.leave(pid, self.now())
        except NotInRoom:  # (a bug: the seat outlived the room's participant)
            logger.error("%s: its seat outlived its conference", seat.who.name)
            self._unseat(pid)
            return
        self._apply(seat.room, effects)

    # --- the web services -------------------------------------------------------------------

    def eject(self, app: str, room: str, pid: str) -> bool:
        """Put participant ``pid`` out of ``app``'s room ``room``; False when it is not there."""
        found = self.rooms.get(app, room)
        if found is None or pid not in found.participants:
            return False
        self._apply(found, found.eject(pid, self.now()))
        return True

    def set_options(
        self, app: str, room: str, pid: str, *, muted: bool | None, talker: bool | None
    ) -> bool:
        """Mute, unmute, make a talker or a listener; False when ``pid`` is not there."""
        found = self.rooms.get(app, room)
        if found is None or pid not in found.participants:
            return False
        self._apply(found, found.set_options(pid, self.now(), muted=muted, talker=talker))
        return True

    def start_recording(
        self, app: str, name: str, mode: Mode, channels: int, notify: tuple[str, str] | None
    ) -> RoomRecording:
        """Record ``app``'s room ``name`` from now until it ends or is stopped.
        :class:`KeyError` when the room is not here, :class:`ValueError` when it is being
        recorded already, :class:`OSError` when the file cannot be made."""
        if self.rooms.get(app, name) is None or self.open_recording is None:
            raise KeyError(name)
        if (app, name) in self.recordings:
            raise ValueError(f"conference {name!r} is being recorded already")
        recording = self.open_recording(app, name, mode, channels, notify)
        self.recordings[(app, name)] = recording
        logger.info("conference %r: recording %s (%s)", name, recording.filename, mode)
        return recording

    def stop_recording(self, app: str, name: str, reason: str = "stopped") -> RoomRecording | None:
        """The room's recording ends (None: it had none)."""
        recording = self.recordings.pop((app, name), None)
        if recording is not None:
            recording.end(self.now(), reason)
            logger.info(
                "conference %r: recording %s ended (%s, %.1f s)",
                name,
                recording.filename,
                reason,
                recording.seconds,
            )
        return recording

    # --- the media tick ---------------------------------------------------------------------

    def tick(self) -> None:
        """Every room's mix, once: a frame from each participant, each one's frame of the
        others' (the media tick's, between its receive and its send); then the rooms
        being recorded get theirs."""
        if not self._mixes:
            return  # (every tick of every call: nothing built where no room is)
        rooms: list[tuple[RoomMix, list[str], bool]] = []
        keys: list[tuple[str, str]] = []
        for (app, name), mix in list(self._mixes.items()):
            room = self.rooms.get(app, name)
            if room is None:
                del self._mixes[(app, name)]
                continue
            rooms.append((mix, room.talkers(), room.state == "ACTIVE"))
            keys.append((app, name))
        taken = mix_all(rooms)
        if self.recordings:
            for key, (mix, _, active), (rows, mixed) in zip(keys, rooms, taken, strict=True):
                recording = self.recordings.get(key)
                if recording is not None:
                    recording.tick(rows, mixed, mix.pids, active)
                    if recording.ended:  # (its file is full)
                        self.recordings.pop(key, None)

    def __len__(self) -> int:
        return len(self._seats)

    # --- inside -----------------------------------------------------------------------------

    def _apply(self, room: Room, effects: list[Effect]) -> None:
        """Carry out what the room said, in order."""
        gone: dict[str, _Seat] = {}
        for effect in effects:
            if isinstance(effect, Holding):
                self._tell(effect.participant, RoomHolding(effect.on))
            elif isinstance(effect, Beep):
                for pid in effect.listeners:
                    self._tell(pid, RoomPrompt(ENTRY_BEEP))
            elif isinstance(effect, Announce):
                seat = self._seats.get(effect.about) or gone.get(effect.about)
                items = () if seat is None else getattr(seat.command, effect.event)
                if items:
                    for pid in effect.listeners:
                        self._tell(pid, RoomPrompt(items))
            elif isinstance(effect, Left):
                seat = self._unseat(effect.participant)
                if seat is not None:
                    gone[effect.participant] = seat
                    logger.info(
                        "%s: out of conference %r (%s, %.1f s)",
                        seat.who.name,
                        room.name,
                        effect.reason,
                        effect.seconds,
                    )
                    seat.who.tell(RoomLeft(effect.reason, effect.seconds))
            elif isinstance(effect, Muted):
                logger.info("conference %r: %s %s", room.name, effect.participant, _muted(effect))
            elif isinstance(effect, Started | Stopped):
                logger.info("conference %r: %s", room.name, _state(effect))
            elif isinstance(effect, Destroyed):
                self._mixes.pop((room.app, room.name), None)
                self.stop_recording(room.app, room.name, "room_ended")
                logger.info("conference %r: ended", room.name)

    def _tell(self, pid: str, event: RoomHolding | RoomPrompt) -> None:
        seat = self._seats.get(pid)
        if seat is not None:
            seat.who.tell(event)

    def _unseat(self, pid: str) -> _Seat | None:
        """``pid``'s call out of its room's mix: its media its own again."""
        seat = self._seats.pop(pid, None)
        if seat is None:
            return None
        mix = self._mixes.get((seat.room.app, seat.room.name))
        if mix is not None:
            mix.remove(pid)
        seat.who.unseat()
        return seat


def _muted(effect: Muted) -> str:
    return "muted" if effect.muted else "unmuted"


def _state(effect: Started | Stopped) -> str:
    return "started" if isinstance(effect, Started) else "holding"


class CallConference:
    """One call's :class:`~callhook.telephony.leg.ConferencePort`: its leg's way to the
    rooms of this process."""

    def __init__(self, conferences: Conferences, call: SipCall) -> None:
        self.conferences = conferences
        self.call = call

    def join(self, command: JoinRoom) -> None:
        self.conferences.join(LocalParticipant(self.call), command)

    def digit(self, digit: str) -> None:
        self.conferences.digit(participant_id(self.call), digit)

    def leave(self) -> None:
        self.conferences.leave(participant_id(self.call))
