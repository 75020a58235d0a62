"""One conference room and the rooms of a process: the state machine. Sans-IO.

Theory of operation
-------------------
A caller joins a room with the participant options of Aculab's ``conference participant``
object (REST API version 2: talker, start on entry, destroy on exit, beep on entry, exit
digit, mute digit, unmute digit; its media options are the action's, not the room's). A
room is made by its first participant and is gone when its last one leaves, as Aculab's
unreserved conferences are ("created when the first participant joins the conference and
destroyed when the last participant leaves", Aculab's conferencing guide). Rooms are
named per application: two applications' ``Sales`` are two rooms.

A room is *holding* (Aculab's web services say ``HOLDING``: "participants are holding
waiting for the conference to become active") or *active* (``ACTIVE``: "two or more
participants, including the leader"). Aculab's older conference interface gives the
rule: the room starts "when a party configured as start on entry enters, and the room
already contains one or more parties", with "at least one talker". Read as a state, not
an instant: a room is active while it holds two
participants or more, at least one of them with ``start_on_entry`` and at least one a
talker; otherwise it holds, and its participants hear their ``while_stopped_media``
instead of each other.

A participant leaves when its call ends, when it presses its exit digit, when it is
ejected (the web services), or when the room is destroyed: a participant with
``destroy_on_exit`` (a leader) takes the room with it, and everyone still in it leaves
("when a conference room is destroyed any remaining parties are automatically hung up":
the participant's leg into the room, so its ``connect_to_conference`` action ends and
its call goes on to the action's ``next_page``).

Each method takes ``now`` (seconds on the caller's clock) and returns the
:data:`Effect` values that follow from it, in order: the room started or stopped, who
holds, a beep or an announcement for the others, who muted, who left and for how long
they were in. The media and the pages act on them; nothing here plays or mixes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from callhook.events import ParticipantOptions

#: Aculab's limit for an unreserved ("small") conference: "up to 40 participants".
MAX_PARTICIPANTS = 40

RoomState = Literal["HOLDING", "ACTIVE"]
LeaveReason = Literal["hung_up", "exit_digit", "ejected", "destroyed"]


class RoomFull(Exception):
    """The room already holds its most participants (refused with cause ``busy``)."""


class NotInRoom(KeyError):
    """No participant of that id is in the room."""


@dataclass(slots=True)
class Participant:
    """One participant as the room sees it (its id: the application instance that joined
    it, as Aculab's conference participant id is)."""

    id: str
    options: ParticipantOptions
    joined_at: float
    talker: bool
    muted: bool = False

    @property
    def heard(self) -> bool:
        """Whether what it says goes into the room's mix (when the room is active)."""
        return self.talker and not self.muted


# --- what follows from a change (the room's answer to each call) --------------------------


@dataclass(frozen=True, slots=True)
class Started:
    """The room became active: its participants hear each other."""

    room: str


@dataclass(frozen=True, slots=True)
class Stopped:
    """The room is holding again: its participants hear their ``while_stopped_media``."""

    room: str


@dataclass(frozen=True, slots=True)
class Holding:
    """``participant`` waits in a holding room (``on``), or no longer (the room started, or
    it left)."""

    participant: str
    on: bool


@dataclass(frozen=True, slots=True)
class Beep:
    """A beep for ``listeners`` (the others in the room: someone came in)."""

    listeners: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Announce:
    """``about``'s name and its joined or left message, for ``listeners``."""

    about: str
    event: Literal["joined", "left"]
    listeners: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Muted:
    """``participant`` was muted (``muted``) or unmuted, by a digit or the web services."""

    participant: str
    muted: bool


@dataclass(frozen=True, slots=True)
class Left:
    """``participant`` is out of the room, after ``seconds`` in it (Aculab's
    ``seconds_connected_duration``)."""

    participant: str
    reason: LeaveReason
    seconds: float


@dataclass(frozen=True, slots=True)
class Destroyed:
    """The room is gone (its last participant left, or one with ``destroy_on_exit``)."""

    room: str


Effect = Started | Stopped | Holding | Beep | Announce | Muted | Left | Destroyed


# --- one room ------------------------------------------------------------------------------


@dataclass
class Room:
    """A conference room of application ``app`` (see the module docstring)."""

    app: str
    name: str
    created_at: float
    limit: int = MAX_PARTICIPANTS
    participants: dict[str, Participant] = field(default_factory=dict)
    state: RoomState = "HOLDING"
    #: When it last became active (None while it has never been).
    started_at: float | None = None
    destroyed: bool = False

    def join(self, pid: str, options: ParticipantOptions, now: float) -> list[Effect]:
        """``pid`` enters with ``options``; raises :class:`RoomFull` when there is no room
        for it (and ``ValueError`` when it is already in)."""
        if self.destroyed:
            raise ValueError(f"room {self.name!r} is gone")
        if pid in self.participants:
            raise ValueError(f"{pid!r} is already in room {self.name!r}")
        if len(self.participants) >= self.limit:
            raise RoomFull(f"room {self.name!r} holds {self.limit} participants already")
        others = tuple(self.participants)
        self.participants[pid] = Participant(pid, options, now, talker=options.talker)
        effects: list[Effect] = []
        if options.beep_on_entry and others:
            effects.append(Beep(others))
        if others:
            effects.append(Announce(pid, "joined", others))
        was = self.state
        effects += self._settle(now)
        if self.state == "HOLDING" and was == "HOLDING":
            effects.append(Holding(pid, True))  # (the others hold already)
        return effects

    def leave(self, pid: str, now: float, reason: LeaveReason = "hung_up") -> list[Effect]:
        """``pid`` leaves (its call ended, by default); a leader takes the room with it."""
        gone = self.participants.pop(pid, None)
        if gone is None:
            raise NotInRoom(pid)
        effects: list[Effect] = [Left(pid, reason, _seconds(now - gone.joined_at))]
        if gone.options.destroy_on_exit or not self.participants:
            for other in list(self.participants.values()):
                del self.participants[other.id]
                effects.append(Left(other.id, "destroyed", _seconds(now - other.joined_at)))
            self.destroyed = True
            effects.append(Destroyed(self.name))
            return effects
        effects.append(Announce(pid, "left", tuple(self.participants)))
        return effects + self._settle(now)

    def eject(self, pid: str, now: float) -> list[Effect]:
        """The web services put ``pid`` out."""
        return self.leave(pid, now, "ejected")

    def digit(self, pid: str, digit: str, now: float) -> list[Effect] | None:
        """``pid`` pressed ``digit``: what its options make of it, or None when they make
        nothing of it (the digit is not one of its exit, mute or unmute digits)."""
        who = self._get(pid)
        options = who.options
        if digit == options.exit_digit:
            return self.leave(pid, now, "exit_digit")
        if digit == options.mute_digit and digit == (options.unmute_digit or digit):
            return self.set_options(pid, now, muted=not who.muted)  # toggles
        if digit == options.mute_digit:
            return self.set_options(pid, now, muted=True)
        if digit == options.unmute_digit:
            return self.set_options(pid, now, muted=False)
        return None

    def set_options(
        self, pid: str, now: float, *, muted: bool | None = None, talker: bool | None = None
    ) -> list[Effect]:
        """Mute or unmute ``pid``, make it a talker or a listener (the web services' set
        options, and its digits)."""
        who = self._get(pid)
        effects: list[Effect] = []
        if muted is not None and muted != who.muted:
            who.muted = muted
            effects.append(Muted(pid, muted))
        if talker is not None and talker != who.talker:
            who.talker = talker
            effects += self._settle(now)  # (the last talker gone stops the room)
        return effects

    def hears_room(self, pid: str) -> bool:
        """Whether ``pid`` hears the others (the room is active)."""
        return self.state == "ACTIVE" and pid in self.participants

    def talkers(self) -> list[str]:
        """Whose audio the room mixes now: none while it holds."""
        if self.state != "ACTIVE":
            return []
        return [p.id for p in self.participants.values() if p.heard]

    def _get(self, pid: str) -> Participant:
        try:
            return self.participants[pid]
        except KeyError:
            raise NotInRoom(pid) from None

    def _should_be_active(self) -> bool:
        present = self.participants.values()
        return (
            len(self.participants) >= 2
            and any(p.options.start_on_entry for p in present)
            and any(p.talker for p in present)
        )

    def _settle(self, now: float) -> list[Effect]:
        """The state the room's participants now call for, and what changes with it."""
        active = self._should_be_active()
        if active == (self.state == "ACTIVE"):
            return []
        ids = list(self.participants)
        if active:
            self.state, self.started_at = "ACTIVE", now
            return [Started(self.name), *(Holding(p, False) for p in ids)]
        self.state = "HOLDING"
        return [Stopped(self.name), *(Holding(p, True) for p in ids)]


def _seconds(span: float) -> float:
    """Aculab: "a floating point value to one decimal place"."""
    return round(max(span, 0.0), 1)


# --- the rooms of a process ----------------------------------------------------------------


class Rooms:
    """Every room of this process, by application and name. A destroyed room is dropped
    the next time it is looked for; a join by its name makes a new one."""

    def __init__(self, limit: int = MAX_PARTICIPANTS) -> None:
        self.limit = limit
        self._rooms: dict[tuple[str, str], Room] = {}

    def join(
        self, app: str, name: str, pid: str, options: ParticipantOptions, now: float
    ) -> tuple[Room, list[Effect]]:
        """``pid`` enters application ``app``'s room ``name``, made for it when there is none."""
        room = self.get(app, name) or Room(app, name, now, limit=self.limit)
        effects = room.join(pid, options, now)  # (a full room raises: nothing is kept)
        self._rooms[(app, name)] = room
        return room, effects

    def get(self, app: str, name: str) -> Room | None:
        room = self._rooms.get((app, name))
        if room is not None and room.destroyed:
            del self._rooms[(app, name)]
            return None
        return room

    def of(self, app: str) -> list[Room]:
        """Application ``app``'s rooms, by name."""
        return [room for a, name in sorted(self._rooms) if a == app and (room := self.get(a, name))]

    def __len__(self) -> int:
        return sum(1 for room in self._rooms.values() if not room.destroyed)
