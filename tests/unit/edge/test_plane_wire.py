"""What the media thread puts on the wire beyond Python's frames: its fillers in the
call's own payload type and law (a dynamic type too), RFC 4733 events on any type, and
its count of what went (``Plane.tally``), which the call's RTCP Sender Report says."""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import time

import pytest

from callhook.edge.mediaengine import MediaEngine
from callhook.edge.plane import Plane
from callhook.media import rtcp
from callhook.media.dtmfsend import END_PACKETS, TONE_TICKS, EventTone
from callhook.media.session import MediaSession
from tests.unit.edge.test_plane import drain, header, rtp, run, udp


class Ear:
    """A caller's socket read on a thread of its own while the test blocks the loop:
    every packet, with when it came."""

    def __init__(self, sock: socket.socket) -> None:
        sock.settimeout(0.5)
        self.sock = sock
        self.got: list[tuple[float, bytes]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._listen)

    def _listen(self) -> None:
        while not self._done.is_set():
            try:
                self.got.append((time.monotonic(), self.sock.recv(2048)))
            except OSError:
                continue

    def __enter__(self) -> Ear:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.sock.close()


@pytest.mark.parametrize(
    ("pt", "alaw", "silence"), [(8, True, 0xD5), (97, False, 0xFF), (97, True, 0xD5)]
)
def test_audio_is_filled_in_its_payload_type_and_law(
    plane: Plane, pt: int, alaw: bool, silence: int
) -> None:
    """PCMA on its static type, and PCMU or PCMA as the offer numbered it
    (sip/offeranswer.py takes the offerer's payload type, a dynamic one too): the fillers
    keep that type and the law's silence."""
    line, peer = udp(), udp()
    with line, peer:
        plane.add(line, "call", alaw=alaw)
        plane.send([(line.fileno(), rtp(7, 0, pt=pt), peer.getsockname())], 0)
        run(plane, 0)
        run(plane, 1)
        sent = drain(peer)
        assert [header(d) for d in sent] == [(0, pt, 7, 0), (0, pt, 8, 160)]
        assert sent[1][12:] == bytes([silence]) * 160
        assert plane.fillers == 1


def test_an_event_on_a_payload_type_below_96_goes_on_too(plane: Plane) -> None:
    """telephone-event as the offer numbered it, here 90: its next packets, not silence."""
    tone = EventTone("7", 160)
    packets = [tone.next_packet() for _ in range(TONE_TICKS - 1 + END_PACKETS)]
    line, peer = udp(), udp()
    with line, peer:
        plane.add(line, "call")
        to = peer.getsockname()
        plane.send([(line.fileno(), rtp(1, 0), to)], 0)
        payload, marker = packets[0]
        plane.send([(line.fileno(), rtp(2, 160, payload, 90, marker), to)], 1)
        for slot in range(len(packets) + 2):
            run(plane, slot)
        got = drain(peer)
        assert [header(d)[1] for d in got[1 : 1 + len(packets)]] == [90] * len(packets)
        assert [d[12:] for d in got[1 : 1 + len(packets)]] == [p for p, _ in packets]
        assert [header(d)[1] for d in got[1 + len(packets) :]] == [0]


def test_the_tally_counts_what_went_python_s_frames_fillers_and_events(plane: Plane) -> None:
    """The call's Sender Report says what went on the wire (RFC 3550 §6.4.1): Python's
    frames and what the thread made in their place, payload octets, the last timestamp."""
    tone = EventTone("3", 8320)
    payload, marker = tone.next_packet()
    line, peer = udp(), udp()
    with line, peer:
        plane.add(line, "call")
        fd, to = line.fileno(), peer.getsockname()
        assert plane.tally(fd) == (0, 0, 0, 0.0)
        plane.send([(fd, rtp(1, 8000), to)], 0)
        plane.send([(fd, rtp(3, 8320, payload, 101, marker), to)], 2)
        before = time.time()
        for slot in range(4):  # slot 1: a filler; slot 3: the event goes on
            run(plane, slot)
        after = time.time()
        assert len(drain(peer)) == 4
        packets, octets, stamp, at = plane.tally(fd)
        assert (packets, octets) == (4, 160 + 160 + 4 + 4)
        # The last audio packet's (slot 1's filler): an event's timestamp is its start,
        # not the media clock (RFC 4733 §2.5.1.2).
        assert stamp == 8160 and before <= at <= after
        assert plane.tally(9999) == (0, 0, 0, 0.0)  # (no such socket)


async def test_a_blocked_loop_fills_an_a_law_call_on_a_dynamic_type_with_its_silence() -> None:
    """PCMA as the offer numbered it (97): while the loop is blocked the caller still gets
    a packet every 20 ms, of that type, with A-law silence (what Python itself sends)."""
    engine = MediaEngine("127.0.0.1", 43300, 43400)
    with Ear(udp()) as ear:
        try:
            session = MediaSession("PCMA", 97, 101, ear.sock.getsockname(), label="call")
            sock, port = engine.allocate()
            await engine.open(session, sock, port, lambda: None)
            await asyncio.sleep(0.2)
            time.sleep(0.3)  # the loop does nothing: no tick of Python's runs
            await asyncio.sleep(0.2)
            got = ear.got
            # (The call's first packets wait for its first ticks: their gaps are not this.)
            gaps = [b - a for (a, _), (b, _) in itertools.pairwise(got[4:])]
            assert len(got) >= 25 and max(gaps) < 0.06
            assert {header(d)[1] for _, d in got} == {97}
            assert {d[12:] for _, d in got} == {b"\xd5" * 160}
            assert engine.plane is not None and engine.plane.fillers >= 10
        finally:
            engine.shutdown()


def rtp_rtcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two blocking sockets on ports p and p + 1: a caller's RTP and RTCP (RFC 3550 §11)."""
    for _ in range(200):
        rtp_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rtp_sock.bind(("127.0.0.1", 0))
        rtcp_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            rtcp_sock.bind(("127.0.0.1", rtp_sock.getsockname()[1] + 1))
        except OSError:
            rtp_sock.close()
            rtcp_sock.close()
            continue
        return rtp_sock, rtcp_sock
    raise RuntimeError("no two UDP ports in a row free")


@pytest.mark.solo  # (it measures what a real clock sent)
async def test_the_sender_report_counts_what_the_thread_sent_while_the_loop_was_blocked() -> None:
    """The SR's packet and octet counts are the packets the caller got, the thread's
    fillers among them, not the frames Python made (some of which came too late)."""
    # (Ports below the kernel's ephemeral range: the caller's pair never takes one.)
    engine = MediaEngine("127.0.0.1", 31400, 31500)
    caller, caller_rtcp = rtp_rtcp_pair()
    caller_rtcp.settimeout(2.0)
    with Ear(caller) as ear, caller_rtcp:
        try:
            session = MediaSession("PCMU", 0, 101, caller.getsockname(), label="call")
            sock, port = engine.allocate()
            await engine.open(session, sock, port, lambda: None)
            await asyncio.sleep(0.2)
            time.sleep(0.3)  # the loop does nothing: the thread fills in
            await asyncio.sleep(0.1)
            assert engine.plane is not None and engine.plane.fillers >= 5
            session.reports.due = 0.0  # a report now (else in 2.5 to 7.5 s)
            report = await asyncio.to_thread(caller_rtcp.recv, 2048)
            await asyncio.sleep(0.1)
            heard = len(ear.got)  # all sent up to the report, and at most 0.1 s more after it
            sr = rtcp.parse(report)[0]
            assert isinstance(sr, rtcp.SenderReport)
            assert heard - 8 <= sr.packet_count <= heard
            assert sr.octet_count == 160 * sr.packet_count
            # What Python made is not what went: its frames for the slots ahead are not
            # out yet (and the ones it made too late never went).
            assert session.sender.packets > sr.packet_count
        finally:
            engine.shutdown()
