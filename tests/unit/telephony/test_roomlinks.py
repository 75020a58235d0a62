"""A conference room whose callers are on two workers (telephony/roomlinks.py).

Two workers in this process, each with its rooms, its links and a private port with
the siblings' middleware (real aiohttp servers and sockets on loopback); the calls are
stand-ins with real media sessions, as in test_conferences.py. The media ticks are
driven by the test: each worker's rooms mixed, then its links' frames sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import numpy as np
import pytest
from aiohttp import web

from callhook.cluster.siblings import Peers, Siblings
from callhook.conference.wire import owner
from callhook.events import (
    JoinRoom,
    ParticipantOptions,
    RoomHolding,
    RoomJoined,
    RoomLeft,
    RoomPrompt,
    RoomRefused,
)
from callhook.media import g711
from callhook.telephony.conferences import ENTRY_BEEP, Conferences
from callhook.telephony.roomlinks import RoomLinks
from callhook.telephony.sipcall import SipCall
from tests.unit.telephony.test_conferences import FRAME, Clock, call, events

QUIET_OPTIONS = ParticipantOptions(beep_on_entry=False)


def room_held_by(label: int) -> str:
    """A room name worker ``label`` of two holds."""
    return next(n for n in (f"room{i}" for i in range(100)) if owner("app", n, [0, 1]) == label)


class Worker:
    """A worker's rooms and links, its private port serving the links."""

    def __init__(self, label: int) -> None:
        self.peers: Peers = []
        self.siblings = Siblings(label, 0, self.peers, token="shared")
        self.clock = Clock()
        self.rooms = Conferences(self.clock)
        self.links = RoomLinks(self.rooms, self.siblings, self.clock)
        self.app = web.Application(middlewares=[self.siblings.middleware])
        self.app.add_routes(self.links.routes())
        self.runner = web.AppRunner(self.app)

    async def start(self) -> None:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.siblings.private_port = cast(Any, site)._server.sockets[0].getsockname()[1]

    def sees(self, other: Worker, port: int | None = None) -> None:
        where = f"http://127.0.0.1:{port or other.siblings.private_port}"
        self.peers[:] = [(other.siblings.label, where, "shared")]

    def tick(self) -> None:
        self.rooms.tick()
        self.links.pump()

    async def stop(self) -> None:
        await self.links.close()
        await self.siblings.close()
        await self.runner.cleanup()


@pytest.fixture
async def workers() -> AsyncIterator[tuple[Worker, Worker]]:
    a, b = Worker(0), Worker(1)
    await a.start()
    await b.start()
    a.sees(b)
    b.sees(a)
    yield a, b
    await a.stop()
    await b.stop()


async def until(check: Callable[[], Any]) -> Any:
    for _ in range(300):
        if value := check():
            return value
        await asyncio.sleep(0.01)
    raise AssertionError("not in time")


def tone(hz: float, frame: int) -> np.ndarray:
    t = (np.arange(FRAME) + frame * FRAME) / 8000
    return np.round(4000 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def loudest_hz(samples: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64) * np.hanning(len(samples))))
    return float(np.argmax(spectrum) * 8000 / len(samples))


class Said:
    """What each call's leg was told, kept as it comes (the stand-in legs keep a list)."""

    def __init__(self, *calls: SipCall) -> None:
        self.calls = calls
        self.seen: dict[str, list[Any]] = {c.call_id: [] for c in calls}

    def of(self, c: SipCall) -> list[Any]:
        self.seen[c.call_id] += events(c)
        return self.seen[c.call_id]


async def test_callers_on_two_workers_meet_in_the_room_its_holder_mixes(
    workers: tuple[Worker, Worker],
) -> None:
    """The room is worker 1's: its caller joins there, worker 0's through the link; each
    hears the other's tone and not its own, digits act, and leaving ends the link."""
    w0, w1 = workers
    name = room_held_by(1)
    here, there = call("here"), call("there", "PCMA")  # (on worker 0, and worker 1)
    said = Said(here, there)
    w1.links.port(there).join(JoinRoom(name))
    port = w0.links.port(here)
    port.join(JoinRoom(name, ParticipantOptions(exit_digit="#")))
    await until(lambda: RoomHolding(False) in said.of(here))
    assert said.of(here) == [RoomJoined(), RoomHolding(False)]
    assert said.of(there) == [RoomJoined(), RoomHolding(True), RoomPrompt(ENTRY_BEEP),
                              RoomHolding(False)]  # fmt: skip
    room = w1.rooms.rooms.get("app", name)
    assert room is not None and sorted(room.participants) == ["here", "there"]
    assert w0.rooms.rooms.get("app", name) is None  # (worker 0 holds no room)
    sh, st = here.media.session, there.media.session
    heard_here: list[bytes] = []
    heard_there: list[bytes] = []
    for frame in range(40):
        assert sh.tells is not None and st.tells is not None
        sh.tells.push(g711.encode("ulaw", tone(400.0, frame)))
        st.tells.push(g711.encode("alaw", tone(1000.0, frame)))
        w0.tick()
        await asyncio.sleep(0.005)  # (the frame crosses to worker 1)
        w1.tick()
        await asyncio.sleep(0.005)  # (and the mix back)
        assert sh.hears is not None and st.hears is not None
        if (got := sh.hears.frame()) is not None:
            heard_here.append(got)
        if (got := st.hears.frame()) is not None:
            heard_there.append(got)
    assert len(heard_here) >= 30 and len(heard_there) >= 30
    here_pcm = g711.decode("ulaw", b"".join(heard_here[-25:]))
    there_pcm = g711.decode("alaw", b"".join(heard_there[-25:]))
    assert abs(loudest_hz(here_pcm) - 1000.0) < 20  # the other's tone, not its own
    assert abs(loudest_hz(there_pcm) - 400.0) < 20
    assert np.abs(here_pcm).max() > 2000 and np.abs(there_pcm).max() > 2000
    # The exit digit, pressed on worker 0, acts in worker 1's room.
    w1.clock.now = 3.0
    port.digit("#")
    await until(lambda: any(isinstance(e, RoomLeft) for e in said.of(here)))
    assert said.of(here)[-1] == RoomLeft("exit_digit", 3.0)
    assert sh.tells is None and sh.hears is None  # its media its own again
    await until(lambda: not w1.links.linked and not w0.links.seated)
    assert said.of(there)[-1] == RoomHolding(True)
    port.leave()  # (the action stops after: nothing more)
    assert sorted(room.participants) == ["there"]


async def test_a_call_leaving_on_its_worker_leaves_the_holders_room(
    workers: tuple[Worker, Worker],
) -> None:
    w0, w1 = workers
    name = room_held_by(1)
    here, there = call("here"), call("there")
    said = Said(here, there)
    w1.links.port(there).join(JoinRoom(name))
    port = w0.links.port(here)
    port.join(JoinRoom(name))
    await until(lambda: RoomJoined() in said.of(here))
    port.leave()  # the caller hung up
    assert here.media.session.tells is None  # at once, on its own worker
    await until(lambda: RoomHolding(True) in said.of(there)[2:])
    room = w1.rooms.rooms.get("app", name)
    assert room is not None and list(room.participants) == ["there"]


async def test_a_room_held_here_is_joined_here(workers: tuple[Worker, Worker]) -> None:
    w0, _ = workers
    name = room_held_by(0)
    a = call("a")
    said = Said(a)
    w0.links.port(a).join(JoinRoom(name))
    await until(lambda: said.of(a))
    assert said.of(a) == [RoomJoined(), RoomHolding(True)]
    assert w0.rooms.rooms.get("app", name) is not None and not w0.links.seated


async def test_a_holder_that_does_not_answer_refuses_the_join(
    workers: tuple[Worker, Worker],
) -> None:
    w0, w1 = workers
    w0.sees(w1, port=1)  # (nothing listens there)
    a = call("a")
    said = Said(a)
    w0.links.port(a).join(JoinRoom(room_held_by(1)))
    (refused,) = await until(lambda: said.of(a))
    assert isinstance(refused, RoomRefused) and refused.cause == "failed"
    assert "worker 1 did not answer" in refused.raw_cause


async def test_the_holder_going_away_takes_its_remote_callers_out(
    workers: tuple[Worker, Worker],
) -> None:
    w0, w1 = workers
    name = room_held_by(1)
    a = call("a")
    said = Said(a)
    w0.links.port(a).join(JoinRoom(name))
    await until(lambda: RoomJoined() in said.of(a))
    w0.clock.now = 7.25
    await w1.links.close()  # worker 1 stops
    await until(lambda: any(isinstance(e, RoomLeft) for e in said.of(a)))
    assert said.of(a)[-1] == RoomLeft("failed", 7.2)
    assert a.media.session.tells is None and not w0.links.seated


async def test_a_caller_whose_worker_goes_away_leaves_the_room(
    workers: tuple[Worker, Worker],
) -> None:
    w0, w1 = workers
    name = room_held_by(1)
    here, there = call("here"), call("there")
    said = Said(here, there)
    w1.links.port(there).join(JoinRoom(name))
    w0.links.port(here).join(JoinRoom(name))
    await until(lambda: RoomHolding(False) in said.of(there))
    await w0.links.close()  # worker 0 stops: its socket closes
    await until(lambda: said.of(there)[-1] == RoomHolding(True))
    room = w1.rooms.rooms.get("app", name)
    assert room is not None and list(room.participants) == ["there"]


async def test_a_call_that_leaves_before_the_room_takes_it_keeps_its_media(
    workers: tuple[Worker, Worker],
) -> None:
    """The action stops (the caller hung up) while the room's answer is on its way: the
    answer, when it comes, does not take the call's media into the room."""
    w0, w1 = workers
    name = room_held_by(1)
    here = call("here")
    said = Said(here)
    port = w0.links.port(here)
    port.join(JoinRoom(name))
    for _ in range(10000):  # the holder took it in; its "joined" is not on the wire yet
        if w1.rooms.rooms.get("app", name) is not None:
            break
        await asyncio.sleep(0)
    port.leave()
    await until(lambda: not w1.links.linked)
    await asyncio.sleep(0.05)  # (anything still on its way arrives)
    assert here.media.session.tells is None and here.media.session.hears is None
    assert not w0.links.seated and said.of(here) == []
    assert w1.rooms.rooms.get("app", name) is None  # joined and left there: no room


async def test_one_socket_carries_every_seat_between_two_workers(
    workers: tuple[Worker, Worker],
) -> None:
    """Two calls of worker 0 in a room of worker 1: one socket, one message a tick each
    way carrying both seats' frames, each frame to its own seat."""
    w0, w1 = workers
    name = room_held_by(1)
    a, b, c = call("a"), call("b"), call("c")  # a and b on worker 0, c on worker 1
    said = Said(a, b, c)
    w1.links.port(c).join(JoinRoom(name, ParticipantOptions(beep_on_entry=False)))
    for who in (a, b):
        w0.links.port(who).join(JoinRoom(name, ParticipantOptions(beep_on_entry=False)))
    await until(lambda: RoomJoined() in said.of(a) and RoomJoined() in said.of(b))
    assert len(w0.links.holders) == 1 and len(w1.links.owned) == 1
    (link,) = w1.links.owned
    assert sorted(p.pid for p in link.seats.values()) == ["a", "b"]
    sent: list[bytes] = []
    (holder,) = w0.links.holders.values()
    original = holder.sender.audio

    def audio(batch: bytes) -> None:
        sent.append(batch)
        original(batch)

    holder.sender.audio = audio  # type: ignore[method-assign]
    sessions = {n: x.media.session for n, x in (("a", a), ("b", b), ("c", c))}
    hz = {"a": 500.0, "b": 900.0, "c": 1300.0}
    heard: dict[str, list[bytes]] = {n: [] for n in hz}
    for frame in range(30):
        for n, session in sessions.items():
            assert session.tells is not None
            session.tells.push(g711.encode(session.law, tone(hz[n], frame)))
        w0.tick()
        await asyncio.sleep(0.005)
        w1.tick()
        await asyncio.sleep(0.005)
        for n, session in sessions.items():
            assert session.hears is not None
            if (got := session.hears.frame()) is not None:
                heard[n].append(got)
    assert sent and all(len(batch) == 2 * (4 + FRAME) for batch in sent)  # both seats
    for n in hz:
        pcm = g711.decode("ulaw", b"".join(heard[n][-20:]))
        spectrum = {m: _share(pcm, f) for m, f in hz.items()}
        assert spectrum[n] < 0.01, (n, spectrum)  # not itself
        assert all(s > 0.2 for m, s in spectrum.items() if m != n), (n, spectrum)


def _share(samples: np.ndarray, hz: float) -> float:
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(len(samples), 1 / 8000)
    return float(spectrum[np.abs(freqs - hz) <= 20].sum() / (spectrum.sum() or 1.0))


def test_a_ticks_frames_travel_as_one_message() -> None:
    from callhook.telephony.roomlinks import _batch, _unbatch

    frames = [(1, bytes([1]) * FRAME), (70000, bytes([2]) * FRAME)]
    message = _batch(frames)
    assert len(message) == 2 * (4 + FRAME)
    assert list(_unbatch(message)) == frames
    assert list(_unbatch(message + b"\x00\x00")) == frames  # (a short tail is no entry)


async def test_a_call_out_of_a_room_here_then_in_one_there_takes_its_digits_there(
    workers: tuple[Worker, Worker],
) -> None:
    """Its first room (held here) put it out with its exit digit; its next room is held
    by the other worker: digits and leaving go there, not to the rooms here."""
    w0, w1 = workers
    here_room, there_room = room_held_by(0), room_held_by(1)
    a, other = call("a"), call("other")
    said = Said(a, other)
    w1.links.port(other).join(JoinRoom(there_room, QUIET_OPTIONS))
    port = w0.links.port(a)
    port.join(JoinRoom(here_room, ParticipantOptions(exit_digit="#")))
    await until(lambda: RoomJoined() in said.of(a))
    port.digit("#")
    assert isinstance(said.of(a)[-1], RoomLeft)
    port.join(JoinRoom(there_room, ParticipantOptions(exit_digit="*", beep_on_entry=False)))
    await until(lambda: said.of(a).count(RoomJoined()) == 2)
    port.digit("*")  # the exit digit of the room there
    await until(lambda: said.of(a)[-1] == RoomLeft("exit_digit", 0.0))
    port.leave()  # (the action stops after)
    room = w1.rooms.rooms.get("app", there_room)
    assert room is not None and list(room.participants) == ["other"]


def test_a_seat_number_out_of_range_is_a_bad_message() -> None:
    from callhook.conference.wire import WireError
    from callhook.telephony.roomlinks import OwnedLink

    links = RoomLinks(Conferences(Clock()), Siblings(0, 0, [], token="t"), Clock())
    link = OwnedLink(cast(Any, None), "1")
    join = {"type": "join", "room": "r", "options": {}, "joined": [], "left": []}
    for seat in (-1, 2**32, True, "1"):
        with pytest.raises(WireError, match="seat"):
            links._command(link, {**join, "seat": seat})
    assert link.seats == {}
