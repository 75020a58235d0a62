"""The media plane's thread (callhook/edge/_plane.c) with real sockets.

Most tests run its slots with ``step(now)`` at times they choose (the virtual clock):
what goes out in each slot, the fillers that cover for a late Python, the datagrams each
slot reads, the schedule's catch-up and skip, and a socket's retirement. Then the media
tick through the thread against the media tick on the loop (the reference), on the same
recorded streams: the same events and the same audio out. Two tests run the thread on
its real clock while Python is held (marked solo: they measure timing).
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
import threading
import time
from typing import Any

import pytest

from callhook.edge.mediaengine import MediaEngine
from callhook.edge.overload import Overload
from callhook.edge.plane import AHEAD, Plane, new_plane
from callhook.events import DigitReceived
from callhook.media import srtp
from callhook.media.dtmfsend import END_PACKETS, TONE_TICKS, EventTone
from callhook.media.rtp import RtpPacket
from callhook.media.session import MediaSession
from callhook.media.srtp import SrtpContext
from tests.unit.edge.conftest import T0

TICK = 0.02

try:
    from callhook.edge._plane import Plane as NativePlane
except ImportError:  # pragma: no cover (scripts/setup builds it)
    pytest.fail("callhook.edge._plane was not built: rerun scripts/setup", pytrace=False)


def at(slot: int) -> float:
    """Slot ``slot``'s time as the thread computes it (nanoseconds from T0)."""
    return (round(T0 * 1e9) + slot * 20_000_000) / 1e9


def udp() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    return sock


def rtp(
    seq: int, ts: int, payload: bytes = b"\x11" * 160, pt: int = 0, marker: bool = False
) -> bytes:
    return RtpPacket(pt, marker, seq, ts, 0xABCD, payload).serialize()


def drain(sock: socket.socket) -> list[bytes]:
    got = []
    while True:
        try:
            got.append(sock.recv(2048))
        except BlockingIOError:
            return got


def header(data: bytes) -> tuple[int, int, int, int]:
    """(marker, payload type, sequence, timestamp)."""
    second, seq, ts = struct.unpack_from("!BHI", data, 1)
    return second >> 7, second & 0x7F, seq, ts


def run(plane: Plane, slot: int, late: float = 0.0) -> tuple[int, float, float, int, list[Any]]:
    plane.step(at(slot) + late)
    got = plane.next_slot()
    assert got is not None
    return got


def test_a_frame_goes_in_its_slot_and_silence_where_python_is_late(plane: Plane) -> None:
    line, peer = udp(), udp()
    with line, peer:
        plane.add(line, "call")
        to = peer.getsockname()
        assert plane.send([(line.fileno(), rtp(100, 8000), to)], 1) == 0
        assert plane.send([(line.fileno(), rtp(101, 8160, b"\x22" * 160), to)], 2) == 0
        assert run(plane, 0)[0] == 0
        assert drain(peer) == []  # nothing queued for slot 0
        run(plane, 1)
        assert [header(d) for d in drain(peer)] == [(0, 0, 100, 8000)]
        run(plane, 2)
        assert [header(d) for d in drain(peer)] == [(0, 0, 101, 8160)]
        # Python's frames for slots 3 and 4 do not come: silence, the next numbers, the
        # media clock's timestamps, no marker.
        run(plane, 3)
        run(plane, 4)
        fillers = drain(peer)
        assert [header(d) for d in fillers] == [(0, 0, 102, 8320), (0, 0, 103, 8480)]
        assert all(d[12:] == b"\xff" * 160 for d in fillers)  # μ-law silence
        assert plane.fillers == 2
        # Python's next frame is renumbered after the fillers; its timestamp is its own.
        plane.send([(line.fileno(), rtp(102, 8640, marker=True), to)], 5)
        run(plane, 5)
        assert [header(d) for d in drain(peer)] == [(1, 0, 104, 8640)]


def test_a_calls_first_frame_too_late_for_its_slot_still_starts_its_stream(
    plane: Plane,
) -> None:
    """Python behind from the call's first frame: the frame misses its slot, and the
    line, which has sent nothing, learns from it where its audio goes, its numbers and
    its media clock, and sends from the next slot (silence here) instead of nothing."""
    line, peer = udp(), udp()
    with line, peer:
        plane.add(line, "call")
        for slot in range(3):
            run(plane, slot)
        plane.send([(line.fileno(), rtp(100, 8000), peer.getsockname())], 1)  # gone
        assert drain(peer) == []
        run(plane, 3)
        run(plane, 4)
        got = drain(peer)
        assert [header(d) for d in got] == [(0, 0, 100, 8320), (0, 0, 101, 8480)]
        assert all(d[12:] == b"\xff" * 160 for d in got)
        assert plane.stale == 1 and plane.fillers == 2
        # An event too late teaches nothing (it is no audio to go on from).
        other, peer2 = udp(), udp()
        with other, peer2:
            plane.add(other, "other")
            run(plane, 5)
            event = RtpPacket(101, True, 7, 800, 0xABCD, b"\x01\x0a\x00\xa0").serialize()
            plane.send([(other.fileno(), event, peer2.getsockname())], 4)
            run(plane, 6)
            run(plane, 7)
            assert drain(peer2) == []


def test_a_quiet_line_gets_no_filler_until_its_next_frame(plane: Plane) -> None:
    line, peer = udp(), udp()
    with line, peer:
        to = peer.getsockname()
        plane.add(line, "call")
        plane.send([(line.fileno(), rtp(1, 0), to)], 0)
        run(plane, 0)
        plane.send([(line.fileno(), rtp(2, 160), to)], 1)
        plane.quiet(line.fileno(), 2)  # on hold from slot 2: nothing, on purpose
        run(plane, 1)
        run(plane, 2)
        assert len(drain(peer)) == 2 and plane.fillers == 0  # slot 1's frame went
        plane.send([(line.fileno(), rtp(3, 480), to)], 3)
        run(plane, 3)
        run(plane, 4)
        assert [header(d)[2:] for d in drain(peer)] == [(3, 480), (4, 640)]


def test_an_event_python_is_late_for_goes_on_as_python_would_send_it(plane: Plane) -> None:
    """A digit being sent as an RFC 4733 event when Python falls behind: the thread sends
    the event's next packets (the same timestamp, the duration on, the end packet three
    times), exactly those Python's EventTone makes, not audio in its middle; then
    silence on the media clock."""
    tone = EventTone("5", 8160)
    packets = [tone.next_packet() for _ in range(TONE_TICKS - 1 + END_PACKETS)]
    assert tone.done
    line, peer = udp(), udp()
    with line, peer:
        plane.add(line, "call")
        to = peer.getsockname()
        plane.send([(line.fileno(), rtp(100, 8000), to)], 0)
        for k in range(2):  # the event's first two packets, then Python is late
            payload, marker = packets[k]
            plane.send([(line.fileno(), rtp(101 + k, 8160, payload, 101, marker), to)], 1 + k)
        for slot in range(10):
            run(plane, slot)
        got = drain(peer)
        assert [header(d)[1] for d in got] == [0] + [101] * len(packets) + [0, 0]
        assert [d[12:] for d in got[1:-2]] == [payload for payload, _ in packets]
        assert [header(d)[0] for d in got] == [0, 1] + [0] * (len(got) - 2)
        assert [header(d)[2] for d in got] == list(range(100, 100 + len(got)))
        assert {header(d)[3] for d in got[1:-2]} == {8160}
        assert [header(d)[3] for d in got[-2:]] == [8000 + 8 * 160, 8000 + 9 * 160]
        assert all(d[12:] == b"\xff" * 160 for d in got[-2:])
        assert (plane.covered, plane.fillers) == (len(packets) - 2, 2)


def test_an_event_before_any_audio_goes_on_too(plane: Plane) -> None:
    """A call whose first packet is a digit's event (a prompt that begins with digits)."""
    tone = EventTone("1", 8000)
    packets = [tone.next_packet() for _ in range(TONE_TICKS - 1 + END_PACKETS)]
    line, peer = udp(), udp()
    with line, peer:
        plane.add(line, "call")
        payload, marker = packets[0]
        plane.send([(line.fileno(), rtp(100, 8000, payload, 101, marker), peer.getsockname())], 0)
        for slot in range(len(packets) + 2):
            run(plane, slot)
        got = drain(peer)
        # The event whole; then nothing (no audio was ever sent: no silence to copy).
        assert [d[12:] for d in got] == [payload for payload, _ in packets]


def test_srtp_goes_as_made_and_is_never_filled(plane: Plane) -> None:
    line, peer = udp(), udp()
    with line, peer:
        to = peer.getsockname()
        plane.add(line, "call")
        protected = [rtp(500 + i, 160 * i) + b"tag-of-ten" for i in range(2)]
        plane.send([(line.fileno(), protected[0], to)], 0, True)
        plane.send([(line.fileno(), protected[1], to)], 1, True)
        for slot in range(4):
            run(plane, slot)
        assert drain(peer) == protected  # byte for byte, and nothing in slots 2, 3
        assert plane.fillers == 0


def test_a_frame_after_its_slot_is_dropped_and_counted(plane: Plane) -> None:
    line, peer = udp(), udp()
    with line, peer:
        to = peer.getsockname()
        plane.add(line, "call")
        plane.send([(line.fileno(), rtp(1, 0), to)], 0)
        run(plane, 0)
        run(plane, 1)  # a filler
        plane.send([(line.fileno(), rtp(2, 160), to)], 1)  # too late for slot 1
        run(plane, 2)
        assert plane.stale == 1
        assert [header(d)[2:] for d in drain(peer)] == [(1, 0), (2, 160), (3, 320)]


def test_each_slot_brings_the_datagrams_read_in_it_at_most_rounds_per_socket(
    plane: Plane,
) -> None:
    line, rtcp, caller = udp(), udp(), udp()
    with line, rtcp, caller:
        plane.add(line, ("call", "rtp"))
        plane.add(rtcp, ("call", "rtcp"))
        run(plane, 0)  # the sockets are the thread's from here
        sending = time.time()
        for i in range(10):  # a burst: more than `rounds` (6)
            caller.sendto(rtp(i, 160 * i), line.getsockname())
        caller.sendto(b"report", rtcp.getsockname())
        sent = time.time()
        time.sleep(0.2)
        stepping = time.time()
        slot, when, late, skipped, items = run(plane, 1)
        stepped = time.time()
        assert (slot, when, late, skipped) == (1, at(1), 0.0, 0)
        rtp_items = [i for i in items if i[0] == ("call", "rtp")]
        assert [header(d)[2] for _, d, _, _ in rtp_items] == [0, 1, 2, 3, 4, 5]
        assert [d for k, d, _, _ in items if k == ("call", "rtcp")] == [b"report"]
        assert {a for _, _, a, _ in items} == {caller.getsockname()}
        # Each comes with when it reached the host, on the slots' clock: as long before
        # the slot began as the real clock says it was sent before the step (at least
        # the 200 ms slept; more if this process waited for a core), not when it was read.
        tolerance = 0.002
        assert all(
            sending - stepped - tolerance <= came - when <= sent - stepping + tolerance
            for _, _, _, came in items
        )
        stepping = time.time()
        later = run(plane, 2)[4]
        assert [header(d)[2] for _, d, _, _ in later] == [6, 7, 8, 9]
        # Read a slot later, they too came as long before: the kernel's time, not the read's.
        assert all(came - at(2) <= sent - stepping + tolerance for _, _, _, came in later)


def test_a_datagram_too_big_for_a_record_is_dropped_and_counted(plane: Plane) -> None:
    line, caller = udp(), udp()
    with line, caller:
        plane.add(line, "call")
        run(plane, 0)
        caller.sendto(b"x" * 600, line.getsockname())
        caller.sendto(b"y" * 512, line.getsockname())
        time.sleep(0.05)
        assert [d for _, d, _, _ in run(plane, 1)[4]] == [b"y" * 512]
        assert plane.oversized == 1


def test_a_late_slot_is_run_at_once_and_a_long_stall_is_skipped(plane: Plane) -> None:
    line, peer = udp(), udp()
    with line, peer:
        plane.add(line, "call")
        plane.send([(line.fileno(), rtp(1, 8000), peer.getsockname())], 0)
        plane.send([(line.fileno(), rtp(2, 8160), peer.getsockname())], 3)  # (skipped)
        run(plane, 0)
        # 50 ms late: slot 1 runs now, and slots 2 and 3 are due as well (caught up).
        plane.step(at(1) + 0.05)
        assert plane.next_slot()[:4] == (1, at(1), pytest.approx(0.05), 0)  # type: ignore[index]
        assert plane.late_slots == 1
        assert plane.slot == 2
        # A stall longer than 3 slots: the grid starts again at the slot of now, and the
        # TICK says how many were skipped; the frame queued for one of them is stale.
        plane.step(T0 + 1.0 + 0.001)
        slot, when, late, skipped, _ = plane.next_slot()  # type: ignore[misc]
        assert (slot, when, skipped) == (50, at(50), 48)
        assert late == pytest.approx(0.001)
        assert plane.skipped == 48 and plane.stale == 1
        assert plane.next_slot() is None
        # The call's media clock resumes where it was, as Python's does (it skips too).
        assert [header(d)[2:] for d in drain(peer)] == [(1, 8000), (2, 8160), (3, 8320)]


def test_a_tick_the_ring_has_no_room_for_is_counted_and_shows_as_a_gap() -> None:
    made = NativePlane(6, capacity=1024)  # an event ring of 1024 records
    made.set_origin(T0)
    try:
        for slot in range(1100):  # Python reads nothing meanwhile
            made.step(at(slot))
        assert made.lost_ticks == 1100 - 1024
        slots = []
        while (got := made.next_slot()) is not None:
            slots.append(got[0])
        assert slots == list(range(1024))
        made.step(at(1100))
        got = made.next_slot()
        assert got is not None and got[0] == 1100 and got[3] == 0  # ran, not skipped
    finally:
        made.close()


def test_the_served_ring_holds_seconds_of_every_calls_packets() -> None:
    # Python behind, holding every call's receive: the ring takes 650 calls' packets (one
    # a slot each) and the slots' records for four seconds before one is lost.
    made, small = new_plane(6), NativePlane(6, capacity=1024)
    assert made is not None
    try:
        assert made.capacity >= 4 * 50 * (650 + 1)
        assert small.capacity == 1024
    finally:
        made.close()
        small.close()


def test_a_retired_socket_is_closed_once_the_thread_lets_go(plane: Plane) -> None:
    line, caller = udp(), udp()
    with caller:
        plane.add(line, "call")
        run(plane, 0)
        caller.sendto(b"last words", line.getsockname())
        time.sleep(0.05)
        plane.retire(line)
        assert line.fileno() != -1  # still the thread's
        _, _, _, _, items = run(plane, 1)
        assert line.fileno() == -1  # closed when Python read the thread's answer
        assert items == []  # the thread let go before reading it
        assert plane.send([(99, b"x", ("127.0.0.1", 9))], 2) == 1  # never added: not sent


def test_a_retired_socket_sends_the_frames_queued_first_and_nothing_made_up(
    plane: Plane,
) -> None:
    """A call that hangs up right after a prompt: its last frames, queued ahead, still go
    in their slots (the caller hears the prompt's end); no filler or cover after them,
    nothing read; then the thread lets go."""
    line, peer = udp(), udp()
    with peer:
        plane.add(line, "call")
        to = peer.getsockname()
        for k in range(3):
            plane.send([(line.fileno(), rtp(100 + k, 8000 + 160 * k), to)], 1 + k)
        run(plane, 0)
        plane.retire(line)
        peer.sendto(b"too late", line.getsockname())
        time.sleep(0.05)
        for slot in (1, 2):
            _, _, _, _, items = run(plane, slot)
            assert items == [] and line.fileno() != -1  # still sending
            assert [header(d)[2] for d in drain(peer)] == [99 + slot]
        _, _, _, _, items = run(plane, 3)
        assert [header(d)[2] for d in drain(peer)] == [102]  # the last frame
        assert items == [] and line.fileno() == -1  # let go at once after it
        run(plane, 4)
        assert drain(peer) == []
        assert plane.fillers == 0 and plane.covered == 0


def test_a_line_added_twice_is_refused() -> None:
    made = new_plane(6)
    assert made is not None
    line = udp()
    with line:
        made.add(line, "call")
        with pytest.raises(ValueError):
            made.add(line, "call")
    made.close()


# --- the media tick through the thread, against the media tick on the loop ------------------


def _stream() -> list[tuple[int, list[bytes]]]:
    """A caller's recorded stream, slot by slot: audio with a loss, a reordering and a
    burst, and two RFC 4733 digits (the second one's packets late and duplicated)."""
    slots: list[tuple[int, list[bytes]]] = []
    seq, ts = 1000, 50_000

    def audio(n: int) -> bytes:
        return RtpPacket(0, False, seq + n, ts + 160 * n, 77, bytes([n % 256]) * 160).serialize()

    def event(n: int, digit: int, duration: int, end: bool) -> bytes:
        payload = bytes([digit, 0x80 | 10 if end else 10]) + duration.to_bytes(2, "big")
        return RtpPacket(101, duration == 160, seq + n, ts + 160 * 40, 77, payload).serialize()

    for n in range(40):
        if n == 10:
            slots.append((n, []))  # lost
            continue
        if n == 20:
            slots.append((n, [audio(21), audio(20)]))  # reordered
            continue
        if n == 21:
            slots.append((n, []))
            continue
        slots.append((n, [audio(n)]))
    slots.append((40, [event(40, 5, 160, False)]))
    slots.append((41, [event(41, 5, 320, False)]))
    slots.append((42, [event(42, 5, 480, True), event(43, 5, 480, True)]))
    slots.append((43, []))
    for n in range(44, 60):
        slots.append((n, [audio(n)]))
    return slots


def _session(keys: tuple[srtp.Crypto, srtp.Crypto] | None) -> MediaSession:
    session = MediaSession("PCMU", 0, 101, None, label="call")
    for name, value in (("ssrc", 4242), ("sequence", 10), ("timestamp", 3200)):
        setattr(session.sender, name, value)
    if keys is not None:
        session.srtp = SrtpContext(*keys)
    session.play_encoded(1, bytes(range(256)) * 10)  # a prompt: audio that changes
    return session


async def _run_engine(
    threaded: bool, keys: tuple[srtp.Crypto, srtp.Crypto] | None
) -> dict[str, Any]:
    """The stream through one engine, at virtual times; what the session did and sent."""
    engine = MediaEngine(
        "127.0.0.1", 43000 if threaded else 43100, 43100 if threaded else 43200, thread=threaded
    )
    caller = udp()
    far = SrtpContext(keys[1], keys[0]) if keys is not None else None
    sent: list[bytes] = []
    try:
        session = _session(keys)
        sock, port = engine.allocate()
        plane = engine.plane
        if plane is not None:
            plane.set_origin(T0)
            engine._start = lambda: None  # type: ignore[method-assign]  # the test's clock
        await engine.open(session, sock, port, lambda: None)
        if plane is None:
            engine._handle.cancel()  # type: ignore[union-attr]  # the test's clock
        for slot, packets in _stream():
            for packet in packets:
                caller.sendto(far.protect(packet) if far else packet, ("127.0.0.1", port))
            await asyncio.sleep(0.005)  # (the loopback delivers them)
            now = at(slot)
            if plane is not None:
                plane.step(now)
                got = plane.next_slot()
                assert got is not None and got[0] == slot
                engine._work(got[1], got[4], got[0] + AHEAD)
            else:
                engine._work(now, engine._udp.receive())
            sent += drain(caller)
        if plane is not None:
            for slot in range(60, 60 + AHEAD):  # the frames still queued go out
                plane.step(at(slot))
            sent += drain(caller)
            assert plane.fillers == 0 and plane.stale == 0
        if far is not None:
            sent = [far.unprotect(d) or b"" for d in sent]
        session.reclaim()  # (from the thread, where it took the resting call's packets)
        return {
            "events": list(session.events),
            "received": session.receiver.received,
            "lost": session.receiver.cumulative_lost,
            "sent": [(header(d), d[12:]) for d in sent],
        }
    finally:
        caller.close()
        engine.shutdown()


@pytest.mark.parametrize("secure", [False, True], ids=["rtp", "srtp"])
async def test_the_tick_through_the_thread_does_what_the_tick_on_the_loop_does(
    secure: bool,
) -> None:
    keys = (srtp.new_key(), srtp.new_key()) if secure else None
    reference = await _run_engine(False, keys)
    threaded = await _run_engine(True, keys)
    assert DigitReceived("5") in reference["events"]
    assert reference["lost"] == 1 and len(reference["sent"]) == 60
    assert threaded == reference


# --- the thread on its real clock ---------------------------------------------------------


@pytest.mark.solo
def test_the_thread_keeps_time_while_python_holds_the_gil() -> None:
    """sorted() of a long list holds the GIL for its whole run: the thread still runs its
    slots and covers the line with silence, every 20 ms."""
    made = new_plane(6)
    assert made is not None
    line, peer = udp(), udp()
    seqs: list[int] = []
    try:
        made.add(line, "call")
        made.start()
        deadline = time.monotonic() + 2
        while made.slot < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        made.send([(line.fileno(), rtp(1, 0), peer.getsockname())], made.slot + 1)
        time.sleep(0.1)
        import random

        values = [random.random() for _ in range(2_000_000)]
        before, started = made.fillers, time.monotonic()
        sorted(values)  # the GIL, held in C
        held = time.monotonic() - started
        during = made.fillers - before
        assert held > 0.3, "the machine sorted too fast for the test to mean anything"
        assert during >= held / TICK * 0.5
        seqs = [header(data)[2] for data in drain(peer)]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # no gap
    finally:
        made.close()
        line.close()
        peer.close()


@pytest.mark.solo
async def test_a_blocked_loop_does_not_stop_a_calls_audio() -> None:
    """The event loop blocked for 300 ms: the caller still gets a packet every 20 ms, and
    the prompt's own audio in each (its cover), not silence."""
    engine = MediaEngine("127.0.0.1", 43200, 43300)
    caller = udp()
    caller.setblocking(True)
    caller.settimeout(0.5)
    times: list[float] = []
    marks: list[int] = []
    done = threading.Event()

    def listen() -> None:
        while not done.is_set():
            try:
                data = caller.recv(2048)
            except OSError:
                continue
            times.append(time.monotonic())
            marks.append(data[12])

    listener = threading.Thread(target=listen)
    try:
        session = MediaSession("PCMU", 0, 101, caller.getsockname(), label="call")
        # 100 frames, each of its own byte (1 to 100): 2 s, longer than the test.
        session.play_encoded(1, b"".join(bytes([i]) * 160 for i in range(1, 101)))
        sock, port = engine.allocate()
        await engine.open(session, sock, port, lambda: None)
        listener.start()
        await asyncio.sleep(0.2)
        blocked = time.monotonic()
        time.sleep(0.3)  # the loop does nothing: no tick of Python's runs
        await asyncio.sleep(0.2)
        inside = [t for t in times if blocked <= t <= blocked + 0.3]
        assert len(inside) >= 10
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert max(gaps) < 0.08
        assert engine.plane is not None and engine.plane.covered >= 10
        start = marks.index(1)
        assert marks[start:] == list(range(1, len(marks) - start + 1))  # whole, in order
    finally:
        done.set()
        engine.shutdown()
        listener.join()
        caller.close()


# --- admission ------------------------------------------------------------------------------


def test_calls_are_refused_once_the_media_runs_behind_for_half_a_second(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``max_lag``: every tick over it for half a second makes the server overloaded (said
    once); every tick within it for a second takes calls again (said once)."""
    overload = Overload(0.04)
    now = 0.0
    for _ in range(100):  # spikes over the threshold, each one alone: not behind
        overload.tick(0.2, now)
        overload.tick(0.01, now + 0.01)
        now = round(now + 0.02, 6)  # (no drift)
    assert not overload.overloaded
    for _ in range(25):  # behind, every tick, for 0.48 s
        overload.tick(0.1, now)
        now = round(now + 0.02, 6)
    assert not overload.overloaded
    overload.tick(0.12, now)  # 0.5 s
    assert overload.overloaded
    for _ in range(50):  # within it for 0.98 s, one tick over: the second starts again
        overload.tick(0.01, now)
        now = round(now + 0.02, 6)
    overload.tick(0.05, now)
    for _ in range(50):
        overload.tick(0.01, now)
        now = round(now + 0.02, 6)
    assert overload.overloaded
    overload.refused = 3
    overload.tick(0.01, now)  # within it for a second
    assert not overload.overloaded
    said = [r.getMessage() for r in caplog.records if r.name == "callhook.media"]
    assert said == [
        "the media runs 120 ms behind: new calls get 503 until it catches up "
        "([media] max_lag_ms = 40)",
        "the media caught up: taking new calls again (3 refused)",
    ]
    overload.max_lag = 0  # off: never overloaded
    for _ in range(100):
        overload.tick(5.0, now)
        now = round(now + 0.02, 6)
    assert not overload.overloaded


async def test_the_last_call_ending_takes_calls_again() -> None:
    """On the loop's timer no tick runs without a call: the engine's close() calms it."""
    engine = MediaEngine("127.0.0.1", 43300, 43400, thread=False, max_lag=0.04)
    try:
        key = engine.attach(MediaSession("PCMU", 0, None, None), lambda _: None, lambda: None)
        engine.overload.tick(1.0, 0.0)
        engine.overload.tick(1.0, 0.5)
        assert engine.overload.overloaded
        engine.close(key)
        assert not engine.overload.overloaded
    finally:
        engine.shutdown()


async def test_the_engine_runs_the_slots_the_thread_could_not_report_and_skips_its_skips(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A TICK lost to a full ring: that slot is worked without datagrams; slots the thread
    skipped are skipped; each slot once, in order, within a budget of time per call."""
    engine = MediaEngine("127.0.0.1", 43400, 43500)
    made = NativePlane(6, capacity=1024)
    made.set_origin(T0)
    assert engine.plane is not None
    engine.plane.close()
    engine.plane = made
    assert engine.slots is not None
    engine.slots.plane = made
    worked: list[tuple[int, float]] = []

    def work(now: float, received: list[Any], slot: int | None = None) -> None:
        assert slot is not None
        worked.append((slot - AHEAD, now))

    monkeypatch.setattr(engine, "_work", work)
    monkeypatch.setattr(engine, "_start", lambda: None)  # the test's clock
    engine.attach(MediaSession("PCMU", 0, None, None), lambda _: None, lambda: None)
    try:
        for slot in range(1100):  # 76 TICKs find the ring full
            made.step(at(slot))
        monkeypatch.setattr("callhook.edge.slots.BUDGET", -1.0)
        engine.slots.read()
        assert len(worked) == 0 and engine.slots.soon  # no time left: the loop's other work
        monkeypatch.setattr("callhook.edge.slots.BUDGET", 0.02)
        while engine.slots.soon:
            engine.slots.read()
        made.step(at(1100) + 0.5)  # the thread stalls: slots 1100 to 1124 skipped
        engine.slots.read()
        while engine.slots.soon:
            engine.slots.read()
        assert [s for s, _ in worked] == [*range(1100), 1125]
        assert all(now == pytest.approx(at(s)) for s, now in worked)
    finally:
        engine.shutdown()
