"""The process's conference rooms (telephony/conferences.py) with real media sessions: who
hears what of the room, the calls' media joined to the mix and given back, digits, ejection.
The calls' legs are stand-ins that keep the events they are told."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import cast

import numpy as np

from callhook.events import (
    JoinRoom,
    MediaEvent,
    ParticipantOptions,
    RoomHolding,
    RoomJoined,
    RoomLeft,
    RoomPrompt,
    RoomRefused,
    SayText,
)
from callhook.media import g711
from callhook.media.rtp import RtpPacket
from callhook.media.session import MediaSession
from callhook.telephony.conferences import (
    ENTRY_BEEP,
    Conferences,
    LocalParticipant,
    participant_id,
)
from callhook.telephony.sipcall import SipCall

PEER = ("192.0.2.10", 40000)
FRAME = 160


@dataclass
class Leg:
    events: list[MediaEvent] = field(default_factory=list)

    def inject(self, event: MediaEvent) -> None:
        self.events.append(event)

    def take(self) -> list[MediaEvent]:
        events, self.events = self.events, []
        return events


def call(pid: str, codec: str = "PCMU", app: str = "app") -> SipCall:
    session = MediaSession("PCMU" if codec == "PCMU" else "PCMA", 0, 101, PEER)
    return cast(
        SipCall,
        SimpleNamespace(
            call_id=f"call-{pid}",
            instance_id=pid,
            app=SimpleNamespace(name=app),
            leg=Leg(),
            media=SimpleNamespace(session=session),
        ),
    )


def events(c: SipCall) -> list[MediaEvent]:
    return cast(Leg, c.leg).take()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def tone(hz: float, frame: int) -> np.ndarray:
    t = (np.arange(FRAME) + frame * FRAME) / 8000
    return np.round(4000 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def test_two_callers_meet_and_each_hears_the_other_through_its_session() -> None:
    clock = Clock()
    rooms = Conferences(clock)
    a, b = call("a"), call("b", "PCMA")
    announced = JoinRoom("weekly", ParticipantOptions(), joined=(SayText("Bob joined"),))
    rooms.join(LocalParticipant(a), JoinRoom("weekly"))
    assert events(a) == [RoomJoined(), RoomHolding(True)]
    rooms.join(LocalParticipant(b), announced)
    assert events(a) == [
        RoomPrompt(ENTRY_BEEP),
        RoomPrompt((SayText("Bob joined"),)),
        RoomHolding(False),
    ]
    assert events(b) == [RoomJoined(), RoomHolding(False)]
    sa, sb = a.media.session, b.media.session
    assert sa.tells is not None and sa.hears is not None and sa.tells_digits is None
    assert len(rooms) == 2
    # What each says goes into its talk feed (as MediaSession._audio puts it); a tick later
    # each one's session sends the other's audio in its own law.
    for frame in range(3):
        assert sa.tells is not None and sb.tells is not None
        sa.tells.push(g711.encode("ulaw", tone(400.0, frame)))
        sb.tells.push(g711.encode("alaw", tone(700.0, frame)))
        rooms.tick()
        sent_a = RtpPacket.parse(cast(bytes, sa.tick(frame * 0.02)))
        sent_b = RtpPacket.parse(cast(bytes, sb.tick(frame * 0.02)))
        assert sent_a.payload == g711.encode(
            "ulaw", g711.decode("alaw", g711.encode("alaw", tone(700.0, frame)))
        )
        assert sent_b.payload == g711.encode(
            "alaw", g711.decode("ulaw", g711.encode("ulaw", tone(400.0, frame)))
        )


def test_the_exit_digit_takes_a_caller_out_and_gives_its_media_back() -> None:
    clock = Clock()
    rooms = Conferences(clock)
    a, b = call("a"), call("b")
    rooms.join(LocalParticipant(a), JoinRoom("weekly", ParticipantOptions(exit_digit="*")))
    rooms.join(LocalParticipant(b), JoinRoom("weekly", left=(SayText("Alice left"),)))
    events(a), events(b)
    clock.now = 12.34
    rooms.digit(participant_id(a), "5")  # (no option of its: nothing)
    assert events(a) == []
    rooms.digit(participant_id(a), "*")
    assert events(a) == [RoomLeft("exit_digit", 12.3)]
    assert a.media.session.tells is None and a.media.session.hears is None
    assert events(b) == [RoomHolding(True)]  # (a had no left message)
    rooms.leave(participant_id(a))  # (its action stops after: nothing more)
    assert events(a) == [] and len(rooms) == 1


def test_the_last_caller_to_hang_up_ends_the_room() -> None:
    rooms = Conferences(Clock())
    a = call("a")
    rooms.join(LocalParticipant(a), JoinRoom("weekly"))
    rooms.leave(participant_id(a))
    assert events(a)[-1] == RoomLeft("hung_up", 0.0)
    assert rooms.rooms.get("app", "weekly") is None and len(rooms) == 0
    rooms.tick()  # (no mix left to run)


def test_a_full_room_refuses_with_busy() -> None:
    rooms = Conferences(Clock(), limit=1)
    a, b = call("a"), call("b")
    rooms.join(LocalParticipant(a), JoinRoom("weekly"))
    rooms.join(LocalParticipant(b), JoinRoom("weekly"))
    refused = events(b)
    assert len(refused) == 1 and isinstance(refused[0], RoomRefused)
    assert refused[0].cause == "busy" and b.media.session.tells is None


def test_two_applications_rooms_of_one_name_are_two_rooms() -> None:
    rooms = Conferences(Clock())
    a, b = call("a", app="one"), call("b", app="two")
    rooms.join(LocalParticipant(a), JoinRoom("Sales"))
    rooms.join(LocalParticipant(b), JoinRoom("Sales"))
    assert events(a) == [RoomJoined(), RoomHolding(True)]
    assert events(b) == [RoomJoined(), RoomHolding(True)]


def test_the_web_services_mute_and_eject() -> None:
    rooms = Conferences(Clock())
    a, b = call("a"), call("b")
    rooms.join(LocalParticipant(a), JoinRoom("weekly"))
    rooms.join(LocalParticipant(b), JoinRoom("weekly", ParticipantOptions(beep_on_entry=False)))
    events(a), events(b)
    assert rooms.set_options("app", "weekly", "a", muted=True, talker=None)
    room = rooms.rooms.get("app", "weekly")
    assert room is not None and room.talkers() == ["b"]
    assert not rooms.eject("app", "weekly", "nobody")
    assert not rooms.set_options("app", "other", "a", muted=False, talker=None)
    assert rooms.eject("app", "weekly", "b")
    assert events(b) == [RoomLeft("ejected", 0.0)]
    assert events(a) == [RoomHolding(True)]


def test_a_call_in_one_room_cannot_join_another() -> None:
    rooms = Conferences(Clock())
    a = call("a")
    rooms.join(LocalParticipant(a), JoinRoom("weekly"))
    events(a)
    rooms.join(LocalParticipant(a), JoinRoom("daily"))
    refused = events(a)
    assert len(refused) == 1 and isinstance(refused[0], RoomRefused)
    assert refused[0].cause == "failed" and rooms.rooms.get("app", "daily") is None
    room = rooms.rooms.get("app", "weekly")
    assert room is not None and list(room.participants) == ["a"]
