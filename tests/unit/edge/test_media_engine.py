"""The media tick (callhook/edge/mediaengine.py) with real sockets: a session that raises
(a bug) costs its own packets, never the other calls' audio or the tick itself."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from callhook.edge.mediaengine import MediaEngine
from callhook.media.rtp import RtpPacket
from callhook.media.session import Address, MediaSession


class Broken(MediaSession):
    """A session whose receive path has a bug."""

    def receive(
        self, data: bytes, source: Address, now: float, arrival: float | None = None
    ) -> None:
        raise RuntimeError("a bug in the receive path")


async def test_a_session_that_raises_does_not_stop_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = MediaEngine("127.0.0.1", 41000, 41100)
    try:
        ports = []
        sessions = [
            Broken("PCMU", 0, None, None, label="call broken"),
            MediaSession("PCMU", 0, None, None, label="call fine"),
        ]
        for session in sessions:
            sock, port = engine.allocate()
            await engine.open(session, sock, port, lambda: None)
            ports.append(port)
        caller = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        caller.bind(("127.0.0.1", 0))
        with caller:
            address = caller.getsockname()
            for seq in range(20):
                packet = RtpPacket(0, False, seq, seq * 160, 1234, b"\xff" * 160).serialize()
                for port in ports:
                    caller.sendto(packet, ("127.0.0.1", port))
                await asyncio.sleep(0.02)
            fine = sessions[1]
            for _ in range(100):  # the tick drains the sockets every 20 ms
                if fine.receiver.received == 20:
                    break
                await asyncio.sleep(0.02)
        assert fine.receiver.received == 20
        assert fine.remote == address  # it latched, and sends there
        assert engine.faults == 20  # every packet of the broken call, and only those
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert [r.getMessage() for r in errors] == [
            "call broken: media receiving failed; the call goes on"
        ]
    finally:
        engine.shutdown()


async def test_a_socketless_stream_takes_part_in_the_tick() -> None:
    """The web phone's streams: packets given to ``deliver`` are received at the next
    tick, at most ROUNDS a tick as a socket's, and the session's packets go to ``out``."""
    from callhook.edge.mediaengine import INBOX, ROUNDS

    engine = MediaEngine("127.0.0.1", 41200, 41300, thread=False)
    try:
        peer = ("127.0.0.1", 5004)
        session = MediaSession("PCMU", 0, None, peer, label="call web")
        sent: list[bytes] = []
        woken: list[int] = []
        key = engine.attach(session, sent.append, lambda: woken.append(1))
        assert key < 0  # never a port
        for seq in range(10):
            packet = RtpPacket(0, False, seq, seq * 160, 1234, b"\xff" * 160).serialize()
            engine.deliver(key, packet, peer)
        assert session.receiver.received == 0  # nothing before the tick
        now = asyncio.get_running_loop().time()
        engine._work(now, [])
        assert session.receiver.received == ROUNDS
        engine._work(now + 0.02, [])
        assert session.receiver.received == 10
        assert len(sent) == 2  # a frame each tick, to the page
        assert RtpPacket.parse(sent[0]).payload_type == 0
        for _ in range(INBOX + 30):  # a flood: the inbox keeps a second's worth
            engine.deliver(key, b"\x80" + bytes(11), peer)
        assert len(engine.streams[key].inbox or ()) == INBOX
        engine.close(key)
        assert key not in engine.streams
        engine.deliver(key, b"late", peer)  # after the call: ignored
    finally:
        engine.shutdown()


async def test_the_calls_media_clock_is_the_time_of_the_tick_worked_last() -> None:
    """What the calls' actions time their media on (clock.TickClock): the tick's own time,
    which a tick worked late keeps; none while no call is ticked."""
    engine = MediaEngine("127.0.0.1", 41300, 41400, thread=False)
    try:
        session = MediaSession("PCMU", 0, None, ("127.0.0.1", 5004), label="call web")
        assert session.media_clock is None
        key = engine.attach(session, lambda data: None, lambda: None)
        assert session.media_clock is engine.clock and engine.clock.at is None
        late = asyncio.get_running_loop().time() - 3.0  # a slot the loop gets to 3 s late
        engine._work(late, [])
        assert engine.clock.at == late
        engine._work(late + 0.02, [])
        assert session.media_clock.at == late + 0.02
        engine.close(key)
        assert session.media_clock is None and engine.clock.at is None
    finally:
        engine.shutdown()


async def test_when_choosing_the_calls_to_report_fails_every_call_is_visited(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(calls: object, now: float) -> list[int]:
        raise MemoryError

    monkeypatch.setattr("callhook.media.outlet.due_all", broken)
    engine = MediaEngine("127.0.0.1", 41900, 42000, thread=False)
    try:
        session = MediaSession("PCMU", 0, 101, ("127.0.0.1", 5004), label="call news")
        sent: list[bytes] = []
        woken: list[int] = []
        engine.attach(session, sent.append, lambda: woken.append(1))
        now = asyncio.get_running_loop().time()
        session.timed_out = True  # news for its leg, every tick
        engine._work(now, [])
        engine._work(now + 0.02, [])
        assert len(sent) == 2 and len(woken) == 2  # sent, and woken all the same
        assert engine.faults == 2
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert errors == ["choosing the calls with a report or news failed"]
    finally:
        engine.shutdown()


async def test_the_roster_kept_call_by_call_is_the_one_made_whole() -> None:
    """Streams opening and closing between ticks change the tick's lists one call at a
    time: after each, they are what listing every stream again gives, in the same order,
    and a list a tick already holds is never changed under it."""
    import random

    from callhook.edge.roster import Roster

    def lists(roster: Roster) -> list[list[object]]:
        return [
            [id(s) for s in roster.streams],
            [id(s) for s in roster.sessions],
            [id(s) for s in roster.wired],
            [(id(s), fd) for s, fd in roster.sending],
            [id(s) for s in roster.unwired],
            [(id(s), rtcp) for s, rtcp in roster.reporting],
        ]

    engine = MediaEngine("127.0.0.1", 42100, 42200, thread=False)
    chance = random.Random(7)
    try:
        keys: list[int] = []
        now = asyncio.get_running_loop().time()
        engine._work(now, [])
        for step in range(120):
            if keys and chance.random() < 0.45:
                engine.close(keys.pop(chance.randrange(len(keys))))
            elif chance.random() < 0.5:
                session = MediaSession("PCMU", 0, None, None, label=f"call {step}")
                sock, port = engine.allocate()
                await engine.open(session, sock, port, lambda: None)
                keys.append(port)
            else:
                session = MediaSession("PCMU", 0, None, ("127.0.0.1", 5004))
                keys.append(engine.attach(session, lambda data: None, lambda: None))
            held = engine._roster
            before = lists(held) if held is not None else None
            if chance.random() < 0.3:
                engine._work(now + 0.02 * (step + 1), [])  # a tick: the roster made whole
            roster = engine._roster
            if roster is not None:
                assert lists(roster) == lists(Roster.of(list(engine.streams.values())))
            if held is not None:
                assert lists(held) == before
        assert engine._roster is not None  # (it was kept, not made whole every time)
    finally:
        engine.shutdown()


async def test_a_stream_missing_from_the_roster_is_one_error_line_and_the_close_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from callhook.edge.roster import Roster

    engine = MediaEngine("127.0.0.1", 42200, 42300, thread=False)
    try:
        session = MediaSession("PCMU", 0, None, ("127.0.0.1", 5004), label="call lost")
        kept = MediaSession("PCMU", 0, None, ("127.0.0.1", 5004), label="call kept")
        key = engine.attach(session, lambda data: None, lambda: None)
        engine.attach(kept, lambda data: None, lambda: None)
        engine._work(asyncio.get_running_loop().time(), [])
        engine._roster = Roster.of([])  # (a bug: the roster lost the streams)
        engine.close(key)
        assert key not in engine.streams
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert errors == ["call lost: its stream was not in the media tick's roster"]
        engine._work(asyncio.get_running_loop().time() + 0.02, [])
        assert engine._roster is not None and engine._roster.sessions == [kept]
    finally:
        engine.shutdown()
